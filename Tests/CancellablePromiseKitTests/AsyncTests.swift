import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

final class AsyncTests: XCTestCase {
    // MARK: cancellablePromise.async()

    func testAsyncReturnsTheValue() async throws {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        runWhenAwaited(promise.promise) { resolver.fulfill(5) }
        let value = try await promise.async()
        XCTAssertEqual(value, 5)
    }

    func testAsyncThrowsTheRejection() async {
        let promise = CancellablePromise<Int>(error: TestErrorForTokens.failed)
        do {
            _ = try await promise.async()
            XCTFail("expected an error")
        } catch {
            XCTAssertEqual(error as? TestErrorForTokens, .failed)
        }
    }

    func testAsyncThrowsCancelledWhenThePromiseIsCancelled() async {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        runWhenAwaited(promise.promise) { promise.cancel() }
        do {
            _ = try await promise.async()
            XCTFail("expected cancellation")
        } catch {
            XCTAssertEqual(error as? CancellablePromiseError, .cancelled)
        }
        withExtendedLifetime(resolver) {}
    }

    func testCancellingTheAwaitingTaskCancelsThePromiseAndItsTask() async {
        let cancels = Counter()
        var kept: Resolver<Int>?
        let promise = CancellablePromise<Int> { resolver in
            kept = resolver
            return { cancels.increment() }
        }
        let tail = promise.map(on: nil) { $0 + 1 }
        let task = Task { try await tail.async() }
        await untilAwaited(tail.promise)
        task.cancel()
        let result = await task.result
        XCTAssertEqual((result.asyncTestFailure) as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(promise.isCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancels.value, 1)
        withExtendedLifetime(kept) {}
    }

    func testTaskCancelledBeforeAsyncIsCalledCancelsThePromise() async {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }  // cancelled before async() is called
            return try await promise.async()
        }
        let result = await task.result
        XCTAssertEqual(result.asyncTestFailure as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(promise.isCancelled)
        withExtendedLifetime(resolver) {}
    }

