import CancellablePromiseKit
import Dispatch
import Foundation
import TestSupport
import XCTest

// PromiseKit 7's API for attaching a task to a promise, used as its cancellation guide shows:
// `Promise(cancellable:resolver:)`, `setCancellable(_:reject:)`, `Guarantee(cancellable:resolver:)`,
// the `CancellablePromise(cancellable:…)` initialisers, `appendCancellable(_:reject:)`,
// `appendCancelContext(from:)` and the finalizer's `cancelledError`.

private struct Stop: Error, Equatable {}

final class AttachedTaskTests: XCTestCase {
    /// Makes a thenable with a task attached (`make(task)`), cancellizes it and cancels that;
    /// checks that the task was cancelled once and the cancellable promise rejected with
    /// `.cancelled`, and returns the thenable.
    private func cancellizedAndCancelled<U: Thenable>(
        _ make: (TokenCancellableSpy) -> U, line: UInt = #line
    ) -> U {
        let task = TokenCancellableSpy()
        let thenable = make(task)
        let cancellable = thenable.cancellize()
        cancellable.cancel()
        XCTAssertEqual(task.cancelCount, 1, line: line)
        XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled, line: line)
        return thenable
    }

    // MARK: Promise(cancellable:resolver:) and setCancellable

    func testPromiseMadeWithACancellableStopsItsTaskWhenCancellized() {
        let promise = cancellizedAndCancelled { task in Promise<Int>(cancellable: task) { _ in } }
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled, "the promise itself is rejected")
    }

    func testAPlainChainOnAPromiseWithATaskIsNotCancellable() {
        let task = TokenCancellableSpy()
        let (promise, resolver) = Promise<Int>.pending()
        promise.setCancellable(task)
        let doubled = promise.map(on: nil) { $0 * 2 }
        resolver.fulfill(21)
        XCTAssertEqual(doubled.value, 42)
        XCTAssertEqual(task.cancelCount, 0)
    }

    func testSetCancellableWithRejectCallsRejectAfterCancellingTheTask() {
        let task = TokenCancellableSpy()
        let (promise, resolver) = Promise<Int>.pending()
        let rejected = Recorder<Error>()
        promise.setCancellable(task) { error in
            rejected.append(error)
            resolver.reject(error)
        }
        promise.cancellize().cancel(with: Stop())
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertEqual(promise.error as? Stop, Stop(), "rejected with the chain's error before `reject` ran")
        XCTAssertEqual(rejected.all.count, 1)
    }

    func testSetCancellableNilRemovesTheTask() {
        let task = TokenCancellableSpy()
        let (promise, _) = Promise<Int>.pending()
        promise.setCancellable(task)
        promise.setCancellable(nil)
        let cancellable = promise.cancellize()
        cancellable.cancel()
        XCTAssertEqual(task.cancelCount, 0)
        XCTAssertTrue(promise.isPending, "with no task, cancelling rejects the wrapper only")
        XCTAssertTrue(cancellable.isRejected)
    }

    func testSetCancellableOnASettledPromiseDoesNothing() {
        let task = TokenCancellableSpy()
        let promise = Promise.value(1)
        promise.setCancellable(task)
        promise.cancellize().cancel()
        XCTAssertEqual(task.cancelCount, 0)
        XCTAssertEqual(promise.value, 1)
    }

    func testSetCancellableLeavesAPromiseOfACancellableChainInItsChain() {
        let task = TokenCancellableSpy()
        let (chain, resolver) = CancellablePromise<Int>.pending()
        let next = chain.map(on: nil) { $0 + 1 }
        chain.promise.setCancellable(task)
        next.cancel()
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled, "still a member of its chain")
        XCTAssertEqual(task.cancelCount, 0, "not attached: appendCancellable is the way there")
        resolver.fulfill(1)
        XCTAssertEqual(next.error as? CancellablePromiseError, .cancelled)
    }

    func testTheTaskIsReleasedOnceThePromiseSettles() {
        let released = Flag()
        let (promise, resolver) = Promise<Int>.pending()
        promise.setCancellable(taskRaisingOnDeinit(released))
        XCTAssertFalse(released.value, "held while pending")
        resolver.fulfill(1)
        XCTAssertTrue(released.value)
    }

    func testAChainWaitingOnAPromiseWithATaskCancelsTheTaskAndRejectSettlesIt() {
        let task = TokenCancellableSpy()
        let (inner, innerResolver) = Promise<Int>.pending()
        inner.setCancellable(task, reject: innerResolver.reject)
        let (head, resolver) = CancellablePromise<Int>.pending()
        let chain = head.then(on: nil) { _ in inner }
        resolver.fulfill(0)
        chain.cancel()
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(inner.error as? CancellablePromiseError, .cancelled, "rejected through `reject`")
    }

    func testTheTaskIsCancelledOnceHoweverManyChainsReachIt() {
        let task = TokenCancellableSpy()
        let (promise, _) = Promise<Int>.pending()
        promise.setCancellable(task)
        let chains = (0..<3).map { _ in
            let (head, resolver) = CancellablePromise<Int>.pending()
            let chain = head.then(on: nil) { _ in promise }
            resolver.fulfill(0)
            return chain
        }
        for chain in chains { chain.cancel() }
        promise.cancellize().cancel()
        XCTAssertEqual(task.cancelCount, 1)
    }

    // MARK: Guarantee(cancellable:resolver:) and setCancellable

    func testGuaranteeMadeWithACancellableStopsItsTaskAndStaysPending() {
        let guarantee = cancellizedAndCancelled { task in Guarantee<Int>(cancellable: task) { _ in } }
        XCTAssertTrue(guarantee.isPending, "a guarantee cannot reject")
    }

    func testGuaranteeSetCancellable() {
        let task = TokenCancellableSpy()
        let (guarantee, resolve) = Guarantee<Int>.pending()
        guarantee.setCancellable(task)
        CancellablePromise(guarantee).cancel()
        XCTAssertEqual(task.cancelCount, 1)
        resolve(3)
        XCTAssertEqual(guarantee.value, 3)
    }

    // MARK: CancellablePromise(cancellable:…)

    func testInitCancellableResolverCancelsTheTask() {
        let item = DispatchWorkItem {}
        let promise = CancellablePromise<Int>(cancellable: item) { _ in }
        promise.cancel()
        XCTAssertTrue(item.isCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testInitResolverWithAVoidBodyAndNoTask() {
        let fulfilled = CancellablePromise<Int>(resolver: { seal in seal.fulfill(1) })
        XCTAssertEqual(fulfilled.value, 1)
        let pending = CancellablePromise<Int>(cancellable: nil) { _ in }
        pending.cancel()
        XCTAssertEqual(pending.error as? CancellablePromiseError, .cancelled)
    }

    func testTrailingClosureFormsKeepTheirInitialisers() {
        let wrapper = CancellablePromise<Int> { _ in Promise.value(1) }
        XCTAssertEqual(wrapper.value, 1, "a body returning a thenable is the wrapper form")
        let cancelled = Flag()
        let task = CancellablePromise<Int> { _ in { cancelled.raise() } }
        task.cancel()
        XCTAssertTrue(cancelled.value, "a body returning a function is the form whose function cancels")
        let plain = CancellablePromise<Int> { resolver in resolver.fulfill(3) }
        XCTAssertEqual(plain.value, 3, "a body returning nothing is PromiseKit 7's form")
    }

    func testInitCancellableResolverWithAThrowingBodyRejects() {
        let task = TokenCancellableSpy()
        let promise = CancellablePromise<Int>(cancellable: task) { _ in throw Stop() }
        XCTAssertEqual(promise.error as? Stop, Stop())
        promise.cancel()
        XCTAssertEqual(task.cancelCount, 0, "a settled promise's task is not cancelled")
    }

    func testInitCancellablePromiseResolverRejectsThePromiseThroughItsResolver() {
        cancelCancelsTheTaskAndRejectsThePromise {
            CancellablePromise(cancellable: $0, promise: $1, resolver: $2)
        }
    }

    func testInitCancellablePromiseResolverFollowsThePromise() {
        let (promise, resolver) = Promise<Int>.pending()
        let cancellable = CancellablePromise(promise: promise, resolver: resolver)
        resolver.fulfill(5)
        XCTAssertEqual(cancellable.value, 5)
    }

    func testInitCancellableErrorIsRejectedAndNeverCancelsTheTask() {
        let task = TokenCancellableSpy()
        let promise = CancellablePromise<Int>(cancellable: task, error: Stop())
        promise.cancel()
        XCTAssertEqual(promise.error as? Stop, Stop())
        XCTAssertEqual(task.cancelCount, 0)
    }

    func testInitCancellableForVoidIsFulfilled() {
        let task = TokenCancellableSpy()
        let promise = CancellablePromise(cancellable: task)
        promise.cancel()
        XCTAssertTrue(promise.isFulfilled)
        XCTAssertEqual(task.cancelCount, 0)
    }

    // MARK: appendCancellable, appendCancelContext, cancelledError

    func testAppendCancellableCancelsTheTaskAndCallsRejectWithTheChainsError() {
        let task = TokenCancellableSpy()
        let rejected = Recorder<Error>()
        let (promise, _) = CancellablePromise<Int>.pending()
        promise.appendCancellable(task) { rejected.append($0) }
        promise.map(on: nil) { $0 }.cancel(with: Stop())
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertEqual(rejected.all.map { $0 as? Stop }, [Stop()])
        XCTAssertEqual(promise.error as? Stop, Stop())
    }

    func testAppendCancellableLastsOnlyWhileThePromiseIsPending() {
        let task = TokenCancellableSpy()
        let (promise, resolver) = CancellablePromise<Int>.pending()
        let next = promise.then(on: nil) { _ in CancellablePromise<Int>.pending().promise }
        promise.appendCancellable(task)
        resolver.fulfill(1)
        next.cancel()
        XCTAssertEqual(task.cancelCount, 0)
        XCTAssertEqual(next.error as? CancellablePromiseError, .cancelled)
    }

    func testAnAppendedTaskIsReleasedOnceThePromiseSettles() {
        let released = Flag()
        let (promise, resolver) = CancellablePromise<Int>.pending()
        promise.appendCancellable(taskRaisingOnDeinit(released), reject: nil)
        XCTAssertFalse(released.value, "held while the promise is pending")
        resolver.fulfill(1)
        XCTAssertTrue(released.value)
        promise.cancel()
    }

    func testAnAbandonedChainWithAnAppendedTaskIsFreed() {
        let released = Flag()
        weak var weakPromise: CancellablePromise<Int>?
        do {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            weakPromise = promise
            promise.appendCancellable(TokenCancellableSpy(onDeinit: { released.raise() }), reject: nil)
            withExtendedLifetime(resolver) {}
        }
        XCTAssertNil(weakPromise)
        XCTAssertTrue(released.value, "nothing can cancel or settle the chain: the task is released uncalled")
    }

    func testAppendCancellableToACancelledChainCancelsAtOnce() {
        let task = TokenCancellableSpy()
        let (promise, _) = CancellablePromise<Int>.pending()
        let tail = promise.map(on: nil) { $0 }
        tail.cancel()
        tail.appendCancellable(task, reject: nil)
        XCTAssertEqual(task.cancelCount, 1)
    }

    func testAppendCancellableOnAStepWaitingBehindAnObserverIsCancelledWithTheChain() {
        let task = TokenCancellableSpy()
        let (promise, _) = CancellablePromise<Int>.pending()
        let behind = promise.ensure(on: DispatchQueue.global()) {}.map(on: nil) { $0 }
        behind.appendCancellable(task, reject: nil)
        promise.cancel()
        XCTAssertEqual(task.cancelCount, 1, "cancelled when cancel() returns, before the observer ran")
        XCTAssertEqual(waitForError(behind) as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(task.cancelCount, 1)
    }

    func testAppendCancelContextJoinsTheChains() {
        let (first, _) = CancellablePromise<Int>.pending()
        let (second, _) = CancellablePromise<String>.pending()
        first.appendCancelContext(from: second)
        first.cancel()
        XCTAssertTrue(second.isCancelled)
        XCTAssertEqual(second.error as? CancellablePromiseError, .cancelled)
    }

    func testAppendCancelContextFromACancelledChainCancelsThisOne() {
        let (first, second) = twoPendingCancellablePromises()
        second.cancel(with: Stop())
        first.appendCancelContext(from: second)
        XCTAssertEqual(first.error as? Stop, Stop())
    }

    func testTheFinalizerReportsTheCancelledError() {
        let (promise, _) = CancellablePromise<Int>.pending()
        let finalizer = promise.done(on: nil) { _ in }.catch(on: nil, policy: .allErrors) { _ in }
        XCTAssertNil(finalizer.cancelledError)
        finalizer.cancel(with: Stop())
        XCTAssertEqual(finalizer.cancelledError as? Stop, Stop())
        XCTAssertEqual(promise.cancelledError as? Stop, Stop())
    }

    // MARK: Races

    func testAppendCancellableRacingCancelCancelsTheTaskExactlyOnce() {
        for _ in 0..<2_000 {
            let task = TokenCancellableSpy()
            let (promise, _) = CancellablePromise<Int>.pending()
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 { promise.appendCancellable(task, reject: nil) } else { promise.cancel() }
            }
            XCTAssertEqual(task.cancelCount, 1)
        }
    }

    func testSetCancellableRacingFulfilNeverCancelsAFulfilledPromise() {
        for _ in 0..<2_000 {
            let task = TokenCancellableSpy()
            let (promise, resolver) = Promise<Int>.pending()
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 { promise.setCancellable(task) } else { resolver.fulfill(1) }
            }
            promise.cancellize().cancel()
            XCTAssertEqual(task.cancelCount, 0)
            XCTAssertEqual(promise.value, 1)
        }
    }
}

/// A task that raises `released` when it is deallocated.
private func taskRaisingOnDeinit(_ released: Flag) -> TokenCancellableSpy {
    TokenCancellableSpy(onDeinit: { released.raise() })
}
