import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// `timeout(seconds:)` on promises and cancellable promises. Handlers use `on: nil` so nothing
// depends on the main queue being serviced.

final class TimeoutTests: XCTestCase {
    // MARK: Plain promises

    func testTimeoutRejectsWithTimeoutErrorSayingHowLongItWaited() throws {
        let (source, _) = Promise<Int>.pending()
        let start = Date()
        let result = waitForResult(source.timeout(seconds: 0.1))
        let elapsed = Date().timeIntervalSince(start)
        guard case .rejected(let error)? = result else {
            return XCTFail("expected a rejection, got \(String(describing: result))")
        }
        let timeout = try XCTUnwrap(error as? PromiseTimeoutError)
        XCTAssertEqual(timeout.seconds, 0.1)
        XCTAssertTrue("\(timeout)".contains("0.1 seconds"), "\(timeout)")
        XCTAssertEqual(timeout.localizedDescription, "The promise timed out after 0.1 seconds")
        XCTAssertGreaterThanOrEqual(elapsed, 0.09)
        XCTAssertTrue(source.isPending, "a plain source is not affected by the timeout")
    }

    func testTimeoutDoesNotFireWhenThePromiseSettlesFirst() {
        let (source, resolver) = Promise<Int>.pending()
        let timed = source.timeout(seconds: 0.2)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.02) { resolver.fulfill(7) }
        XCTAssertEqual(waitForResult(timed)?.fulfilledValue, 7)
        // A fixed wait, the only way to show the timer never fires: past its 0.2 s deadline.
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(timed.value, 7)
    }

    func testTimeoutPassesARejectionThrough() {
        let timed = Promise<Int>(error: TimeoutTestError.boom).timeout(seconds: 5)
        XCTAssertEqual(waitForResult(timed)?.rejectedError as? TimeoutTestError, .boom)
    }

    func testTimeoutIsNotACancellationSoADefaultCatchSeesIt() {
        let caught = expectation(description: "default catch runs for the timeout")
        let error = PromiseTimeoutError(seconds: 1)
        XCTAssertFalse(error.isCancelled)
        XCTAssertFalse((error as Error).isCancelled)
        Promise<Int>.pending().promise.timeout(seconds: 0.05).catch(on: nil) { error in
            XCTAssertTrue(error is PromiseTimeoutError)
            caught.fulfill()
        }
        wait(for: [caught], timeout: 5)
    }

    func testRecoverRunsForATimeoutWithTheDefaultPolicy() {
        let recovered = Promise<Int>.pending().promise.timeout(seconds: 0.05).recover(on: nil) {
            error -> Promise<Int> in
            XCTAssertTrue(error is PromiseTimeoutError)
            return .value(-1)
        }
        XCTAssertEqual(waitForResult(recovered)?.fulfilledValue, -1)
    }

    func testGuaranteeTimeout() {
        let timed = after(seconds: 5).timeout(seconds: 0.05)
        XCTAssertTrue(waitForResult(timed)?.rejectedError is PromiseTimeoutError)
    }

    func testZeroAndNegativeSecondsTimeOutAtOnceButAsynchronously() {
        for seconds in [0, -3] as [TimeInterval] {
            let timed = Promise<Int>.pending().promise.timeout(seconds: seconds)
            XCTAssertEqual((waitForResult(timed)?.rejectedError as? PromiseTimeoutError)?.seconds, seconds)
        }
    }

    func testTimerAndOutputAreReleasedWhenThePromiseSettlesFirst() {
        let (source, resolver) = Promise<Int>.pending()
        weak var weakTimed: Promise<Int>?
        do {
            let timed = source.timeout(seconds: 600)
            weakTimed = timed
        }
        XCTAssertNotNil(weakTimed, "pending: kept by the timer and the source")
        resolver.fulfill(1)
        XCTAssertTrue(eventually { weakTimed == nil }, "the 600 s timer still holds the promise")
    }

    func testAPendingTimeoutKeepsItselfAliveUntilItFires() {
        weak var weakTimed: Promise<Int>?
        let fired = expectation(description: "fired")
        do {
            let timed = Promise<Int>.pending().promise.timeout(seconds: 0.05)
            timed.catch(on: nil) { _ in fired.fulfill() }
            weakTimed = timed
        }
        wait(for: [fired], timeout: 5)
        XCTAssertTrue(eventually { weakTimed == nil })
    }

    // MARK: Cancellable promises

    func testCancellableTimeoutCancelsTheSourceChainAndItsTaskWithTheTimeoutError() {
        let cancelCalls = Counter()
        let source = CancellablePromise<Int> { _ in { cancelCalls.increment() } }
        let mapped = Counter()
        let timed = source.timeout(seconds: 0.1)
        let tail = timed.map(on: nil) { value -> Int in
            mapped.increment()
            return value
        }
        let result = waitForResult(tail)
        XCTAssertEqual((result?.rejectedError as? PromiseTimeoutError)?.seconds, 0.1)
        XCTAssertTrue(source.error is PromiseTimeoutError, "the source is rejected with the timeout error")
        XCTAssertTrue(timed.error is PromiseTimeoutError)
        XCTAssertEqual(cancelCalls.value, 1, "the source's task is cancelled exactly once")
        XCTAssertEqual(mapped.value, 0)
        XCTAssertTrue(source.isCancelled, "the chain's cancellation was requested")
        XCTAssertTrue(source.cancelledError is PromiseTimeoutError)
        XCTAssertFalse(source.error!.isCancelled, "but the error is not a cancellation")
    }

    func testCancellableTimeoutReachesADefaultCatch() {
        let caught = expectation(description: "default catch runs")
        let finalized = expectation(description: "finally runs")
        CancellablePromise<Int> { _ in {} }
            .timeout(seconds: 0.05)
            .done(on: nil) { _ in XCTFail("no value") }
            .catch(on: nil) { error in
                XCTAssertTrue(error is PromiseTimeoutError)
                caught.fulfill()
            }
            .finally(on: nil) { finalized.fulfill() }
        wait(for: [caught, finalized], timeout: 5)
    }

    func testCancellableTimeoutDoesNotFireWhenTheSourceSettlesFirst() {
        let cancelCalls = Counter()
        var resolverRef: Resolver<Int>?
        let source = CancellablePromise<Int> { resolver in
            resolverRef = resolver
            return { cancelCalls.increment() }
        }
        let timed = source.timeout(seconds: 0.15)
        resolverRef?.fulfill(3)
        XCTAssertEqual(waitForResult(timed)?.fulfilledValue, 3)
        // A fixed wait, the only way to show the timer never fires: past its 0.15 s deadline.
        Thread.sleep(forTimeInterval: 0.25)
        XCTAssertFalse(source.isCancelled)
        XCTAssertEqual(cancelCalls.value, 0)
        XCTAssertEqual(timed.value, 3)
    }

    func testCancellableTimeoutStopsAnAttachedTimer() {
        // `after` attaches its timer: the timeout cancels it, so the guarantee never resolves.
        let slow = after(seconds: 0.3)
        let timed = slow.cancellize().timeout(seconds: 0.05)
        XCTAssertTrue(waitForResult(timed)?.rejectedError is PromiseTimeoutError)
        // A fixed wait, the only way to show the stopped timer never fires: past its 0.3 s deadline.
        Thread.sleep(forTimeInterval: 0.45)
        XCTAssertTrue(slow.isPending, "the underlying timer was cancelled")
    }

    func testCancellingTheChainBeforeTheTimeoutKeepsTheCancellationError() {
        let source = CancellablePromise<Int> { _ in {} }
        let timed = source.timeout(seconds: 0.1)
        timed.cancel()
        XCTAssertEqual(timed.error as? CancellablePromiseError, .cancelled)
        // A fixed wait, the only way to show the timeout never fires: past its 0.1 s deadline.
        Thread.sleep(forTimeInterval: 0.2)
        XCTAssertEqual(source.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(timed.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellableTimerIsReleasedWhenTheSourceSettlesFirst() {
        weak var weakContext: CancelContext?
        let resolver: Resolver<Int>
        do {
            let (source, sourceResolver) = CancellablePromise<Int>.pending()
            resolver = sourceResolver
            _ = source.timeout(seconds: 600)
            weakContext = source.cancelContext
        }
        XCTAssertNotNil(weakContext, "the pending timer can still cancel the source")
        resolver.fulfill(1)
        XCTAssertTrue(eventually { weakContext == nil }, "the 600 s timer still holds the chain")
    }

    func testCancellableTimerIsReleasedWhenTheChainIsCancelled() {
        weak var weakContext: CancelContext?
        do {
            let timed = CancellablePromise<Int> { _ in {} }.timeout(seconds: 600)
            weakContext = timed.cancelContext
            timed.cancel()
        }
        XCTAssertTrue(eventually { weakContext == nil }, "the 600 s timer still holds the chain")
    }
}

private enum TimeoutTestError: Error, Equatable { case boom }
