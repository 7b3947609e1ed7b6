import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// `timeout(seconds:scheduler:)` on promises and cancellable promises, on virtual time (a
// `TestScheduler`): no test waits for a deadline. Handlers use `on: nil` so nothing depends on
// the main queue being serviced.

final class TimeoutTests: XCTestCase {
    // MARK: Plain promises

    func testTimeoutRejectsWithTimeoutErrorSayingHowLongItWaited() throws {
        let scheduler = TestScheduler()
        let (source, _) = Promise<Int>.pending()
        let timed = source.timeout(seconds: 0.1, scheduler: scheduler)
        scheduler.advance(by: 0.099)
        XCTAssertTrue(timed.isPending, "not before its deadline")
        scheduler.advance(by: 0.001)
        let timeout = try XCTUnwrap(timed.error as? PromiseTimeoutError, "rejected at the deadline, by advance")
        XCTAssertEqual(timeout.seconds, 0.1)
        XCTAssertTrue("\(timeout)".contains("0.1 seconds"), "\(timeout)")
        XCTAssertEqual(timeout.localizedDescription, "The promise timed out after 0.1 seconds")
        XCTAssertTrue(source.isPending, "a plain source is not affected by the timeout")
    }

    // Real time: the default scheduler is the wall clock.
    func testTimeoutOnTheDefaultSchedulerFiresAfterTheDelay() {
        let start = Date()
        let result = waitForResult(Promise<Int>.pending().promise.timeout(seconds: 0.05))
        XCTAssertTrue(result?.rejectedError is PromiseTimeoutError)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 0.045)
    }

    func testTimeoutDoesNotFireWhenThePromiseSettlesFirst() {
        let scheduler = TestScheduler()
        let (source, resolver) = Promise<Int>.pending()
        let timed = source.timeout(seconds: 0.2, scheduler: scheduler)
        scheduler.advance(by: 0.1)
        resolver.fulfill(7)
        XCTAssertEqual(timed.value, 7)
        XCTAssertEqual(scheduler.pendingCount, 0, "the timer was unscheduled when the source settled")
        scheduler.advance(by: 1)
        XCTAssertEqual(timed.value, 7)
    }

    func testTimeoutPassesARejectionThrough() {
        let scheduler = TestScheduler()
        let timed = Promise<Int>(error: TimeoutTestError.boom).timeout(seconds: 5, scheduler: scheduler)
        XCTAssertEqual(timed.error as? TimeoutTestError, .boom)
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testTimeoutIsNotACancellationSoADefaultCatchSeesIt() {
        let scheduler = TestScheduler()
        let caught = Flag()
        let error = PromiseTimeoutError(seconds: 1)
        XCTAssertFalse(error.isCancelled)
        XCTAssertFalse((error as Error).isCancelled)
        Promise<Int>.pending().promise.timeout(seconds: 0.05, scheduler: scheduler).catch(on: nil) { error in
            XCTAssertTrue(error is PromiseTimeoutError)
            caught.raise()
        }
        scheduler.advance(by: 0.05)
        XCTAssertTrue(caught.value)
    }

    func testRecoverRunsForATimeoutWithTheDefaultPolicy() {
        let scheduler = TestScheduler()
        let recovered = Promise<Int>.pending().promise.timeout(seconds: 0.05, scheduler: scheduler).recover(on: nil) {
            error -> Promise<Int> in
            XCTAssertTrue(error is PromiseTimeoutError)
            return .value(-1)
        }
        scheduler.advance(by: 0.05)
        XCTAssertEqual(recovered.value, -1)
    }

    func testGuaranteeTimeout() {
        let scheduler = TestScheduler()
        let timed = after(seconds: 5, scheduler: scheduler).timeout(seconds: 0.05, scheduler: scheduler)
        scheduler.advance(by: 0.05)
        XCTAssertTrue(timed.error is PromiseTimeoutError)
    }

    func testZeroAndNegativeSecondsTimeOutAtOnceButAsynchronously() {
        let scheduler = TestScheduler()
        for seconds in [0, -3] as [TimeInterval] {
            let timed = Promise<Int>.pending().promise.timeout(seconds: seconds, scheduler: scheduler)
            XCTAssertTrue(timed.isPending, "never synchronously")
            scheduler.advance()
            XCTAssertEqual((timed.error as? PromiseTimeoutError)?.seconds, seconds)
        }
    }

    func testInfiniteAndNaNSecondsNeverTimeOut() {
        let scheduler = TestScheduler()
        for seconds in [.infinity, .nan] as [TimeInterval] {
            let (source, resolver) = Promise<Int>.pending()
            let timed = source.timeout(seconds: seconds, scheduler: scheduler)
            let cancellable = CancellablePromise<Int> { _ in {} }.timeout(seconds: seconds, scheduler: scheduler)
            XCTAssertEqual(scheduler.pendingCount, 0, "\(seconds): no timer is scheduled")
            scheduler.advance(by: 1e9)
            XCTAssertTrue(timed.isPending, "\(seconds): NaN counts as infinitely many seconds")
            XCTAssertTrue(cancellable.isPending)
            resolver.fulfill(1)
            XCTAssertEqual(timed.value, 1)
            cancellable.cancel()
        }
        // The default scheduler follows the same rule.
        let timed = Promise<Int>.pending().promise.timeout(seconds: .nan)
        XCTAssertTrue(timed.isPending)
    }

    func testTimerAndOutputAreReleasedWhenThePromiseSettlesFirst() {
        let scheduler = TestScheduler()
        let (source, resolver) = Promise<Int>.pending()
        weak var weakTimed: Promise<Int>?
        do {
            let timed = source.timeout(seconds: 600, scheduler: scheduler)
            weakTimed = timed
        }
        XCTAssertNotNil(weakTimed, "pending: kept by the timer and the source")
        resolver.fulfill(1)
        XCTAssertNil(weakTimed, "the unscheduled timer released the promise at once")
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    // Real time: the default scheduler's dispatch timer releases the promise when cancelled.
    func testTimerAndOutputAreReleasedOnTheDefaultSchedulerWhenThePromiseSettlesFirst() {
        let (source, resolver) = Promise<Int>.pending()
        weak var weakTimed: Promise<Int>?
        do {
            let timed = source.timeout(seconds: 600)
            weakTimed = timed
        }
        resolver.fulfill(1)
        XCTAssertNil(weakTimed, "the 600 s timer still holds the promise")
    }

    func testAPendingTimeoutKeepsItselfAliveUntilItFires() {
        let scheduler = TestScheduler()
        weak var weakTimed: Promise<Int>?
        let fired = Flag()
        do {
            let timed = Promise<Int>.pending().promise.timeout(seconds: 0.05, scheduler: scheduler)
            timed.catch(on: nil) { _ in fired.raise() }
            weakTimed = timed
        }
        XCTAssertNotNil(weakTimed)
        scheduler.advance(by: 0.05)
        XCTAssertTrue(fired.value)
        XCTAssertNil(weakTimed)
    }

    // MARK: Cancellable promises

    func testCancellableTimeoutCancelsTheSourceChainAndItsTaskWithTheTimeoutError() {
        let scheduler = TestScheduler()
        let cancelCalls = Counter()
        let source = CancellablePromise<Int> { _ in { cancelCalls.increment() } }
        let mapped = Counter()
        let timed = source.timeout(seconds: 0.1, scheduler: scheduler)
        let tail = timed.map(on: nil) { value -> Int in
            mapped.increment()
            return value
        }
        scheduler.advance(by: 0.1)
        XCTAssertEqual((tail.error as? PromiseTimeoutError)?.seconds, 0.1)
        XCTAssertTrue(source.error is PromiseTimeoutError, "the source is rejected with the timeout error")
        XCTAssertTrue(timed.error is PromiseTimeoutError)
        XCTAssertEqual(cancelCalls.value, 1, "the source's task is cancelled exactly once")
        XCTAssertEqual(mapped.value, 0)
        XCTAssertTrue(source.isCancelled, "the chain's cancellation was requested")
        XCTAssertTrue(source.cancelledError is PromiseTimeoutError)
        XCTAssertFalse(source.error!.isCancelled, "but the error is not a cancellation")
    }

    // Real time: the default scheduler is the wall clock.
    func testCancellableTimeoutOnTheDefaultSchedulerCancelsTheSource() {
        let source = CancellablePromise<Int> { _ in {} }
        let result = waitForResult(source.timeout(seconds: 0.02))
        XCTAssertTrue(result?.rejectedError is PromiseTimeoutError)
        XCTAssertTrue(source.isCancelled)
    }

    func testCancellableTimeoutReachesADefaultCatch() {
        let scheduler = TestScheduler()
        let caught = Flag()
        let finalized = Flag()
        CancellablePromise<Int> { _ in {} }
            .timeout(seconds: 0.05, scheduler: scheduler)
            .done(on: nil) { _ in XCTFail("no value") }
            .catch(on: nil) { error in
                XCTAssertTrue(error is PromiseTimeoutError)
                caught.raise()
            }
            .finally(on: nil) { finalized.raise() }
        scheduler.advance(by: 0.05)
        XCTAssertTrue(caught.value)
        XCTAssertTrue(finalized.value)
    }

    func testCancellableTimeoutDoesNotFireWhenTheSourceSettlesFirst() {
        let scheduler = TestScheduler()
        let cancelCalls = Counter()
        var resolverRef: Resolver<Int>?
        let source = CancellablePromise<Int> { resolver in
            resolverRef = resolver
            return { cancelCalls.increment() }
        }
        let timed = source.timeout(seconds: 0.15, scheduler: scheduler)
        resolverRef?.fulfill(3)
        XCTAssertEqual(timed.value, 3)
        XCTAssertEqual(scheduler.pendingCount, 0, "unscheduled when the source settled")
        scheduler.advance(by: 1)
        XCTAssertFalse(source.isCancelled)
        XCTAssertEqual(cancelCalls.value, 0)
        XCTAssertEqual(timed.value, 3)
    }

    func testCancellableTimeoutStopsAnAttachedTimer() {
        // `after` attaches its timer: the timeout cancels it, so the guarantee never resolves.
        let scheduler = TestScheduler()
        let slow = after(seconds: 0.3, scheduler: scheduler)
        let timed = slow.cancellize().timeout(seconds: 0.05, scheduler: scheduler)
        scheduler.advance(by: 0.05)
        XCTAssertTrue(timed.error is PromiseTimeoutError)
        XCTAssertEqual(scheduler.pendingCount, 0, "the underlying timer was unscheduled")
        scheduler.advance(by: 1)
        XCTAssertTrue(slow.isPending, "the underlying timer was cancelled")
    }

    func testCancellingTheChainBeforeTheTimeoutKeepsTheCancellationError() {
        let scheduler = TestScheduler()
        let source = CancellablePromise<Int> { _ in {} }
        let timed = source.timeout(seconds: 0.1, scheduler: scheduler)
        timed.cancel()
        XCTAssertEqual(timed.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(scheduler.pendingCount, 0, "cancelling unscheduled the timer")
        scheduler.advance(by: 1)
        XCTAssertEqual(source.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(timed.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellableTimerIsReleasedWhenTheSourceSettlesFirst() {
        let scheduler = TestScheduler()
        weak var weakContext: CancelContext?
        let resolver: Resolver<Int>
        do {
            let (source, sourceResolver) = CancellablePromise<Int>.pending()
            resolver = sourceResolver
            _ = source.timeout(seconds: 600, scheduler: scheduler)
            weakContext = source.cancelContext
        }
        XCTAssertNotNil(weakContext, "the pending timer can still cancel the source")
        resolver.fulfill(1)
        XCTAssertNil(weakContext, "the 600 s timer still holds the chain")
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testCancellableTimerIsReleasedWhenTheChainIsCancelled() {
        let scheduler = TestScheduler()
        weak var weakContext: CancelContext?
        do {
            let timed = CancellablePromise<Int> { _ in {} }.timeout(seconds: 600, scheduler: scheduler)
            weakContext = timed.cancelContext
            timed.cancel()
        }
        XCTAssertNil(weakContext, "the 600 s timer still holds the chain")
        XCTAssertEqual(scheduler.pendingCount, 0)
    }
}

private enum TimeoutTestError: Error, Equatable { case boom }
