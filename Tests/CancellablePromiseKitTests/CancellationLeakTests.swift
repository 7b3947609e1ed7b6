import CancellablePromiseKit
import Foundation
import XCTest

// No leaks: once a chain settles or is cancelled, its tasks, cancel closures and promises are
// freed (observed with weak references and deinit counters).

final class CancellationLeakTests: XCTestCase {
    func testSettledChainFreesTaskClosuresAndPromises() {
        let deinits = Counter()
        weak var weakHead: Promise<Int>?
        weak var weakTail: Promise<Int>?
        var resolverRef: Resolver<Int>?
        var context: CancelContext?
        do {
            let task = DeinitProbe { deinits.increment() }
            let head = CancellablePromise<Int> { resolver in
                resolverRef = resolver
                return { _ = task }
            }
            let tail = head.map(on: nil) { $0 + 1 }.done(on: nil) { _ in }.map(on: nil) { 2 }
            weakHead = head.promise
            weakTail = tail.promise
            context = tail.cancelContext
        }
        XCTAssertNotNil(weakTail, "a pending chain is held while its context can cancel it")
        resolverRef?.fulfill(1)
        resolverRef = nil
        XCTAssertEqual(deinits.value, 1, "the task (cancel closure) is released on settling")
        XCTAssertNil(weakHead)
        XCTAssertNil(weakTail)
        XCTAssertFalse(context!.isCancelled)
    }

    func testCancelledChainFreesTaskClosuresAndPromises() {
        let deinits = Counter()
        weak var weakHead: Promise<Int>?
        weak var weakTail: Promise<Int>?
        var context: CancelContext?
        do {
            let task = DeinitProbe { deinits.increment() }
            let head = CancellablePromise<Int> { _ in { _ = task } }
            let tail = head.then(on: nil) { _ in CancellablePromise<Int>.pending().promise }.map(on: nil) { $0 }
            weakHead = head.promise
            weakTail = tail.promise
            context = head.cancelContext
        }
        XCTAssertNotNil(weakTail)
        context?.cancel()
        XCTAssertEqual(deinits.value, 1)
        XCTAssertNil(weakHead)
        XCTAssertNil(weakTail)
    }

    func testHoldingOnlyTheContextLetsSettledPromisesBeFreed() {
        weak var weakPromise: CancellablePromise<Void>?
        let context: CancelContext
        let task = FakeTask<Int>()
        do {
            let finalizer = task.promise.cancellize().done(on: nil) { _ in }.catch(on: nil) { _ in }
            context = finalizer.cancelContext
            weakPromise = task.promise.cancellize(cancelContext: context).asVoid()
        }
        task.succeed(1)
        XCTAssertNil(weakPromise)
        context.cancel()  // nothing left to cancel
        XCTAssertFalse(task.isCancelled)
    }

    func testCancelledCancellizedTaskIsReleased() {
        weak var weakTask: FakeTask<Int>?
        var wrapper: CancellablePromise<Int>?
        do {
            let task = FakeTask<Int>()
            weakTask = task
            wrapper = task.promise.cancellize()
        }
        wrapper?.cancel()
        XCTAssertNil(weakTask)
        XCTAssertTrue(wrapper?.isRejected ?? false)
    }

    func testCancelPromiseOfWrapperIsNotLeakedPending() {
        weak var weakCancelPromise: Promise<Void>?
        var wrapper: CancellablePromise<Int>?
        let (inner, resolver) = Promise<Int>.pending()
        do {
            wrapper = CancellablePromise<Int> { cancelPromise in
                weakCancelPromise = cancelPromise
                return inner
            }
        }
        resolver.fulfill(1)
        XCTAssertEqual(wrapper?.value, 1)
        wrapper = nil
        XCTAssertNil(weakCancelPromise)
    }

    func testAutoCancelRaceReleasesLosersAndInputsAfterSettling() {
        weak var weakLoser: CancellablePromise<Int>?
        let winner = CancellablePromise<Int>.pending()
        var result: CancellablePromise<Int>?
        do {
            let loser = CancellablePromise<Int>.pending()
            weakLoser = loser.promise
            result = race([winner.promise, loser.promise], autoCancel: true)
        }
        winner.resolver.fulfill(1)
        XCTAssertEqual(result?.value, 1)
        XCTAssertNil(weakLoser)
    }

    /// The tuple form gives the combinator a `Void` promise made from each input and keeps them
    /// to tell which input rejected: once one has, nothing of the inputs is kept.
    func testAutoCancelTupleWhenReleasesItsInputsAfterARejection() {
        weak var weakLoser: CancellablePromise<String>?
        weak var weakLoserCore: Promise<String>?
        let failing = CancellablePromise<Int>.pending()
        var result: CancellablePromise<(Int, String)>?
        do {
            let loser = CancellablePromise<String>.pending()
            weakLoser = loser.promise
            weakLoserCore = loser.promise.promise
            result = when(fulfilled: failing.promise, loser.promise, autoCancel: true)
        }
        XCTAssertNotNil(weakLoserCore, "a pending combinator keeps its inputs cancellable")
        failing.resolver.reject(StepFailure(node: 1))
        XCTAssertEqual(result?.promise.isRejected, true)
        XCTAssertNil(weakLoser)
        XCTAssertNil(weakLoserCore)
    }

    func testLinkedChainsAreFreedAfterCancel() {
        weak var weakInner: Promise<Int>?
        weak var weakOuter: Promise<Int>?
        var context: CancelContext?
        do {
            let (outer, resolver) = CancellablePromise<Int>.pending()
            let inner = CancellablePromise<Int>.pending().promise
            weakInner = inner.promise
            let tail = outer.then(on: nil) { _ in inner }
            weakOuter = tail.promise
            resolver.fulfill(1)
            context = tail.cancelContext
        }
        XCTAssertNotNil(weakInner)
        context?.cancel()
        XCTAssertNil(weakInner)
        XCTAssertNil(weakOuter)
    }
}
