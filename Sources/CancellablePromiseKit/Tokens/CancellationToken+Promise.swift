import PromiseCore

// The "function taking an optional cancellation token" convention, made first-class:
//
//     func fetch(_ url: URL, cancellationToken: CancellationToken? = nil) -> Promise<Data>
//
// A caller who does not care passes nothing; a caller who does passes a request's token and
// gets a promise rejected with `CancellablePromiseError.cancelled` when it cancels.

extension Promise {
    /// Starts a task whose promise is rejected with `CancellablePromiseError.cancelled` when
    /// `cancellationToken` is cancelled. `body` runs at once, on this thread, with the resolver
    /// and returns the function that cancels the task.
    ///
    /// - If the token is already cancelled, `body` is not called (the task never starts) and
    ///   the promise is rejected at once.
    /// - When the token is cancelled while the task runs, the promise is rejected first, then
    ///   the cancel function is called, synchronously on the cancelling thread (once, and only
    ///   if the task has not completed).
    /// - When the task completes, the token is checked again: if it was cancelled meanwhile,
    ///   the promise is rejected with the cancellation error whatever the task's result.
    /// - The task is also attached to the promise, so `promise.cancellize()` gives a
    ///   `CancellablePromise` whose `cancel()` cancels the task and rejects this promise.
    /// - Once the promise settles, the cancel function is released and the token registration
    ///   removed, so a long-lived token does not accumulate handlers. The token holds the task
    ///   only while something can still settle the promise (the task keeps its resolver) or
    ///   observe it (the promise is held); a task abandoned with its promise is freed, with its
    ///   cancel function, and its registration swept from the token.
    ///
    /// A `nil` token makes a promise that only `cancellize()` can cancel. If `body` throws,
    /// the promise is rejected with the error.
    ///
    /// ```swift
    /// func fetch(_ url: URL, cancellationToken: CancellationToken? = nil) -> Promise<Data> {
    ///     Promise(cancellationToken: cancellationToken) { resolver in
    ///         let task = session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
    ///         task.resume()
    ///         return task.cancel
    ///     }
    /// }
    /// ```
    @preconcurrency public convenience init(
        cancellationToken token: CancellationToken?,
        resolver body: (Resolver<T>) throws -> (@Sendable () -> Void)
    ) {
        var outputResolver: Resolver<T>?
        self.init { outputResolver = $0 }
        guard let output = outputResolver else { return }
        if let token, token.isCancelled {
            output.reject(CancellablePromiseError.cancelled)
            return
        }
        let (inner, innerResolver) = Promise<T>.pending()
        let task = TokenBoundTask(output: self, innerResolver: innerResolver)
        inner.pipe { result in
            if token?.isCancelled == true {
                output.reject(CancellablePromiseError.cancelled)
            } else {
                output.resolve(result)
            }
            task.finish()
        }
        do {
            task.setCancelBody(try body(innerResolver))
        } catch {
            innerResolver.reject(error)
            return
        }
        attachCancellation { task.cancel() }
        if let token {
            // Weakly: the task lives while the promise can still be settled (its resolver is
            // held) or observed (the promise is held), and not beyond, on a long-lived token.
            task.setRegistration(token.register(task))
        }
    }
}

/// The task behind a `Promise(cancellationToken:resolver:)`: its cancel function and token
/// registration until the promise settles. It holds the promises weakly, so nothing here keeps
/// a pending promise alive in a cycle; the token holds it weakly too (it is a `Cancellable`):
/// the resolver's promise (through its `pipe` handler) and the returned promise (through its
/// attached cancellation) keep it alive.
private final class TokenBoundTask<T>: Cancellable, @unchecked Sendable {
    // @unchecked: mutable state is in `state`, behind its lock; the rest is immutable.
    private struct State {
        var finished = false
        var cancelled = false
        var cancelBody: (() -> Void)?
        var registration: CancellationRegistration?
    }

    private let state = Locked(State())
    private weak var output: Promise<T>?
    private weak var innerResolver: Resolver<T>?

    init(output: Promise<T>, innerResolver: Resolver<T>) {
        self.output = output
        self.innerResolver = innerResolver
    }

    func setCancelBody(_ body: @escaping () -> Void) {
        let unused: (() -> Void)? = state.withLock { state in
            if state.finished { return body }
            state.cancelBody = body
            return nil
        }
        _ = unused  // released outside the lock
    }

    func setRegistration(_ registration: CancellationRegistration) {
        let removeNow = state.withLock { state -> Bool in
            if state.finished { return true }
            state.registration = registration
            return false
        }
        if removeNow { registration.remove() }
    }

    /// The promise settled: release the cancel function and leave the token.
    func finish() {
        let (body, registration) = state.withLock { state in
            state.finished = true
            defer {
                state.cancelBody = nil
                state.registration = nil
            }
            return (state.cancelBody, state.registration)
        }
        registration?.remove()
        _ = body
    }

    /// `true` once the token (or `cancellize()`) cancelled the task.
    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Rejects the promise, then cancels the task (settle first, as `CancelContext` does, so
    /// the task's own cancellation error cannot take the place of the cancellation).
    func cancel() {
        let body: (() -> Void)? = state.withLock { state in
            state.cancelled = true
            if state.finished { return nil }
            defer { state.cancelBody = nil }
            return state.cancelBody
        }
        output?.resolve(.rejected(CancellablePromiseError.cancelled))
        body?()
        innerResolver?.reject(CancellablePromiseError.cancelled)
    }
}
