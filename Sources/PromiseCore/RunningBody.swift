internal import CPromiseLock

// The body a cancellable chain runs on this thread (rule 7 of the seam, Promise+Attachment.swift):
// while a step's body runs, the step, its attachment and the key the attachment knows it by are
// this thread's *running body*, so that code inside the body can find its step
// (CancellablePromiseKit's `CancellationToken.current`). Only steps with an attachment are
// marked: a plain promise's step costs nothing more. A body that runs another step's body
// synchronously (a step settled on this thread, `on: nil`) marks that one while it runs, and its
// own again afterwards. The record is CPromiseLock's thread-local `cpk_running_body`.

/// A running-body record, as it was before a body was marked, and where this thread keeps it:
/// put back when the body returns (on the same thread).
@usableFromInline struct RunningBodyMark {
    let record: OpaquePointer
    let previous: (owner: UnsafeRawPointer?, step: UnsafeRawPointer?, key: UInt32)
    /// Whether the record holds a reference to the owner, released when the mark is put back.
    let holdsOwner: Bool
}

/// Marks the body of `step` (`nil`: a body that runs before its promise is listed anywhere),
/// governed by `owner`, which knows it by `key`, as this thread's running body; returns the mark
/// to put back with `leaveRunningBody(_:)`. With `holdingOwner`, the record holds `owner` until
/// then (a step's attachment: a cancellation may release the step's own reference meanwhile);
/// otherwise the caller keeps it alive. The caller keeps `step` alive.
@usableFromInline func enterRunningBody(
    owner: AnyObject, key: UInt32, step: AnyObject?, holdingOwner: Bool = true
) -> RunningBodyMark {
    let record = cpk_running_body_record()!
    let previous = record.pointee
    let ownerPointer =
        holdingOwner ? Unmanaged.passRetained(owner).toOpaque() : Unmanaged.passUnretained(owner).toOpaque()
    record.pointee = cpk_running_body(
        owner: UnsafeRawPointer(ownerPointer),
        step: step.map { UnsafeRawPointer(Unmanaged.passUnretained($0).toOpaque()) },
        key: key)
    return RunningBodyMark(
        record: OpaquePointer(record), previous: (previous.owner, previous.step, previous.key), holdsOwner: holdingOwner
    )
}

/// Puts back the record `enterRunningBody` replaced, and releases the owner it held.
@usableFromInline func leaveRunningBody(_ mark: RunningBodyMark) {
    let record = UnsafeMutablePointer<cpk_running_body>(mark.record)
    let owner = record.pointee.owner
    record.pointee = cpk_running_body(owner: mark.previous.owner, step: mark.previous.step, key: mark.previous.key)
    if mark.holdsOwner, let owner { Unmanaged<AnyObject>.fromOpaque(owner).release() }
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
/// The caller keeps `owner` alive while `body` runs.
@inlinable package func _runAsRunningBody(owner: AnyObject, key: UInt32, _ body: () throws -> Void) rethrows {
    let mark = enterRunningBody(owner: owner, key: key, step: nil, holdingOwner: false)
    defer { leaveRunningBody(mark) }
    try body()
}
