import PromiseCore

// Swift Concurrency bridges:
//
// - `try await cancellablePromise.async()`: awaiting a cancellable promise; cancelling the
//   awaiting `Task` cancels the promise.
// - `CancellablePromise(priority:operation:)`: a cancellable promise made from an `async` body;
//   cancelling the promise cancels its `Task`.
// - `withCancellationToken { token in … }`: a token cancelled when the current `Task` is.
// - `task.cancel(on: token)`: a `Task` cancelled when a token is.

extension CancellablePromise {
    /// Waits for the promise without blocking a thread and returns its value or throws its
    /// error.
    ///
    /// Cancelling the awaiting `Task` cancels this promise (and so its whole chain), even if the
    /// task was cancelled before `async()` was called: the call then throws the promise's
    /// rejection, `CancellablePromiseError.cancelled` (a `CancellableError`, so
    /// `error.isCancelled` is `true`). A promise that has already settled returns or throws its
    /// own result. The continuation is resumed exactly once.
    ///
    /// ```swift
    /// let task = Task { try await download.async() }
    /// task.cancel()   // download.cancel() is called; the task throws .cancelled
    /// ```
    public func async() async throws -> T {
        if let result { return try result.get() }
        let promise = self.promise
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<T, Error>) in
                promise.pipe { result in
                    switch result {
                    case .fulfilled(let value):
                        nonisolated(unsafe) let value = value
                        continuation.resume(returning: value)
                    case .rejected(let error):
                        continuation.resume(throwing: error)
                    }
                }
            }
        } onCancel: {
            self.cancel()
        }
    }

    /// Runs `operation` in a new `Task` (with `priority`) and settles with its result.
    ///
    /// `cancel()` rejects this promise with `CancellablePromiseError.cancelled` at once (before
    /// it returns), then cancels the `Task`; whatever `operation` returns or throws afterwards
    /// is discarded. `operation` sees the cancellation as Swift Concurrency cancellation
    /// (`Task.isCancelled`, `Task.checkCancellation()`, cancellable awaits);
    /// `CancellationToken.current` is ``CancellationToken/none`` in it, as it runs in a `Task`
    /// rather than as a body of the chain.
    ///
    /// ```swift
    /// let image = CancellablePromise { try await loader.image(at: url) }
    /// image.cancel()  // the Task is cancelled; `image` is already rejected
    /// ```
    @inlinable
    public convenience init(
        priority: TaskPriority? = nil,
        operation: @escaping @Sendable () async throws -> T
    ) {
        // No `Resolver`: the task always settles the promise, so the resolver's "pending promise
        // deallocated" check has nothing to catch, and the task holds the promise directly (one
        // allocation less). Inlinable, so that the caller's specialization takes `Promise<T>`'s
        // metadata from a static cache instead of a run-time lookup (about 1,000 instructions).
        let promise = Promise<T>._makePending()
        let task = Task(priority: priority) {
            do {
                promise.resolve(.fulfilled(try await operation()))
            } catch {
                promise.resolve(.rejected(error))
            }
        }
        self.init(newChain: promise, cancel: { task.cancel() })
    }
}

/// Runs `body` with a token that is cancelled when the current `Task` is cancelled (Task →
/// token).
///
/// If the task is already cancelled, the token is cancelled before `body` starts. Otherwise the
/// token is cancelled synchronously on the thread that cancels the task, while `body` runs; its
/// `on: nil` handlers run there. When `body` returns or throws without the task having been
/// cancelled, the token completes "not cancelled" (its `onComplete` handlers run with `false`
/// on this task, and everything registered on it is released). `body` runs in the caller's
/// isolation.
///
/// ```swift
/// let data = try await withCancellationToken { token in
///     try await fetch(url, cancellationToken: token).async()
/// }
/// ```
public func withCancellationToken<R>(
    isolation: isolated (any Actor)? = #isolation,
    _ body: (CancellationToken) async throws -> R
) async rethrows -> R {
    let request = CancellationRequest()
    defer { request.token.complete(cancelled: false) }
    return try await withTaskCancellationHandler {
        try await body(request.token)
    } onCancel: {
        request.cancel()
    }
}

extension Task {
    /// Cancels this task when `token` is cancelled (token → Task), as `cancel()` would.
    ///
    /// The task is cancelled synchronously on the thread that cancels the token, or at once if
    /// the token is already cancelled. The token holds the task handle until it completes or the
    /// returned registration is removed; remove it when the task is done if the token lives long.
    ///
    /// ```swift
    /// let task = Task { try await sync() }
    /// task.cancel(on: request.token)
    /// request.cancel()    // the task is cancelled
    /// ```
    @discardableResult
    public func cancel(on token: CancellationToken) -> CancellationRegistration {
        token.onCancel { self.cancel() }
    }
}
