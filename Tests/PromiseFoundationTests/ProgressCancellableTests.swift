import Foundation
import PromiseFoundation
import XCTest

/// `Progress` as a `Cancellable`, and `bind(to:)` between a cancellable chain and a progress.
/// `Progress` calls its cancellation handler on a queue of its own, so tests that cancel the
/// progress wait for what the handler causes.
final class ProgressCancellableTests: XCTestCase {
    // MARK: Cancellable

    func testABagCancelsTheProgressItHolds() {
        let progress = Progress(totalUnitCount: 10)
        var bag: CancelBag? = CancelBag()
        progress.store(in: bag!)
        XCTAssertFalse(progress.isCancelled)
        bag = nil  // the owner went away
        XCTAssertTrue(progress.isCancelled)

        let other = Progress(totalUnitCount: 10)
        let kept = CancelBag()
        other.store(in: kept)
        kept.cancelAll()
        XCTAssertTrue(other.isCancelled)
    }

    func testABagHoldsAProgressWeakly() {
        let bag = CancelBag()
        weak var released: Progress?
        do {
            let progress = Progress(totalUnitCount: 1)
            released = progress
            progress.store(in: bag)
        }
        XCTAssertNil(released)
        bag.cancelAll()
    }

    func testATokenCancelsARegisteredProgress() {
        let request = CancellationRequest()
        let progress = Progress(totalUnitCount: 1)
        request.token.register(progress)
        request.cancel()
        XCTAssertTrue(progress.isCancelled)
    }

    // MARK: Progress → chain

    func testCancellingTheProgressCancelsTheChain() {
        let progress = Progress(totalUnitCount: 100)
        let stopped = Handshake()
        let task = CancellablePromise<Int> { _ in { stopped.signal() } }
        let observed = Handshake()
        let tail = task.bind(to: progress).map(on: nil) { $0 * 2 }
        tail.catch(on: nil, policy: .allErrors) { error in
            XCTAssertEqual(error as? CancellablePromiseError, .cancelled)
            observed.signal()
        }
        XCTAssertTrue(progress.isCancellable)

        progress.cancel()  // what a Cancel button bound to the progress does
        XCTAssertTrue(stopped.wait(seconds: 5) && observed.wait(seconds: 5))
        XCTAssertTrue(task.isCancelled)
        XCTAssertTrue(tail.isCancelled)
    }

    func testTheProgressesOwnCancellationHandlerStillRuns() {
        let progress = Progress(totalUnitCount: 1)
        let order = Recorder<String>()
        let observed = Handshake()
        progress.cancellationHandler = { order.append("own handler") }
        CancellablePromise<Int> { _ in {} }.bind(to: progress).catch(on: nil, policy: .allErrors) { _ in
            order.append("chain cancelled")
            observed.signal()
        }
        progress.cancel()
        XCTAssertTrue(observed.wait(seconds: 5))
        XCTAssertEqual(order.all, ["own handler", "chain cancelled"])
    }

    func testCancellingAParentProgressCancelsTheChain() {
        let parent = Progress(totalUnitCount: 2)
        let child = Progress(totalUnitCount: 1, parent: parent, pendingUnitCount: 1)
        let observed = Handshake()
        CancellablePromise<Int> { _ in {} }.bind(to: child).catch(on: nil, policy: .allErrors) { _ in
            observed.signal()
        }
        parent.cancel()
        XCTAssertTrue(observed.wait(seconds: 5))
    }

