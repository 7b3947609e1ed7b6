import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

// One rule for delays on every scheduler: a delay that is not a number (NaN, whatever its sign
// or payload) means never, as an infinite one and one past the clocks' 2^63 nanoseconds do.
// Nothing runs, nothing is left scheduled, and the work is released at once. Each test runs on
// every scheduler of the package; none waits for real time: work that a scheduler has let go
// of can never run.

final class NeverDelayTests: XCTestCase {
    /// Delays that mean never.
    private let neverDelays: [TimeInterval] = [.nan, -.nan, .signalingNaN, .infinity, 1e12]

    /// Each scheduler of the package, by name, and whether it has nothing pending (for the ones
    /// that can tell: a `TestScheduler`).
    private func schedulers() -> [(name: String, scheduler: any PromiseScheduler, isIdle: () -> Bool)] {
        let test = TestScheduler()
        var all: [(name: String, scheduler: any PromiseScheduler, isIdle: () -> Bool)] = [
            ("TestScheduler", test, { test.pendingCount == 0 && test.nextDueTime == nil }),
            ("DispatchScheduler", DispatchScheduler.global, { true }),
        ]
        if #available(macOS 13, iOS 16, tvOS 16, watchOS 9, *) {
            all.append(("ClockScheduler", ClockScheduler(ContinuousClock()), { true }))
        }
        return all
    }

    func testScheduledDelayIsNeverForEveryNaN() {
        for delay in neverDelays {
            XCTAssertEqual(ScheduledDelay(delay), .never, "\(delay)")
            XCTAssertNil(ScheduledDelay(delay).seconds, "\(delay)")
        }
        XCTAssertEqual(ScheduledDelay(-5), .now)
        XCTAssertEqual(ScheduledDelay(0.25), .after(0.25))
    }

    func testScheduleAfterNaNNeverRunsTheWorkAndReleasesItAtOnce() {
        for (name, scheduler, isIdle) in schedulers() {
            for delay in neverDelays {
                let ran = Flag()
                weak var weakProbe: DelayProbe?
                do {
                    let probe = DelayProbe()
                    weakProbe = probe
                    _ = scheduler.schedule(after: delay) {
                        probe.touch()
                        ran.raise()
                    }
                }
                XCTAssertNil(weakProbe, "\(name), \(delay): the work is not kept, so it can never run")
                XCTAssertTrue(isIdle(), "\(name), \(delay): nothing is scheduled")
                XCTAssertFalse(ran.value, "\(name), \(delay)")
            }
        }
    }

    /// The `TestScheduler` bug this rule fixed: `schedule(after: .nan)` ran the work at the next
    /// `advance` (`max(0, .nan)` is 0).
    func testTestSchedulerNeverRunsNaNDelayedWorkWhateverTimeDoes() {
        let scheduler = TestScheduler()
        let ran = Counter()
        for delay in neverDelays {
            _ = scheduler.schedule(after: delay) { ran.increment() }
        }
        XCTAssertEqual(scheduler.pendingCount, 0)
        XCTAssertNil(scheduler.nextDueTime)
        scheduler.advance(by: 0)
        scheduler.advance(by: 9e9)
        scheduler.run()
        XCTAssertEqual(ran.value, 0)
        XCTAssertEqual(scheduler.now, 9e9, "only the advances moved time")
    }

    func testAfterNaNNeverResolvesAndKeepsNoTimer() {
        for (name, scheduler, isIdle) in schedulers() {
            for delay in neverDelays {
                weak var weakWaited: Guarantee<Void>?
                do {
                    let waited = after(seconds: delay, scheduler: scheduler)
                    weakWaited = waited
                    XCTAssertTrue(waited.isPending, "\(name), \(delay)")
                    XCTAssertTrue(isIdle(), "\(name), \(delay): no timer is scheduled")
                }
                XCTAssertNil(weakWaited, "\(name), \(delay): no timer holds the guarantee")
            }
        }
    }

    func testTimeoutNaNNeverTimesOutKeepsNoTimerAndStillSettles() {
        for (name, scheduler, isIdle) in schedulers() {
            for delay in neverDelays {
                let (source, resolver) = Promise<Int>.pending()
                let timed = source.timeout(seconds: delay, scheduler: scheduler)
                let (cancellableSource, cancellableResolver) = CancellablePromise<Int>.pending()
                let cancellableTimed = cancellableSource.timeout(seconds: delay, scheduler: scheduler)
                let cancelled = CancellablePromise<Int>.pending().promise.timeout(seconds: delay, scheduler: scheduler)
                XCTAssertTrue(isIdle(), "\(name), \(delay): no timer is scheduled")
                XCTAssertTrue(timed.isPending && cancellableTimed.isPending && cancelled.isPending, "\(name), \(delay)")
                resolver.fulfill(1)
                cancellableResolver.fulfill(2)
                cancelled.cancel()
                XCTAssertEqual(timed.value, 1, "\(name), \(delay): settling the promise still settles it")
                XCTAssertEqual(cancellableTimed.value, 2, "\(name), \(delay)")
                XCTAssertEqual(cancelled.error as? CancellablePromiseError, .cancelled, "\(name), \(delay)")
            }
        }
    }

    /// The APIs that wait read a delay by the same rule before they reach any scheduler, so a
    /// scheduler of another package's making never sees a NaN, and sees a negative delay as 0.
    func testTheAPIsThatWaitHandASchedulerNoNaNAndNoNegativeDelay() {
        let recorder = RecordingScheduler()
        for delay in neverDelays {
            _ = after(seconds: delay, scheduler: recorder)
            _ = Promise<Int>.pending().promise.timeout(seconds: delay, scheduler: recorder)
            _ = CancellablePromise<Int>.pending().promise.timeout(seconds: delay, scheduler: recorder)
        }
        XCTAssertEqual(recorder.delays, [], "nothing is scheduled for never")
        _ = after(seconds: -1, scheduler: recorder)
        _ = Promise<Int>.pending().promise.timeout(seconds: -.infinity, scheduler: recorder)
        _ = after(seconds: 0.5, scheduler: recorder)
        XCTAssertEqual(recorder.delays, [0, 0, 0.5])
    }

    /// A retry's wait too long for any clock (a NaN or infinite one is a configuration error)
    /// follows the same rule: the retry waits for ever, and nothing is scheduled.
    func testARetryWaitPastEveryClockWaitsForEverAndSchedulesNothing() {
        for (name, scheduler, isIdle) in schedulers() {
            let attempts = Counter()
            let result = retry(maxAttempts: 3, delay: .fixed(1e300), scheduler: scheduler) { _ -> Promise<Int> in
                attempts.increment()
                return Promise(error: DelayTestError())
            }
            XCTAssertEqual(attempts.value, 1, name)
            XCTAssertTrue(isIdle(), "\(name): no timer is scheduled for the wait")
            XCTAssertTrue(result.isPending, name)
            result.cancel()
            XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled, name)
            XCTAssertEqual(attempts.value, 1, name)
        }
    }
}

private final class DelayProbe: Sendable {
    func touch() {}
}

private struct DelayTestError: Error {}

/// A scheduler that records the delays it is asked for and schedules nothing.
private final class RecordingScheduler: PromiseScheduler, @unchecked Sendable {
    // @unchecked: `recorded` is guarded by `lock`.
    private let lock = NSLock()
    private var recorded: [TimeInterval] = []

    var delays: [TimeInterval] {
        lock.lock()
        defer { lock.unlock() }
        return recorded
    }

    var now: TimeInterval { 0 }

    func schedule(after seconds: TimeInterval, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
        lock.lock()
        recorded.append(seconds)
        lock.unlock()
        return Unscheduled()
    }

    private struct Unscheduled: ScheduledWork {
        func cancel() {}
    }
}
