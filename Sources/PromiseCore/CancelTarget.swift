// What a cancellation acts on: a promise of any value type, seen through `CancelTarget` by
// `CancellablePromiseKit`'s cancel contexts, which reject the members of a chain without
// knowing their types.

/// A promise that a cancellation can reject, whatever its value type (used by
/// `CancellablePromiseKit`'s cancel contexts).
@usableFromInline package protocol CancelTarget: AnyObject {
    /// Rejects the promise with `error` if it is pending; returns what settling released
    /// (nothing if it had settled already), for the caller to `drain` once it has unlocked.
    func settle(rejected error: any Error) -> ReleasedHandlers

    /// `true` while pending; takes the promise's lock.
    var isPending: Bool { get }

    /// The task attached by the promise's producer, while it is pending (see
    /// `Promise.attachCancellation(_:)`).
    var _attachedCancellation: PromiseCancellation? { get }

    /// Replaces the attachment while pending (see `Promise.replaceAttachment(with:key:)`).
    func replaceAttachment(
        with new: any PromiseAttachment, key: UInt32
    ) -> (attached: Bool, previous: (any PromiseAttachment)?, previousKey: UInt32)
}

extension Promise: CancelTarget {}
