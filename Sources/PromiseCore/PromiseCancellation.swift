// The task behind a promise: the code that produces a promise (a timer, a network request, a
// child process…) attaches a `PromiseCancellation` that stops its work, so that
// `CancellablePromiseKit`'s `cancellize()` can stop the real work and not only the chain.

/// A task attached to a promise by the code that produced it (a timer, a network request, a
/// child process…). `CancellablePromiseKit` uses it so that `cancellize()` stops the real work.
/// Attached with `Promise.attachCancellation(_:)`, read back with `Promise._attachedCancellation`.
@usableFromInline package final class PromiseCancellation: PromiseAttachment, Sendable {
    private let body: @Sendable () -> Void

    /// `body` stops the task and, if it can, rejects the promise with a cancellation error.
    package init(_ body: @escaping @Sendable () -> Void) {
        self.body = body
    }

    @usableFromInline package func _cancel() { body() }

    @usableFromInline package func promiseDidSettle(key: UInt32) {}
}
