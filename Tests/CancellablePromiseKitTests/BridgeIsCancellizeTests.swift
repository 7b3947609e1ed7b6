import CancellablePromiseKit
import Dispatch
import Foundation
import TestSupport
import XCTest

// `CancellablePromise(x)` is `x.cancellize()` (PromiseKit 7: "bound to the provided Thenable"):
// cancelling it stops the task attached to `x`. The URLSession case is in PromiseFoundationTests.

final class BridgeIsCancellizeTests: XCTestCase {
    /// Cancels the cancellable made of `after(seconds: 0.2)` and reports whether the timer still
    /// fired (the guarantee resolves only if it did).
    private func timerFiredAfterCancelling(_ make: (Guarantee<Void>) -> CancellablePromise<Void>) -> Bool {
        let timer = after(seconds: 0.2)
        let cancellable = make(timer)
        cancellable.cancel()
        XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled)
        // Real clock: a stopped timer of the default scheduler shows only by not firing in time.
        return waitForResult(timer, seconds: 0.6) != nil
    }

    func testTheInitialiserStopsTheTimerOfAfter() {
        XCTAssertFalse(timerFiredAfterCancelling { CancellablePromise($0) })
    }

    func testCancellizeStopsTheTimerOfAfter() {
        XCTAssertFalse(timerFiredAfterCancelling { $0.cancellize() })
    }

    func testTheInitialiserOfAfterAsAPromiseRejectsIt() {
        let promise = after(seconds: 0.2).asPromise()
        CancellablePromise(promise).cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testTheInitialiserCancelsThePromiseMadeWithACancellable() {
        let viaInit = TokenCancellableSpy()
        let viaCancellize = TokenCancellableSpy()
        let first = Promise<Int>(cancellable: viaInit) { _ in }
        let second = Promise<Int>(cancellable: viaCancellize) { _ in }
        CancellablePromise(first).cancel()
        second.cancellize().cancel()
        XCTAssertEqual(viaInit.cancelCount, 1)
        XCTAssertEqual(viaCancellize.cancelCount, 1)
        XCTAssertEqual(first.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(second.error as? CancellablePromiseError, .cancelled)
    }

    func testBothFollowAPlainPromiseWithoutATask() {
        for make in [{ CancellablePromise($0) }, { $0.cancellize() }] as [(Promise<Int>) -> CancellablePromise<Int>] {
            let (promise, resolver) = Promise<Int>.pending()
            let cancellable = make(promise)
            resolver.fulfill(7)
            XCTAssertEqual(cancellable.value, 7)

            let (other, _) = Promise<Int>.pending()
            let cancelled = make(other)
            cancelled.cancel()
            XCTAssertTrue(other.isPending, "no task: cancelling rejects the wrapper only")
            XCTAssertEqual(cancelled.error as? CancellablePromiseError, .cancelled)
        }
    }

    func testBothUseTheGivenContext() {
        let context = CancelContext()
        let timer = after(seconds: 0.2)
        let first = CancellablePromise(timer, cancelContext: context)
        let second = Promise<Int>.pending().promise.cancellize(cancelContext: context)
        XCTAssertTrue(first.cancelContext === context)
        XCTAssertTrue(second.cancelContext === context)
        context.cancel()
        XCTAssertTrue(first.isRejected)
        XCTAssertTrue(second.isRejected)
        // Real clock: a stopped timer of the default scheduler shows only by not firing in time.
        XCTAssertNil(waitForResult(timer, seconds: 0.6), "the timer was stopped")
    }

    func testTheInitialiserOfACancellablePromiseJoinsItsChain() {
        let (source, resolver) = CancellablePromise<Int>.pending()
        let bound = CancellablePromise(source)
        XCTAssertTrue(bound.cancelContext === source.cancelContext)
        bound.cancel()
        XCTAssertEqual(source.error as? CancellablePromiseError, .cancelled)
        resolver.fulfill(1)
        XCTAssertEqual(bound.error as? CancellablePromiseError, .cancelled)
    }

    func testTheInitialiserOfACancellablePromiseFollowsItsValue() {
        let (source, resolver) = CancellablePromise<Int>.pending()
        let bound = CancellablePromise(source)
        resolver.fulfill(4)
        XCTAssertEqual(bound.value, 4)
        XCTAssertTrue(source.cancellize() === source, "cancellize() of a cancellable promise is itself")
    }

    func testAPlainChainContinuedWithACancellableStepLeavesItsOwnTaskAlone() {
        // Seed 002, "convert a standard chain to a cancellable chain": cancelling during
        // `login` does not cancel the login, only the chain.
        let login = TokenCancellableSpy()
        let (promise, _) = Promise<Int>.pending()
        promise.setCancellable(login)
        let chain = promise.then(on: nil) { _ in CancellablePromise<Int>.pending().promise }
        chain.cancel()
        XCTAssertEqual(login.cancelCount, 0)
        XCTAssertTrue(promise.isPending)
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
    }
}
