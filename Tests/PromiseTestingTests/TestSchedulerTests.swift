import Dispatch
import Foundation
import PromiseCore
import PromiseTesting
import TestSupport
import XCTest

// `TestScheduler`: virtual time, order, reentrancy, cancellation and lifetime, threads.

final class TestSchedulerTests: XCTestCase {
    // MARK: Time and order

    func testTimeStandsStillUntilAdvanced() {
        let scheduler = TestScheduler()
        let ran = Flag()
        _ = scheduler.schedule(after: 1) { ran.raise() }
        XCTAssertEqual(scheduler.now, 0)
        XCTAssertEqual(scheduler.pendingCount, 1)
        XCTAssertEqual(scheduler.nextDueTime, 1)
        scheduler.advance(by: 0.999)
        XCTAssertFalse(ran.value)
        scheduler.advance(by: 0.001)
        XCTAssertTrue(ran.value)
        XCTAssertEqual(scheduler.now, 1)
        XCTAssertEqual(scheduler.pendingCount, 0)
        XCTAssertNil(scheduler.nextDueTime)
    }

    func testDueWorkRunsInTimeOrderThenScheduleOrderWithNowAtItsDueTime() {
        let scheduler = TestScheduler(now: 10)
        let order = Recorder<String>()
        for (name, delay) in [("c", 3.0), ("a", 1.0), ("b", 2.0), ("a2", 1.0), ("late", 7.0)] {
            _ = scheduler.schedule(after: delay) { order.append("\(name)@\(scheduler.now)") }
        }
        scheduler.advance(by: 5)
        XCTAssertEqual(order.all, ["a@11.0", "a2@11.0", "b@12.0", "c@13.0"])
        XCTAssertEqual(scheduler.now, 15)
        XCTAssertEqual(scheduler.pendingCount, 1)
    }

    func testWorkRunsSynchronouslyOnTheCallingThread() {
        let scheduler = TestScheduler()
        let thread = SendableBox<Thread?>(nil)
        _ = scheduler.schedule(after: 0.5) { thread.value = Thread.current }
        scheduler.advance(by: 0.5)
        XCTAssertTrue(thread.value === Thread.current)
    }

    func testWorkScheduledWhileAdvancingRunsInTheSameAdvanceIfItFallsDue() {
        let scheduler = TestScheduler()
        let order = Recorder<TimeInterval>()
        _ = scheduler.schedule(after: 1) {
            order.append(scheduler.now)
            _ = scheduler.schedule(after: 1) { order.append(scheduler.now) }  // due at 2
            _ = scheduler.schedule(after: 5) { order.append(scheduler.now) }  // due at 6
            _ = scheduler.schedule(after: 0) { order.append(scheduler.now) }  // due at 1, after this
        }
        scheduler.advance(by: 3)
        XCTAssertEqual(order.all, [1, 1, 2])
        XCTAssertEqual(scheduler.pendingCount, 1)
        XCTAssertEqual(scheduler.nextDueTime, 6)
    }

    func testAdvanceToMovesToAnAbsoluteTime() {
        let scheduler = TestScheduler()
        let ran = Counter()
        _ = scheduler.schedule(after: 2) { ran.increment() }
        _ = scheduler.schedule(after: 4) { ran.increment() }
        scheduler.advance(to: 3)
        XCTAssertEqual(ran.value, 1)
        XCTAssertEqual(scheduler.now, 3)
        scheduler.advance(to: 3)
        XCTAssertEqual(ran.value, 1, "advancing to now runs nothing new")
        scheduler.advance(to: 4)
        XCTAssertEqual(ran.value, 2)
    }

