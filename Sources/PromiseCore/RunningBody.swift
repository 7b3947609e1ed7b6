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
    let previous: cpk_running_body
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
        step: step.map { UnsafeRawPointer(Unmanaged.passUnretained($0).toOpaque()) }, kept: nil, key: key)
    return RunningBodyMark(record: OpaquePointer(record), previous: previous, holdsOwner: holdingOwner)
}

/// Puts back the record `enterRunningBody` replaced, and releases the owner it held and what a
/// reader kept with the body.
@usableFromInline func leaveRunningBody(_ mark: RunningBodyMark) {
    let record = UnsafeMutablePointer<cpk_running_body>(mark.record)
    let ended = record.pointee
    record.pointee = mark.previous
    if mark.holdsOwner, let owner = ended.owner { Unmanaged<AnyObject>.fromOpaque(owner).release() }
    if let kept = ended.kept { Unmanaged<AnyObject>.fromOpaque(kept).release() }
}

/// What a reader keeps with this thread's running body (the token `CancellationToken.current`
/// read), made by `make` on the first read in the body: `make` receives the owner that governs
/// the body, its key there, and its step (`nil` for a body that runs before its promise is
/// listed); the record holds what it returns until the body returns. `nil` without calling
/// `make` when no marked body runs.
package func _keptByRunningBody(
    _ make: (_ owner: AnyObject, _ key: UInt32, _ step: AnyObject?) -> AnyObject
) -> AnyObject? {
    let record = cpk_running_body_record()!
    if let kept = record.pointee.kept { return Unmanaged<AnyObject>.fromOpaque(kept).takeUnretainedValue() }
    guard let owner = record.pointee.owner else { return nil }
    let made = make(
        Unmanaged<AnyObject>.fromOpaque(owner).takeUnretainedValue(), record.pointee.key,
        record.pointee.step.map { Unmanaged<AnyObject>.fromOpaque($0).takeUnretainedValue() })
    record.pointee.kept = UnsafeRawPointer(Unmanaged.passRetained(made).toOpaque())
    return made
}

/// Runs `body` as this thread's running body for `owner`, which knows it by `key`, before its
/// promise is listed (the body of a cancellable promise's initialiser, which makes the promise).
/// The caller keeps `owner` alive while `body` runs.
@inlinable package func _runAsRunningBody(owner: AnyObject, key: UInt32, _ body: () throws -> Void) rethrows {
    let mark = enterRunningBody(owner: owner, key: key, step: nil, holdingOwner: false)
    defer { leaveRunningBody(mark) }
    try body()
}