    func testAnAlreadyCancelledProgressCancelsTheChainAtOnce() {
        let progress = Progress(totalUnitCount: 1)
        progress.cancel()
        let stopped = Counter()
        let task = CancellablePromise<Int> { _ in { stopped.increment() } }
        task.bind(to: progress)
        XCTAssertEqual(stopped.value, 1, "cancelled synchronously, on this thread")
        XCTAssertEqual(task.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: Chain → progress

    func testCancellingTheChainCancelsTheProgress() {
        let progress = Progress(totalUnitCount: 100)
        let (task, _) = CancellablePromise<Int>.pending()
        let tail = task.bind(to: progress).map(on: nil) { $0 + 1 }.done(on: nil) { _ in }
        XCTAssertFalse(progress.isCancelled)
        tail.cancel()  // any member of the chain
        XCTAssertTrue(progress.isCancelled, "cancelled synchronously, before cancel() returns")
    }

    func testATimeoutOfTheChainCancelsTheProgress() {
        let progress = Progress(totalUnitCount: 1)
        let (task, _) = CancellablePromise<Int>.pending()
        let scheduler = TestScheduler()
        let timedOut = Flag()
        task.bind(to: progress).timeout(seconds: 0.01, scheduler: scheduler).catch(on: nil) { error in
            XCTAssertTrue(error is PromiseTimeoutError)
            timedOut.raise()
        }
        scheduler.advance(by: 0.01)
        XCTAssertTrue(timedOut.value)
        XCTAssertTrue(progress.isCancelled, "the timeout cancelled the source chain, and so the progress")
    }

    func testAChainThatFulfilsOrFailsLeavesTheProgressAlone() {
        struct Failure: Error {}
        let fulfilled = Progress(totalUnitCount: 1)
        let (good, goodResolver) = CancellablePromise<Int>.pending()
        good.bind(to: fulfilled)
        goodResolver.fulfill(1)
        XCTAssertFalse(fulfilled.isCancelled)

        let failed = Progress(totalUnitCount: 1)
        let (bad, badResolver) = CancellablePromise<Int>.pending()
        bad.bind(to: failed)
        badResolver.reject(Failure())
        XCTAssertFalse(failed.isCancelled)
    }

    // MARK: Lifetime

    func testOnceTheChainSettledTheProgressNeitherHoldsNorCancelsIt() {
        let progress = Progress(totalUnitCount: 1)
        weak var droppedContext: CancelContext?
        do {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            promise.bind(to: progress)
            resolver.fulfill(1)
            droppedContext = promise.cancelContext
        }
        XCTAssertNil(droppedContext, "the progress let the settled chain go")

        let (kept, keptResolver) = CancellablePromise<Int>.pending()
        kept.bind(to: progress)
        keptResolver.fulfill(2)

        // A chain bound later runs its handler after the earlier bindings': once it has seen the
        // cancellation, theirs have run, and did nothing.
        let (later, _) = CancellablePromise<Int>.pending()
        let observed = Handshake()
        later.bind(to: progress).catch(on: nil, policy: .allErrors) { _ in observed.signal() }
        progress.cancel()
        XCTAssertTrue(observed.wait(seconds: 5))
        XCTAssertFalse(kept.isCancelled)
        XCTAssertEqual(kept.value, 2)
    }

    func testADroppedProgressAndItsChainAreFreedTogether() {
        weak var progressRef: Progress?
        weak var contextRef: CancelContext?
        do {
            let progress = Progress(totalUnitCount: 1)
            progressRef = progress
            // Nothing can settle this task (its resolver is dropped); only the progress can
            // cancel it.
            let task = CancellablePromise<Int> { _ in {} }
            contextRef = task.cancelContext
            task.bind(to: progress)
        }
        XCTAssertNil(progressRef)
        XCTAssertNil(contextRef)
    }

    func testTheProgressKeepsTheChainCancellable() {
        weak var contextRef: CancelContext?
        let progress = Progress(totalUnitCount: 1)
        let stopped = Handshake()
        do {
            let task = CancellablePromise<Int> { _ in { stopped.signal() } }
            contextRef = task.cancelContext
            task.bind(to: progress)
        }
        XCTAssertNotNil(contextRef, "held by the progress's handler while pending")
        progress.cancel()
        XCTAssertTrue(stopped.wait(seconds: 5))
    }
}