    func testRunRunsEverythingUntilNothingIsScheduled() {
        let scheduler = TestScheduler()
        let order = Recorder<TimeInterval>()
        _ = scheduler.schedule(after: 100) {
            order.append(scheduler.now)
            _ = scheduler.schedule(after: 50) { order.append(scheduler.now) }
        }
        _ = scheduler.schedule(after: 3) { order.append(scheduler.now) }
        scheduler.run()
        XCTAssertEqual(order.all, [3, 100, 150])
        XCTAssertEqual(scheduler.now, 150)
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testZeroAndNegativeDelaysRunAtTheNextAdvanceNeverInsideSchedule() {
        let scheduler = TestScheduler()
        let ran = Counter()
        _ = scheduler.schedule(after: 0) { ran.increment() }
        _ = scheduler.schedule(after: -5) { ran.increment() }
        XCTAssertEqual(ran.value, 0, "never synchronously inside schedule")
        XCTAssertEqual(scheduler.nextDueTime, 0, "a negative delay means now")
        scheduler.advance()
        XCTAssertEqual(ran.value, 2)
        XCTAssertEqual(scheduler.now, 0)
    }

    func testInfiniteAndNaNDelaysScheduleNothingAndReleaseTheWork() {
        let scheduler = TestScheduler()
        weak var weakProbe: Probe?
        do {
            let probe = Probe()
            weakProbe = probe
            for delay in [TimeInterval.infinity, .nan] {
                let work = scheduler.schedule(after: delay) { probe.touch() }
                work.cancel()
            }
        }
        XCTAssertNil(weakProbe, "never-due work is not kept")
        XCTAssertEqual(scheduler.pendingCount, 0)
        scheduler.run()
    }

    func testTimeIsCountedInWholeNanosecondsSoSmallStepsAddUpExactly() {
        let scheduler = TestScheduler()
        let ran = Flag()
        _ = scheduler.schedule(after: 0.3) { ran.raise() }
        for _ in 0..<3 { scheduler.advance(by: 0.1) }
        XCTAssertTrue(ran.value, "0.1 + 0.1 + 0.1 reaches 0.3")
        XCTAssertEqual(scheduler.now, 0.3)
        _ = scheduler.schedule(after: 0.1 + 0.2) { ran.raise() }
        XCTAssertEqual(scheduler.nextDueTime, 0.6)
    }

    func testAdvanceByADispatchTimeInterval() {
        let scheduler = TestScheduler()
        let ran = Flag()
        _ = scheduler.schedule(after: 0.25) { ran.raise() }
        scheduler.advance(by: .milliseconds(250))
        XCTAssertTrue(ran.value)
        XCTAssertEqual(scheduler.now, 0.25)
    }

    // MARK: Cancellation and lifetime

    func testCancellingRemovesTheItemAndReleasesItsClosureAtOnce() {
        let scheduler = TestScheduler()
        let ran = Flag()
        weak var weakProbe: Probe?
        let work: any ScheduledWork
        do {
            let probe = Probe()
            weakProbe = probe
            work = scheduler.schedule(after: 1) {
                probe.touch()
                ran.raise()
            }
        }
        XCTAssertNotNil(weakProbe, "the scheduler holds pending work")
        work.cancel()
        XCTAssertNil(weakProbe, "released by cancel(), before it returns")
        XCTAssertEqual(scheduler.pendingCount, 0)
        XCTAssertNil(scheduler.nextDueTime)
        scheduler.run()
        XCTAssertFalse(ran.value)
        work.cancel()  // a second cancel is a no-op
    }

    func testWorkThatRanIsReleasedAndCancellingItAfterwardsIsANoOp() {
        let scheduler = TestScheduler()
        weak var weakProbe: Probe?
        let work: any ScheduledWork
        do {
            let probe = Probe()
            weakProbe = probe
            work = scheduler.schedule(after: 1) { probe.touch() }
        }
        scheduler.advance(by: 1)
        XCTAssertNil(weakProbe)
        work.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testWorkCanCancelLaterWorkWhileAdvancing() {
        let scheduler = TestScheduler()
        let ran = Recorder<String>()
        let later = scheduler.schedule(after: 2) { ran.append("later") }
        _ = scheduler.schedule(after: 1) {
            ran.append("first")
            later.cancel()
        }
        scheduler.advance(by: 5)
        XCTAssertEqual(ran.all, ["first"])
    }

    func testDroppingTheSchedulerReleasesItsPendingWork() {
        weak var weakProbe: Probe?
        weak var weakScheduler: TestScheduler?
        var work: (any ScheduledWork)?
        do {
            let scheduler = TestScheduler()
            weakScheduler = scheduler
            let probe = Probe()
            weakProbe = probe
            work = scheduler.schedule(after: 1) { probe.touch() }
        }
        XCTAssertNil(weakScheduler, "a scheduled item does not keep its scheduler")
        XCTAssertNil(weakProbe)
        work?.cancel()
    }

    func testManyCancelledItemsDoNotAccumulate() {
        let scheduler = TestScheduler()
        for _ in 0..<10_000 {
            scheduler.schedule(after: 5) {}.cancel()
        }
        let ran = Flag()
        _ = scheduler.schedule(after: 1) { ran.raise() }
        XCTAssertEqual(scheduler.pendingCount, 1)
        scheduler.advance(by: 1)
        XCTAssertTrue(ran.value)
    }

    // MARK: Threads

    func testScheduleAndCancelFromManyThreads() {
        let scheduler = TestScheduler()
        let ran = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for index in 0..<500 {
                let work = scheduler.schedule(after: Double(index % 7)) { ran.increment() }
                if index.isMultiple(of: 2) { work.cancel() }
            }
        }
        XCTAssertEqual(scheduler.pendingCount, 8 * 250)
        scheduler.run()
        XCTAssertEqual(ran.value, 8 * 250)
        XCTAssertEqual(scheduler.now, 6, "the latest item's due time")
    }

    func testWorkScheduledFromAnotherThreadWhileAdvancingRunsOnceIfDue() {
        let scheduler = TestScheduler()
        let ran = Counter()
        let scheduled = Handshake()
        DispatchQueue.global().async {
            for _ in 0..<1_000 { _ = scheduler.schedule(after: 0) { ran.increment() } }
            scheduled.signal()
        }
        while !scheduled.hasArrived { scheduler.advance() }
        scheduler.advance()
        XCTAssertEqual(ran.value, 1_000)
    }
}

/// An object whose lifetime a test observes through a weak reference.
private final class Probe: Sendable {
    func touch() {}
}
