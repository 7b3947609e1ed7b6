import Dispatch
import PromiseCore

/// Something that can be asked to stop: a task, a request, a promise.
///
/// ``CancellationToken/register(_:on:)`` holds a `Cancellable` weakly (hence `AnyObject`) and
/// calls `cancel()` when the token is cancelled, so the token never keeps a finished task alive.
/// `cancel()` may be called from any thread, more than once, and after the work has finished;
/// conforming types must tolerate that (the conformances below do).
///
/// Conformances: `CancellablePromise`, `CancellableFinalizer`, `CancelContext`,
/// ``CancellationRequest``, `DispatchWorkItem`; `PromiseFoundation` adds `URLSessionTask` and
/// `Process`.
///
/// ```swift
/// let item = DispatchWorkItem { work() }
/// request.token.register(item)       // request.cancel() now cancels the work item
/// DispatchQueue.global().asyncAfter(deadline: .now() + 1, execute: item)
/// ```
public protocol Cancellable: AnyObject {
    /// Asks the work to stop. Safe from any thread, any number of times; a no-op once the work
    /// has finished.
    func cancel()

    /// `true` once `cancel()` was called (or the work otherwise knows it was cancelled).
    var isCancelled: Bool { get }
}

/// `cancel()` cancels the whole chain (see ``CancelContext``); `isCancelled` is `true` once
/// cancellation was requested for the chain.
extension CancellablePromise: Cancellable {}

/// `cancel()` cancels the chain the finalizer ends.
extension CancellableFinalizer: Cancellable {}

/// `cancel()` cancels every promise of the context's chain.
extension CancelContext: Cancellable {}

/// `cancel()` prevents the work item from running if it has not started (a running item is not
/// interrupted); `isCancelled` is the item's own flag.
extension DispatchWorkItem: Cancellable {}

// MARK: - Binding a cancellable promise to a token

extension CancellablePromise {
    /// Cancels this promise's chain when `token` is cancelled, as `cancel()` would.
    ///
    /// The cancellation runs synchronously on the thread that cancels the token (at once, on
    /// this thread, if `token` is already cancelled). Until this promise settles the token holds
    /// the chain's ``CancelContext`` (so the chain stays cancellable through the token even if
    /// nothing else holds it); the registration is removed as soon as this promise settles, so
    /// a long-lived token does not accumulate registrations. Returns `self`, to keep chaining:
    ///
    /// ```swift
    /// let request = CancellationRequest()
    /// fetchUser().cancel(on: request.token).done { user in show(user) }
    /// request.cancel()    // the chain is cancelled, `done` never runs
    /// ```
    @discardableResult
    public func cancel(on token: CancellationToken) -> CancellablePromise<T> {
        guard promise.isPending else { return self }
        // The token holds the chain's handle (it can cancel the chain, so it keeps it
        // cancellable) until this promise settles.
        let registration = token.onCancel { [context = cancelContext] in context.cancel() }
        // The promise's settle listener (held until it settles): it leaves the token then.
        promise.addSettleListener(registration, key: 0, holdingStrongly: true)
        return self
    }
}
