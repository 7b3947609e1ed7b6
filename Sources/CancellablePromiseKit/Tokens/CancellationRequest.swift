/// The client side of a cancellation: whoever starts work keeps the request, passes its
/// ``token`` to the work, and may later call ``cancel()``.
///
/// ```swift
/// final class ViewModel {
///     private var cancellationRequest = CancellationRequest()
///
///     func reload() {
///         cancellationRequest = CancellationRequest()   // the previous token completes "not cancelled"
///         fetch(url, cancellationToken: cancellationRequest.token).done { self.show($0) }
///     }
///
///     func disappear() {
///         cancellationRequest.cancel()
///     }
/// }
/// ```
///
/// Releasing a request that was never cancelled completes its token as "not cancelled": the
/// token's `onComplete` handlers run with `false` on the thread that releases the request, its
/// `onCancel` handlers are skipped, and all of them are released with what they captured.
/// Thread-safe (`Sendable`).
public final class CancellationRequest: Cancellable, Sendable {
    /// The token to hand to the work this request may cancel. The token outlives the request
    /// if the work keeps it; it is completed either way.
    public let token: CancellationToken

    /// Creates a request whose token is pending.
    public init() {
        token = CancellationToken()
    }

    deinit {
        token.complete(cancelled: false)
    }

    /// Cancels the token: its `onCancel` and `onComplete` handlers run, `on: nil` ones
    /// synchronously on this thread before `cancel()` returns, the others on their queues; its
    /// registered `Cancellable`s are cancelled. Any thread, any number of times: later calls
    /// do nothing.
    public func cancel() {
        token.complete(cancelled: true)
    }

    /// `true` once ``cancel()`` was called (the token is cancelled).
    public var isCancelled: Bool { token.isCancelled }
}

extension CancellationRequest: CustomStringConvertible {
    /// `CancellationRequest(pending)` or `CancellationRequest(cancelled)`.
    public var description: String {
        "CancellationRequest(\(isCancelled ? "cancelled" : "pending"))"
    }
}
