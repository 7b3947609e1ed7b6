// `future()` on a cancellable promise and on shared work: PromiseKit 8's bridge to a Combine
// `Future`, with a cancelled chain delivered as a failure, and a future that never cancels the
// work. Results reach a future's subscribers on the main queue (`conf.Q.return`), so the tests
// wait with `eventually`, which runs the main run loop.
import PromiseCombine
import TestSupport
import XCTest

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
final class CancellableFutureTests: XCTestCase {
    /// A pending cancellable promise whose cancel closure raises `cancelled`, and its resolver.
    private func task(cancelled: Flag) -> (promise: CancellablePromise<Int>, resolver: Resolver<Int>) {
        let resolver = SendableBox<Resolver<Int>?>(nil)
        let promise = CancellablePromise<Int> { seal in
            resolver.value = seal
            return { cancelled.raise() }
        }
        return (promise, resolver.value!)
    }

    func testTheFutureSucceedsWithTheValueOnTheMainQueue() {
        let (promise, resolver) = task(cancelled: Flag())
        let values = Recorder<Int>()
        let onMain = Flag()
        let finished = Flag()
        let subscription = promise.map(on: nil) { $0 * 2 }.future().sink(
            receiveCompletion: { completion in
                if case .finished = completion { finished.raise() }
            },
            receiveValue: { value in
                if Thread.isMainThread { onMain.raise() }
                values.append(value)
            })
        DispatchQueue.global().async { resolver.fulfill(21) }
        XCTAssertTrue(eventually { finished.value })
        XCTAssertEqual(values.all, [42])
        XCTAssertTrue(onMain.value, "conf.Q.return, the main queue, as Promise.future() delivers")
        subscription.cancel()
    }

    func testTheFutureFailsWithTheChainsError() {
        let (promise, resolver) = task(cancelled: Flag())
        let probe = ProbeSubscriber<Int, Error>()
        promise.map(on: nil) { $0 + 1 }.future().subscribe(probe)
        resolver.reject(TestError(code: 7))
        XCTAssertTrue(eventually { probe.completion != nil })
        XCTAssertEqual(probe.failure as? TestError, TestError(code: 7))
        XCTAssertEqual(probe.values, [])
    }

    func testACancelledChainIsAFailureOfTheFuture() {
        let cancelled = Flag()
        let (promise, _) = task(cancelled: cancelled)
        let probe = ProbeSubscriber<Int, Error>()
        let tail = promise.map(on: nil) { $0 + 1 }
        tail.future().subscribe(probe)
        promise.cancel()
        XCTAssertTrue(cancelled.value)
        XCTAssertTrue(eventually { probe.completion != nil })
        XCTAssertTrue(probe.failure is CancellablePromiseError, "got \(String(describing: probe.completion))")
        XCTAssertEqual(probe.failure?.isCancelled, true)
        XCTAssertEqual(probe.values, [])
    }

    func testACancelWithAnErrorOfOnesOwnIsThatFailure() {
        let (promise, _) = task(cancelled: Flag())
        let probe = ProbeSubscriber<Int, Error>()
        promise.future().subscribe(probe)
        promise.cancel(with: TestError(code: 3))
        XCTAssertTrue(eventually { probe.completion != nil })
        XCTAssertEqual(probe.failure as? TestError, TestError(code: 3))
    }

    func testALateSubscriberGetsTheResult() {
        let promise = CancellablePromise.value(5)
        let future = promise.future()
        let probe = ProbeSubscriber<Int, Error>()
        future.subscribe(probe)
        XCTAssertTrue(eventually { probe.isFinished })
        XCTAssertEqual(probe.values, [5])
    }

    func testCancellingTheSubscriptionDoesNotCancelTheWork() {
        let cancelled = Flag()
        let (promise, resolver) = task(cancelled: cancelled)
        let future = promise.future()
        let probe = ProbeSubscriber<Int, Error>()
        let witness = ProbeSubscriber<Int, Error>()
        future.subscribe(probe)
        future.subscribe(witness)
        probe.cancel()
        XCTAssertFalse(promise.isCancelled, "a future cannot cancel the work")
        XCTAssertFalse(cancelled.value)
        resolver.fulfill(1)
        XCTAssertEqual(promise.value, 1, "the work went on and settled the promise")
        // The future completes every subscriber at once: once the witness has its value, the
        // cancelled subscription has had its chance.
        XCTAssertTrue(eventually { witness.isFinished })
        XCTAssertEqual(witness.values, [1])
        XCTAssertNil(probe.completion, "a cancelled subscription receives nothing")
        XCTAssertEqual(probe.values, [])
    }

    func testDroppingTheFutureDoesNotCancelTheWork() {
        let cancelled = Flag()
        let (promise, resolver) = task(cancelled: cancelled)
        _ = promise.future()
        XCTAssertFalse(promise.isCancelled)
        XCTAssertFalse(cancelled.value)
        resolver.fulfill(2)
        XCTAssertEqual(promise.value, 2)
    }

    /// The future holds no cancel handle: the promise dropped, nothing can cancel the chain any
    /// more, so its cancel closure is released uncalled, the work settles it, and the future
    /// still delivers.
    func testTheFutureOfADroppedPromiseStillGetsTheResult() {
        let cancelled = Flag()
        let probe = ProbeSubscriber<Int, Error>()
        let resolver: Resolver<Int>
        do {
            let (promise, seal) = task(cancelled: cancelled)
            promise.future().subscribe(probe)
            resolver = seal
        }
        resolver.fulfill(3)
        XCTAssertTrue(eventually { probe.isFinished })
        XCTAssertEqual(probe.values, [3])
        XCTAssertFalse(cancelled.value)
    }

    // MARK: Shared work

    func testTheFutureOfSharedWorkGetsTheSourcesValue() {
        let (source, resolver) = task(cancelled: Flag())
        let shared = source.shared()
        let probe = ProbeSubscriber<Int, Error>()
        shared.future().subscribe(probe)
        resolver.fulfill(4)
        XCTAssertTrue(eventually { probe.isFinished })
        XCTAssertEqual(probe.values, [4])
    }

    /// The future is an interest that cannot be withdrawn: cancelling every other follower
    /// leaves the source running for it.
    func testTheFutureOfSharedWorkKeepsTheWorkGoing() {
        let cancelled = Flag()
        let (source, resolver) = task(cancelled: cancelled)
        let shared = source.shared()
        let follower = shared.follower()
        let probe = ProbeSubscriber<Int, Error>()
        shared.future().subscribe(probe)
        follower.cancel()
        XCTAssertTrue(follower.isRejected)
        XCTAssertFalse(shared.isCancelled)
        XCTAssertFalse(cancelled.value, "the source goes on for the future")
        resolver.fulfill(6)
        XCTAssertTrue(eventually { probe.isFinished })
        XCTAssertEqual(probe.values, [6])
    }

    func testTheFutureOfCancelledSharedWorkFails() {
        let cancelled = Flag()
        let (source, _) = task(cancelled: cancelled)
        let shared = source.shared()
        shared.follower().cancel()
        XCTAssertTrue(cancelled.value, "its only follower was cancelled: so was the source")
        let probe = ProbeSubscriber<Int, Error>()
        shared.future().subscribe(probe)
        XCTAssertTrue(eventually { probe.completion != nil })
        XCTAssertEqual(probe.failure?.isCancelled, true)
    }
}
#endif
