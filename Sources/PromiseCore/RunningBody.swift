internal import CPromiseLock

// The body a cancellable chain runs on this thread (rule 7 of the seam, Promise+Attachment.swift):
// while a step's body runs, the step, its attachment and the key the attachment knows it by are
// this thread's *running body*, so that code inside the body can find its step
// (CancellablePromiseKit's `CancellationToken.current`). Only steps with an attachment are
// marked: a plain promise's step costs nothing more. A body that runs another step's body
// synchronously (a step settled on this thread, `on: nil`) marks that one while it runs, and its
// own again afterwards. The record is CPromiseLock's thread-local `cpk_running_body`.

/// A running-body record, as it was before a body was marked: put back when the body returns.
@usableFromInline struct RunningBodyMark {
    let owner: UnsafeRawPointer?
    let step: UnsafeRawPointer?
    let key: UInt32
}

/// Marks the body of `step` (`nil`: a body that runs before its promise is listed anywhere),
/// governed by `owner`, which knows it by `key`, as this thread's running body; returns the mark
/// to put back with `leaveRunningBody(_:)`. The caller keeps `owner` and `step` alive until then.
@usableFromInline func enterRunningBody(owner: AnyObject, key: UInt32, step: AnyObject?) -> RunningBodyMark {
    let record = cpk_running_body_record()!
    let previous = RunningBodyMark(owner: record.pointee.owner, step: record.pointee.step, key: record.pointee.key)
    record.pointee = cpk_running_body(
        owner: UnsafeRawPointer(Unmanaged.passUnretained(owner).toOpaque()),
        step: step.map { UnsafeRawPointer(Unmanaged.passUnretained($0).toOpaque()) },
        key: key)
    return previous
}

/// Puts back the record `enterRunningBody` replaced.
@usableFromInline func leaveRunningBody(_ previous: RunningBodyMark) {
    cpk_running_body_record()!.pointee = cpk_running_body(owner: previous.owner, step: previous.step, key: previous.key)
}

extension Promise {
    /// Runs `body`, this step's body, as this thread's running body for `owner`, the step's
    /// attachment (which knows it by `key`); just runs it if there is none. `owner` is kept alive
    /// while `body` runs (a cancellation may release the step's own reference meanwhile).
    @inlinable @inline(__always) final func runAsBody<R>(
        of owner: (any PromiseAttachment)?, key: UInt32, _ body: () throws -> R
    ) rethrows -> R {
        guard let owner else { return try body() }
        let previous = enterRunningBody(owner: owner, key: key, step: self)
        defer { leaveRunningBody(previous) }
        return try withExtendedLifetime(owner) { try body() }
    }
}

/// This thread's running body, if any: the owner that governs it, its key there, and its step
/// (`nil` for a body that runs before its promise is listed). Only while the body runs; the
/// objects are alive then.
package func _runningBody() -> (owner: AnyObject, key: UInt32, step: AnyObject?)? {
    let record = cpk_running_body_record()!.pointee
    guard let owner = record.owner else { return nil }
    return (
        Unmanaged<AnyObject>.fromOpaque(owner).takeUnretainedValue(), record.key,
        record.step.map { Unmanaged<AnyObject>.fromOpaque($0).takeUnretainedValue() }
    )
}

/// Runs `body` as this thread's running body for `owner`, which knows it by `key`, before its
/// promise is listed (the body of a cancellable promise's initialiser, which makes the promise).
package func _runAsRunningBody<R>(owner: AnyObject, key: UInt32, _ body: () throws -> R) rethrows -> R {
    let previous = enterRunningBody(owner: owner, key: key, step: nil)
    defer { leaveRunningBody(previous) }
    return try withExtendedLifetime(owner) { try body() }
}
