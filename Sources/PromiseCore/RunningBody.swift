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
    /// The owner marked, retained until the mark is put back when the step's own reference may
    /// go meanwhile (a cancellation settles the step); `nil` when the caller holds it. (A raw
    /// pointer: the mark stays a trivial value, copied and dropped without reference counting.)
    let heldOwner: UnsafeRawPointer?
}

/// Marks the body of `step`, governed by `owner`, which knows it by `key`, as this thread's
/// running body; returns the mark to put back with `leaveRunningBody(_:)`. The mark holds a
/// reference to `owner` until then (a step's attachment, which a cancellation may release
/// meanwhile). The caller keeps `step` alive.
@usableFromInline func enterRunningBody(owner: AnyObject, key: UInt32, step: AnyObject) -> RunningBodyMark {
    let record = markRunningBody(
        owner: owner, key: key, step: UnsafeRawPointer(Unmanaged.passUnretained(step).toOpaque()))
    return RunningBodyMark(
        record: OpaquePointer(record.record), previous: record.previous,
        heldOwner: UnsafeRawPointer(Unmanaged.passRetained(owner).toOpaque()))
}

/// Marks a body that runs before its promise is listed anywhere (no step), governed by `owner`,
/// which knows it by `key`; the caller keeps `owner` alive until the mark is put back.
@usableFromInline func enterRunningBody(unheld owner: AnyObject, key: UInt32) -> RunningBodyMark {
    let record = markRunningBody(owner: owner, key: key, step: nil)
    return RunningBodyMark(record: OpaquePointer(record.record), previous: record.previous, heldOwner: nil)
}

/// Writes this thread's record for a marked body; returns it and what it replaced.
@inline(__always)
private func markRunningBody(
    owner: AnyObject, key: UInt32, step: UnsafeRawPointer?
) -> (record: UnsafeMutablePointer<cpk_running_body>, previous: cpk_running_body) {
    let record = cpk_running_body_record()!
    let previous = record.pointee
    record.pointee = cpk_running_body(
        owner: UnsafeRawPointer(Unmanaged.passUnretained(owner).toOpaque()), step: step, kept: nil, key: key)
    return (record, previous)
}

/// Puts back the record `enterRunningBody` replaced; releases the owner the mark held and what a
/// reader kept with the body.
@usableFromInline func leaveRunningBody(_ mark: RunningBodyMark) {
    let record = UnsafeMutablePointer<cpk_running_body>(mark.record)
    let kept = record.pointee.kept
    record.pointee = mark.previous
    if let kept { Unmanaged<AnyObject>.fromOpaque(kept).release() }
    if let owner = mark.heldOwner { Unmanaged<AnyObject>.fromOpaque(owner).release() }
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
    let mark = enterRunningBody(unheld: owner, key: key)
    defer { leaveRunningBody(mark) }
    try body()
}
