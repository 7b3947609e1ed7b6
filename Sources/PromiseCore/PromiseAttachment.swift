// Attachments: the one object library code may attach to a pending promise (a producer's task,
// `PromiseCancellation`, or a cancellable wrapper's entry in `CancellablePromiseKit`), told when
// the promise settles and asked before a step's body starts. Unlike handlers, an attachment
// does not wait for the result: it governs the promise while it is pending.

/// An object attached to a promise by library code (a producer's task, a cancellable chain's
/// storage), told once, outside every lock, that the promise settled. One attachment may serve
/// many promises: each promise stores the `key` its attachment knows it by (a slot of a cancel
/// storage's member table) and passes it back with every call.
@usableFromInline package protocol PromiseAttachment: AnyObject {
    func promiseDidSettle(key: UInt32)

    /// Asked, outside every lock, just before a step body (not an observer's) starts: an error
    /// here means the body must not run and the step rejects with it instead (a cancelled
    /// chain). The default allows every body.
    func errorBeforeBody(key: UInt32) -> (any Error)?
}

extension PromiseAttachment {
    @inlinable package func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

/// Whether a step's body may start (see `Promise.bodyStart`).
@usableFromInline enum BodyStart {
    /// Pending, and its attachment allows it.
    case start
    /// Settled already (rejected by a cancellation): the body must not start.
    case settled
    /// The attachment forbids it: settle with this error instead.
    case reject(any Error)
}
