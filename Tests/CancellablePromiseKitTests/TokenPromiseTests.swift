import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

/// A task started through `Promise(cancellationToken:resolver:)`, finished by the test.
private final class ManualTask<T>: @unchecked Sendable {
    let resolver: Resolver<T>
    let cancels = Counter()
    init(_ resolver: Resolver<T>) { self.resolver = resolver }
    func cancel() { cancels.increment() }
}

final class TokenPromiseTests: XCTestCase {
    /// `Promise(cancellationToken:)` of a manual task that the token has not cancelled yet, and
    /// that task (cancelled by the promise's cancel function).
    private func tokenPromiseOfAManualTask(
        cancellationToken: CancellationToken?
    ) -> (promise: Promise<Int>, task: ManualTask<Int>) {
        var task: ManualTask<Int>?
        let promise = Promise<Int>(cancellationToken: cancellationToken) { resolver in
            let manual = ManualTask(resolver)
            task = manual
            return manual.cancel
        }
        return (promise, task!)
    }

    // MARK: Cancellable conformances

    func testCancellablePromiseDispatchWorkItemAndContextAreCancellable() {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        defer { withExtendedLifetime(resolver) {} }
        let item = DispatchWorkItem {}
        let context = CancelContext()
        let cancellables: [any Cancellable] = [promise, item, context, CancellationRequest()]
        for cancellable in cancellables {
            XCTAssertTrue(cancelTurnsIsCancelledOn(cancellable), "\(type(of: cancellable))")
        }
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testRegisteredDispatchWorkItemNeverRuns() {
        let request = CancellationRequest()
        let ran = Counter()
        let item = DispatchWorkItem { ran.increment() }
        request.token.register(item)
        let queue = DispatchQueue(label: "token-promise.work-item")
        queue.suspend()  // the item is queued, but cannot start before the cancel
        queue.async(execute: item)
        request.cancel()
        XCTAssertTrue(item.isCancelled)
        queue.resume()
        queue.sync {}  // the item's turn has come and gone
        XCTAssertEqual(ran.value, 0)
    }

    // MARK: Binding a CancellablePromise to a token

    func testRegisteringACancellablePromiseCancelsItsChain() {
        let request = CancellationRequest()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let mapped = Flag()
        let tail = head.map(on: nil) { _ -> Int in
            mapped.raise()
            return 1
        }
        request.token.register(head)
        request.cancel()
        XCTAssertEqual(head.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
        resolver.fulfill(1)
        XCTAssertFalse(mapped.value)
    }

    func testCancelOnTokenCancelsAndReturnsSelf() {
        let request = CancellationRequest()
        let (promise, resolver) = CancellablePromise<Int>.pending()
        defer { withExtendedLifetime(resolver) {} }
        let returned = promise.cancel(on: request.token)
        XCTAssertTrue(returned === promise)
        XCTAssertFalse(promise.isCancelled)
        request.cancel()
        XCTAssertTrue(promise.isCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testCancelOnAlreadyCancelledTokenCancelsAtOnce() {
        let request = CancellationRequest()
        request.cancel()
        let cancels = Counter()
        var kept: Resolver<Int>?
        let promise = CancellablePromise<Int> { resolver in
            kept = resolver
            return { cancels.increment() }
        }.cancel(on: request.token)
        defer { withExtendedLifetime(kept) {} }
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancels.value, 1)
    }

    func testCancelOnRemovesItsRegistrationWhenThePromiseSettles() {
        let request = CancellationRequest()
        for value in 0..<1_000 {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            promise.cancel(on: request.token)
            resolver.fulfill(value)
        }
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
        request.cancel()
    }

    func testTokenDoesNotRetainABoundPromise() {
        let request = CancellationRequest()
        weak var weakPromise: CancellablePromise<Int>?
        do {
            let promise = CancellablePromise<Int>(error: TestError.failed)
            weakPromise = promise
            request.token.register(promise)
        }
        XCTAssertNil(weakPromise)
    }

    // MARK: Promise(cancellationToken:resolver:): the token is checked before, during and after the work

    func testTokenPromiseFulfilsWhenNotCancelled() {
        let request = CancellationRequest()
        let (promise, task) = tokenPromiseOfAManualTask(cancellationToken: request.token)
        XCTAssertTrue(promise.isPending)
        task.resolver.fulfill(7)
        XCTAssertEqual(promise.value, 7)
        request.cancel()
        XCTAssertEqual(promise.value, 7)
        XCTAssertEqual(task.cancels.value, 0)  // a settled task is not cancelled
    }

    func testTokenPromiseRejectsBeforeCancelReturnsThenCancelsTaskOnce() {
        let request = CancellationRequest()
        var task: ManualTask<Int>?
        let rejectedBeforeTaskCancel = Flag()
        let promiseRef = SendableBox<Promise<Int>?>(nil)
        let promise = Promise<Int>(cancellationToken: request.token) { resolver in
            let manual = ManualTask(resolver)
            task = manual
            return {
                if promiseRef.value?.isRejected ?? false { rejectedBeforeTaskCancel.raise() }
                manual.cancel()
                resolver.reject(StandInCancelledError())  // the task's own error comes too late
            }
        }
        promiseRef.value = promise
        request.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(promise.error?.isCancelled ?? false)
        XCTAssertTrue(rejectedBeforeTaskCancel.value)
        XCTAssertEqual(task!.cancels.value, 1)
        request.cancel()
        XCTAssertEqual(task!.cancels.value, 1)
    }

    func testTokenPromiseDoesNotStartWhenTokenIsAlreadyCancelled() {
        let request = CancellationRequest()
        request.cancel()
        var started = false
        let promise = Promise<Int>(cancellationToken: request.token) { _ in
            started = true
            return {}
        }
        XCTAssertFalse(started)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testTokenPromiseChecksTheTokenAgainWhenTheTaskCompletes() {
        // The cancellation is decided (isCancelled is true) while the handlers have not run yet:
        // a task completing in that window must still be rejected.
        let request = CancellationRequest()
        var task: ManualTask<Int>?
        let promise = Promise<Int>(cancellationToken: request.token) { resolver in
            task = ManualTask(resolver)
            return {}
        }
        let box = UncheckedBox(task!)
        request.token.onCancel { box.value.resolver.fulfill(1) }  // runs before the promise's own
        request.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testTokenPromiseCancelledFromInsideItsBody() {
        let request = CancellationRequest()
        let cancels = Counter()
        let promise = Promise<Int>(cancellationToken: request.token) { _ in
            request.cancel()  // before the task's cancel function is even returned
            return { cancels.increment() }
        }
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancels.value, 1)
    }

    func testTokenPromiseBodyThrowingRejects() {
        let request = CancellationRequest()
        let promise = Promise<Int>(cancellationToken: request.token) { _ in throw TestError.failed }
        XCTAssertEqual(promise.error as? TestError, .failed)
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
    }

    func testTokenPromiseWithoutTokenIsCancellableThroughCancellize() {
        let (promise, task) = tokenPromiseOfAManualTask(cancellationToken: nil)
        let cancellable = promise.cancellize()
        cancellable.cancel()
        XCTAssertEqual(task.cancels.value, 1)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled)
    }

    func testTokenPromiseCancellizeAndTokenBothCancelTheTaskOnce() {
        let request = CancellationRequest()
        let (promise, task) = tokenPromiseOfAManualTask(cancellationToken: request.token)
        promise.cancellize().cancel()
        request.cancel()
        XCTAssertEqual(task.cancels.value, 1)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testTokenPromiseRemovesItsRegistrationAndReleasesItsTaskWhenSettled() {
        let request = CancellationRequest()
        let released = Counter()
        for value in 0..<1_000 {
            let probe = DeinitProbe { released.increment() }
            let promise = Promise<Int>(cancellationToken: request.token) { resolver in
                resolver.fulfill(value)
                return { probe.touch() }
            }
            XCTAssertEqual(promise.value, value)
        }
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
        XCTAssertEqual(released.value, 1_000)
    }

    func testTokenPromiseReleasesEverythingAfterCancellation() {
        let request = CancellationRequest()
        let released = Counter()
        weak var weakPromise: Promise<Int>?
        weak var weakResolver: Resolver<Int>?
        do {
            let probe = DeinitProbe { released.increment() }
            let promise = Promise<Int>(cancellationToken: request.token) { resolver in
                weakResolver = resolver
                return {
                    probe.touch()
                    _ = resolver  // the task keeps its resolver until it is cancelled
                }
            }
            weakPromise = promise
            request.cancel()
            XCTAssertTrue(promise.isRejected)
        }
        XCTAssertEqual(released.value, 1)
        XCTAssertNil(weakPromise)
        XCTAssertNil(weakResolver)
    }

    func testPendingTokenPromiseDroppedByEveryoneIsFreed() {
        let request = CancellationRequest()
        weak var weakPromise: Promise<Int>?
        let previous = conf.logHandler
        conf.logHandler = { _ in }  // the abandoned resolver reports a pending promise
        defer { conf.logHandler = previous }
        do {
            let promise = Promise<Int>(cancellationToken: request.token) { _ in {} }
            weakPromise = promise
        }
        XCTAssertNil(weakPromise)
        request.cancel()
    }
}

enum TestErrorForTokens: Error { case failed }
private typealias TestError = TestErrorForTokens
