import Dispatch
import Foundation
import TestSupport
import XCTest

@testable import PromiseCore
@testable import PromiseTesting

// `TestScheduler`'s "Exact time": whole nanoseconds, each value rounded on its own, due times
// past the clock's range never due, and misuses of the clock named in their precondition
// messages (checked through the values the preconditions test, since a failing precondition
// stops the test process).

final class TestSchedulerExactTimeTests: XCTestCase {
    // MARK: Delays the clock cannot hold

    /// "Work whose due time is past the last time the clock can hold … is never due: nothing is
    /// scheduled and the closure is released at once."
    func testDelayPastTheClocksRangeSchedulesNothingAndReleasesTheWork() {
        let scheduler = TestScheduler()
        weak var weakProbe: ExactTimeProbe?
        do {
            let probe = ExactTimeProbe()
            weakProbe = probe
            _ = scheduler.schedule(after: 1e12) { probe.touch() }
            _ = scheduler.schedule(after: 1e300) { probe.touch() }
        }
        XCTAssertNil(weakProbe, "never-due work is not kept")
        XCTAssertEqual(scheduler.pendingCount, 0)
        XCTAssertNil(scheduler.nextDueTime)
    }

    /// A due time past the clock's range from a later `now` is never due either: it is the due
    /// time, not the delay alone, that the clock must hold.
    func testDelayWhoseDueTimeOverflowsFromALaterNowIsNeverDue() {
        let scheduler = TestScheduler(now: 1e9)
        let ran = Flag()
        _ = scheduler.schedule(after: 9e9) { ran.raise() }
        XCTAssertEqual(scheduler.pendingCount, 0)
        _ = scheduler.schedule(after: 8e9) { ran.raise() }
        XCTAssertEqual(scheduler.nextDueTime, 9e9, "a due time within the range is scheduled as asked")
        scheduler.run()
        XCTAssertEqual(scheduler.now, 9e9)
    }

    /// "A scheduler never runs work earlier than asked": `after(seconds: 1e12)` stays pending
    /// after everything scheduled has run, where it used to fire at about 9.2e9 s.
    func testAfterPastTheClocksRangeNeverResolves() {
        let scheduler = TestScheduler()
        let waited = after(seconds: 1e12, scheduler: scheduler)
        scheduler.run()
        XCTAssertTrue(waited.isPending)
        XCTAssertEqual(scheduler.now, 0, "run() had nothing to run: time did not move")
    }

    /// The wall-clock and package-wide rule: 2^63 nanoseconds or more is never; just below it
    /// is a delay.
    func testNeverDelayStartsAtTwoToTheSixtyThreeNanoseconds() {
        XCTAssertEqual(ScheduledDelay(.infinity), .never)
        XCTAssertEqual(ScheduledDelay(.nan), .never)
        XCTAssertEqual(ScheduledDelay(-.infinity), .now)
        XCTAssertEqual(ScheduledDelay(1e12), .never)
        XCTAssertEqual(ScheduledDelay(0x1p63 / 1e9), .never)
        XCTAssertEqual(ScheduledDelay(9.2e9), .after(9.2e9))
        XCTAssertEqual(ScheduledDelay(1e9), .after(1e9), "31 years is a delay, no longer clamped")
        XCTAssertEqual(ScheduledDelay(-1), .now)
        XCTAssertEqual(ScheduledDelay(0), .now)
        XCTAssertEqual(ScheduledDelay(-0.0), .now)
        XCTAssertEqual(ScheduledDelay(.nan).seconds, nil)
        XCTAssertEqual(ScheduledDelay(-1).seconds, 0)
        XCTAssertEqual(ScheduledDelay(0.5).seconds, 0.5)
    }

    /// `DispatchScheduler` schedules nothing for a delay it cannot represent (it used to clamp
    /// to 1e9 s and run the work then): the work is released at once.
    func testDispatchSchedulerReleasesWorkPastItsRange() {
        weak var weakProbe: ExactTimeProbe?
        do {
            let probe = ExactTimeProbe()
            weakProbe = probe
            let work = DispatchScheduler.global.schedule(after: 1e12) { probe.touch() }
            _ = work
        }
        XCTAssertNil(weakProbe, "nothing is scheduled: the work is released before schedule returns")
    }

    // MARK: Rounding

    /// "A step below half a nanosecond does not move the clock, however often it is taken."
    func testStepsBelowHalfANanosecondDoNotMoveTheClock() {
        let scheduler = TestScheduler()
        for _ in 0..<10 { scheduler.advance(by: 1e-10) }
        XCTAssertEqual(scheduler.now, 0)
        scheduler.advance(by: 6e-10)
        XCTAssertEqual(scheduler.now, 1e-9, "0.6 ns rounds to one nanosecond")
        scheduler.advance(by: 1.4e-9)
        XCTAssertEqual(scheduler.now, 2e-9, "1.4 ns rounds to one nanosecond")
    }