    func testSettledPromiseReturnsItsValueEvenInACancelledTask() async throws {
        let promise = CancellablePromise.value(3)
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await promise.async()
        }
        let value = try await task.value
        XCTAssertEqual(value, 3)
        XCTAssertFalse(promise.isCancelled)
    }

    // MARK: CancellablePromise(priority:operation:)

    func testAsyncBodyFulfils() async throws {
        let promise = CancellablePromise(priority: .userInitiated) { () async throws -> Int in
            await Task.yield()  // settles after a suspension, not synchronously
            return 9
        }
        let value = try await promise.async()
        XCTAssertEqual(value, 9)
    }

    func testAsyncBodyErrorRejects() async {
        let promise = CancellablePromise<Int> { () async throws -> Int in throw TestErrorForTokens.failed }
        let result = await Task { try await promise.async() }.result
        XCTAssertEqual(result.asyncTestFailure as? TestErrorForTokens, .failed)
    }

    func testCancelRejectsAtOnceAndCancelsTheTask() async {
        let bodyStarted = Handshake()
        let sawCancellation = Handshake()
        let promise = CancellablePromise<Int> {
            bodyStarted.signal()
            do {
                try await untilCancelled()
            } catch {
                if error is CancellationError { sawCancellation.signal() }
                throw error
            }
        }
        _ = await bodyStarted.arrival()
        promise.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)  // before any await
        let taskWasCancelled = await sawCancellation.arrival()
        XCTAssertTrue(taskWasCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellingAChainMemberCancelsTheBodyTask() async {
        let sawCancellation = Handshake()
        let promise = CancellablePromise<Int> {
            do {
                try await untilCancelled()
            } catch {
                sawCancellation.signal()
                throw error
            }
        }
        let tail = promise.map(on: nil) { $0 * 2 }.done(on: nil) { _ in XCTFail("ran after cancel") }
        tail.cancel()
        let taskWasCancelled = await sawCancellation.arrival()
        XCTAssertTrue(taskWasCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: Task → token: withCancellationToken

    func testWithCancellationTokenIsCancelledWithTheTask() async {
        let handlerRan = Counter()
        let entered = Handshake()
        let task = Task { () -> Bool in
            await withCancellationToken { token -> Bool in
                token.onCancel { handlerRan.increment() }
                entered.signal()
                while !token.isCancelled { await Task.yield() }
                return token.isCancelled
            }
        }
        _ = await entered.arrival()
        task.cancel()
        let sawCancelled = await task.value
        XCTAssertTrue(sawCancelled)
        XCTAssertEqual(handlerRan.value, 1)
    }

    func testWithCancellationTokenOfAnAlreadyCancelledTask() async {
        let task = Task { () -> Bool in
            withUnsafeCurrentTask { $0?.cancel() }
            return await withCancellationToken { token in token.isCancelled }
        }
        let cancelled = await task.value
        XCTAssertTrue(cancelled)
    }

    func testWithCancellationTokenCompletesNotCancelledWhenBodyReturns() async throws {
        var kept: CancellationToken?
        let completion = SendableBox<Bool?>(nil)
        let value = try await withCancellationToken { token -> Int in
            kept = token
            token.onComplete { completion.value = $0 }
            try token.checkCancellation()
            return 4
        }
        XCTAssertEqual(value, 4)
        XCTAssertEqual(kept?.isCompleted, true)
        XCTAssertEqual(kept?.isCancelled, false)
        XCTAssertEqual(completion.value, false)
        XCTAssertEqual(kept?.pendingHandlerCount, 0)
    }

    func testWithCancellationTokenPassesTheTokenToATokenTakingFunction() async {
        let taskCancels = Counter()
        let started = Handshake()
        let kept = Recorder<Resolver<Int>>()  // the task keeps its resolver
        let task = Task { () -> Int in
            try await withCancellationToken { token in
                try await Promise<Int>(cancellationToken: token) { resolver in
                    kept.append(resolver)
                    started.signal()
                    return { taskCancels.increment() }
                }.cancellize().async()
            }
        }
        _ = await started.arrival()
        task.cancel()
        let result = await task.result
        XCTAssertEqual(result.asyncTestFailure as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(taskCancels.value, 1)
        withExtendedLifetime(kept) {}
    }

    // MARK: Token → Task: task.cancel(on:)

    func testTaskIsCancelledWhenTheTokenIs() async {
        let request = CancellationRequest()
        let task = Task { () -> Bool in
            _ = try? await untilCancelled()
            return Task.isCancelled
        }
        task.cancel(on: request.token)
        request.cancel()
        let sawCancelled = await task.value
        XCTAssertTrue(sawCancelled)
        XCTAssertTrue(task.isCancelled)
    }

    func testTaskCancelOnAlreadyCancelledTokenCancelsAtOnce() {
        let request = CancellationRequest()
        request.cancel()
        let task = Task { try await untilCancelled() }
        task.cancel(on: request.token)
        XCTAssertTrue(task.isCancelled)
    }

    func testRemovedTaskRegistrationDoesNotCancel() async {
        let request = CancellationRequest()
        let task = Task { 1 }
        let registration = task.cancel(on: request.token)
        _ = await task.value
        XCTAssertTrue(registration.remove())
        request.cancel()
        XCTAssertFalse(task.isCancelled)
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
    }

    // MARK: Leaks

    func testAsyncReleasesThePromiseAfterCancellation() async {
        weak var weakPromise: CancellablePromise<Int>?
        do {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            weakPromise = promise
            let task = Task { try await promise.async() }
            task.cancel()
            _ = await task.result
            withExtendedLifetime(resolver) {}
        }
        XCTAssertNil(weakPromise)
    }
}

extension Swift.Result where Failure == Error {
    /// The error of a failed task result.
    var asyncTestFailure: Error? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
