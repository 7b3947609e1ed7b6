import Dispatch

// The seam between PromiseCore and the cancellation layer: what a promise offers the code that
// attaches a task or a cancellable chain to it. Everything here is `package` (or internal and
// `@usableFromInline`): no public surface, PromiseKit 8's API is unchanged.
//
// - One *attachment* per pending promise (`PromiseAttachment`): a producer's task
//   (`PromiseCancellation`, attached by `after`, the Foundation promises and
//   `Promise(cancellable:resolver:)`), or the storage of the cancellable chain the promise is a
//   member of, which knows it by `attachmentKey` (its slot). The attachment is told once,
//   outside every lock, that the promise settled, and is released then.
// - Before a step's body starts (not an observer's), the step asks its attachment whether the
//   body may run (`bodyStart`): a cancelled chain's bodies never start.
// - `race` and `when` can report the input that settled them (`race(reportingWinner:)`,
//   `_when(fulfilledReportingRejection:)`, in race.swift and when.swift), so that `autoCancel`
//   cancels exactly the losers.
// - `rejectForCancel` (CancelTarget.swift) settles a promise under its chain's lock and hands
//   back the handlers it released, run by the chain after unlocking.

extension Promise {
    /// The task attached by this promise's producer, while it is pending.
    @usableFromInline package final var _attachedCancellation: PromiseCancellation? {
        lock()
        let a = attachment
        unlock()
        return a as? PromiseCancellation
    }

    /// Replaces the attachment while pending, with `new` knowing this promise by `key`. Returns
    /// `false` (attaching nothing) once settled, and the previous attachment with its key.
    @usableFromInline package final func replaceAttachment(
        with new: any PromiseAttachment, key: UInt32
    ) -> (attached: Bool, previous: (any PromiseAttachment)?, previousKey: UInt32) {
        lock()
        guard !isSettled else {
            unlock()
            return (false, nil, 0)
        }
        let previous = attachment
        let previousKey = attachmentKey
        attachment = new
        attachmentKey = key
        unlock()
        return (true, previous, previousKey)
    }

    /// Whether a step's body may start: not once the step has settled (rejected by a
    /// cancellation), nor when its attachment forbids it (its chain was cancelled before the
    /// step could be rejected). Takes the lock once; asks the attachment after releasing it.
    @inline(__always) @usableFromInline final var bodyStart: BodyStart {
        lock()
        guard !isSettled else {
            unlock()
            return .settled
        }
        let attached = attachment
        let key = attachmentKey
        unlock()
        if let attached, let error = attached.errorBeforeBody(key: key) { return .reject(error) }
        return .start
    }

    /// Sets the attachment of a step that no other thread can see yet (before it is added to
    /// its source as a handler), so that it governs the step's body from the start; `key` is
    /// what the attachment knows the step by.
    @inlinable final func initializeAttachment(_ attachment: any PromiseAttachment, key: UInt32) {
        setAttachmentUnshared(attachment, key: key)
    }

    @usableFromInline final func setAttachmentUnshared(_ new: any PromiseAttachment, key: UInt32) {
        attachment = new
        attachmentKey = key
    }

    /// Takes this promise's lock, for state a wrapper keeps beside the promise (the context
    /// `CancellablePromiseKit` makes on first use for a promise made settled); release it with
    /// `_unlockForWrapper()`. Take no other lock, and do not touch this promise, meanwhile.
    @usableFromInline package final func _lockForWrapper() { lock() }

    /// Releases the lock taken by `_lockForWrapper()`.
    @usableFromInline package final func _unlockForWrapper() { unlock() }

    /// `true` while pending; takes the lock (use it where a step must not start once settled).
    @inline(__always) final var isPendingLocked: Bool {
        lock()
        let pending = !isSettled
        unlock()
        return pending
    }

    /// Attaches the task producing this promise, so a cancellable wrapper can cancel it, or with
    /// `nil` removes an attached task; replaces a task attached before. Only while the promise
    /// is pending and not governed by anything other than a producer's task: a promise of a
    /// cancellable chain keeps its place in the chain (`CancellablePromiseKit`'s public
    /// `setCancellable(_:reject:)` may be called on any promise). Returns whether it changed
    /// anything.
    @discardableResult
    package final func attachCancellation(_ cancellation: PromiseCancellation?) -> Bool {
        lock()
        guard !isSettled, attachment == nil || attachment is PromiseCancellation else {
            unlock()
            return false
        }
        let previous = attachment
        attachment = cancellation
        unlock()
        // Released outside the lock: the previous task's closure may capture anything.
        withExtendedLifetime(previous) {}
        return true
    }
}