    /// "`schedule(after: d)` then `advance(by: d)` always runs the work, whatever `d` and
    /// `now`", sub-nanosecond fractions included.
    func testScheduleThenAdvanceBySameDelayAlwaysRunsTheWork() {
        var generator = SeededGenerator(seed: 42)
        for _ in 0..<1_000 {
            let start = Double.random(in: -1e6...1e6, using: &generator)
            let delay = Double.random(in: 0...1e4, using: &generator)
            let scheduler = TestScheduler(now: start)
            let ran = Flag()
            _ = scheduler.schedule(after: delay) { ran.raise() }
            scheduler.advance(by: delay)
            XCTAssertTrue(ran.value, "now \(start), delay \(delay)")
        }
    }

    /// A delay below half a nanosecond is due now: the next `advance()` runs it.
    func testDelayBelowHalfANanosecondIsDueNow() {
        let scheduler = TestScheduler()
        let ran = Flag()
        _ = scheduler.schedule(after: 4e-10) { ran.raise() }
        XCTAssertEqual(scheduler.nextDueTime, 0)
        scheduler.advance()
        XCTAssertTrue(ran.value)
    }

    /// `advance(by: DispatchTimeInterval)` is exact in nanoseconds, with no detour through
    /// seconds.
    func testAdvanceByDispatchIntervalsAddsWholeNanoseconds() {
        let scheduler = TestScheduler()
        for _ in 0..<3 { scheduler.advance(by: .nanoseconds(1)) }
        XCTAssertEqual(scheduler.now, 3e-9)
        scheduler.advance(by: .microseconds(2))
        scheduler.advance(by: .milliseconds(5))
        scheduler.advance(by: .seconds(1))
        XCTAssertEqual(scheduler.now, 1.005002003)
    }

    // MARK: Misuse messages

    /// `TestScheduler(now: .nan)`: "stops the program with a precondition failure naming the
    /// call".
    func testStartTimeThatIsNotANumberIsNamedInTheMessage() {
        XCTAssertEqual(
            misuse(Nanoseconds.start(.nan)), "TestScheduler.init(now: nan): a time must be a number of seconds, not NaN"
        )
        XCTAssertEqual(
            misuse(Nanoseconds.start(.infinity)),
            "TestScheduler.init(now: inf): the clock cannot hold this time, \(TimeMisuse.range)")
        XCTAssertEqual(
            misuse(Nanoseconds.start(-1e300)),
            "TestScheduler.init(now: -1e+300): the clock cannot hold this time, \(TimeMisuse.range)")
        XCTAssertNil(misuse(Nanoseconds.start(-9e9)), "the range goes about 292 years both ways")
    }

    /// `advance(by: .never)` says that time never reaches it and points to `run()`.
    func testAdvanceByNeverIsNamedInTheMessage() {
        XCTAssertEqual(
            misuse(Nanoseconds.duration(DispatchTimeInterval.never)),
            "TestScheduler.advance(by: never): time never reaches .never; use run() to run everything")
        XCTAssertEqual(
            misuse(Nanoseconds.duration(DispatchTimeInterval.seconds(-1))),
            "TestScheduler.advance(by: seconds(-1)): time does not go back; the duration must not be negative")
        XCTAssertNotNil(misuse(Nanoseconds.duration(DispatchTimeInterval.seconds(Int.max))))
    }

    /// `advance(by: 1e300)` is refused with a message instead of leaving `now` at about
    /// 9.2e9 s; so is a duration that fits but would carry time past the end from `now`.
    func testAdvancingPastTheClocksRangeIsNamedInTheMessage() {
        XCTAssertEqual(
            misuse(Nanoseconds.duration(1e300, call: "advance(by: 1e+300)")),
            "TestScheduler.advance(by: 1e+300): the clock cannot move this far, \(TimeMisuse.range)")
        XCTAssertEqual(
            misuse(Nanoseconds.duration(.infinity, call: "advance(by: inf)")),
            "TestScheduler.advance(by: inf): time never reaches infinity; use run() to run everything")
        XCTAssertEqual(
            misuse(Nanoseconds.duration(.nan, call: "advance(by: nan)")),
            "TestScheduler.advance(by: nan): a duration must be a number of seconds, not NaN")
        let now = Nanoseconds(value: 5_000_000_000_000_000_000)
        XCTAssertEqual(
            misuse(now.advanced(by: now, call: "advance(by: 5000000000.0)")),
            "TestScheduler.advance(by: 5000000000.0): from now (5000000000.0 s) that would carry time past "
                + "the clock's end, \(TimeMisuse.range)")
    }

    /// The range the messages state is the clock's: 2^63 − 1 nanoseconds is a time, 2^63 is not.
    func testTheStatedRangeIsTheClocksRange() {
        XCTAssertEqual(Nanoseconds(roundingSeconds: 9_223_372_036.854_775)?.value, 9_223_372_036_854_774_784)
        XCTAssertNil(Nanoseconds(roundingSeconds: 0x1p63 / 1e9))
        XCTAssertEqual(Nanoseconds(roundingSeconds: -0x1p63 / 1e9)?.value, .min)
    }

    /// The misuse message of a checked value, `nil` when it is fine.
    private func misuse<T>(_ checked: Swift.Result<T, TimeMisuse>) -> String? {
        if case .failure(let misuse) = checked { return misuse.description }
        return nil
    }
}

/// An object whose lifetime a test observes through a weak reference.
private final class ExactTimeProbe: Sendable {
    func touch() {}
}
