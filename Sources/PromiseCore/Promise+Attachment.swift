import Dispatch

// The seam between PromiseCore and the cancellation layer (CancellablePromiseKit and the
// producers of PromiseFoundation). PromiseCore cancels nothing itself; this file is all it
// offers for cancelling, each entry point serving one rule of the cancellation layer (the rules below). All of
// it is `package` (or internal and `@usableFromInline`): no public surface, PromiseKit 8's API
// is unchanged.
//
// 1. `cancellize()` stops the real work. The code producing a promise attaches a closure that
//    stops the task doing the work (`attachCancellation(_:)`, kept as a `PromiseCancellation`);
//    a cancellable wrapper reads the closure back (`_attachedCancellation`) and calls it.
// 2. A chain's state lives beside its promises, not in them. Each pending promise holds one
//    *attachment* (`PromiseAttachment`): a producer's task, or the storage of the cancellable
//    chain the promise is a member of, which knows it by a key (its slot). The storage adopts a
//    promise with `replaceAttachment(with:key:)`, or makes a step with its attachment from the
//    start and lists it before the step is connected to its source (`_makeMap`, `_makeThen`,
//    `_makeGeneralStep`, then `_connect`, in Steps.swift): nothing can settle it meanwhile (a
//    step made before its key is known gets it then, `setAttachmentKeyUnshared(_:)`). The
//    attachment is told once, outside every lock, that the promise settled
//    (`promiseDidSettle(key:)`), and is released then. There is one way for an owner to hear a
//    settle: a `PromiseAttachment` told `promiseDidSettle(key:)`, either as the attachment (held
//    strongly, one per promise, no allocation) or as a settle listener in the handler list
//    (`addSettleListener(_:key:holdingStrongly:)`, SettleListener.swift: any number, each
//    holding its owner weakly, or strongly until the promise settles for an owner that is a
//    part of what watches, such as a bag's state). An
//    attachment replaced while the promise is pending, other than a producer's task, becomes
//    a settle listener: it is still told.
// 3. A cancelled chain's bodies never start. Before a step's body starts (not an observer's),
//    the step asks its attachment (`errorBeforeBody(key:)`, through `bodyStart`).
// 4. Every pending promise of a chain is rejected before `cancel()` returns. The chain rejects
//    its members, of any value type, through `CancelTarget` under its own lock; settling hands
//    the released handlers back (`ReleasedHandlers`, Handlers.swift), run with
//    `drain(consuming:)` once the chain has unlocked.
// 5. `autoCancel` cancels exactly the losers. `_race(reportingWinner:fulfilledOnly:onWin:)`
//    and `_when(fulfilledReportingRejection:onReject:)` report the input that settled them.
// 6. A wrapper may keep state beside a promise under that promise's lock (the context
//    CancellablePromiseKit makes on first use for a promise made settled):
//    `_withLockForWrapper(_:)`, the one lock lent outside PromiseCore (see Lock.swift).
// 7. A running body sees its step (`CancellationToken.current`). While the body of a step with an
//    attachment runs, the step, its attachment and key are this thread's running body
//    (RunningBody.swift; marked where `bodyStart` lets the body start, and for an observer by
//    `enterObserverBody()`); `_keptByRunningBody(_:)` reads it and keeps what the reader made
//    with it, `_runAsRunningBody(owner:key:_:)` marks an initialiser's body.
//
// Naming: a function, property or initialiser of PromiseCore that CancellablePromiseKit's
// inlinable code calls has a leading underscore, as swift-nio's `_addCallback` does: such a call
// is compiled into the client's module, so changing it is not a local change. Types keep their
// names (as swift-nio's `CallbackList`).
//
// PromiseCore's other `package` declarations are not about cancelling; the other modules share
// them: making and settling a promise without a `Resolver` (`_makePending()`,
// `settle(rejected:)`, `resolve(_:)`, `drain(consuming:)`, `ReleasedHandlers`, `Handlers`;
// Promise.swift, Handlers.swift), hearing a settle (`addSettleListener(_:key:holdingStrongly:)`;
// SettleListener.swift), the steps of a chain (`_generalStep`, `_mirror()`, `HopRule`,
// `StepOutcome`; Steps.swift), locks and atomics (`Locked`, `LockWord` and
// `lockWordLock(of:)`…, for a lock word kept inline, `atomicAdd(_:_:)`, `UncheckedSendable`;
// Lock.swift), and `Guarantee(promise:)`, `scheduledDelaySeconds(_:)`, `neverScheduledWork`.
// What only PromiseCore uses is internal (`@usableFromInline` where inlinable code needs it).

// MARK: - A producer's task (rule 1)

/// A task attached to a promise by the code that produced it (a timer, a network request, a
/// child process…). `CancellablePromiseKit` uses it so that `cancellize()` stops the real work.
/// Attached with `Promise.attachCancellation(_:)`; its closure is read back with
/// `Promise._attachedCancellation`.
final class PromiseCancellation: PromiseAttachment, Sendable {
    let body: @Sendable () -> Void

    /// `body` stops the task and, if it can, rejects the promise with a cancellation error.
    init(_ body: @escaping @Sendable () -> Void) {
        self.body = body
    }

    func promiseDidSettle(key: UInt64) {}

    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

extension Promise {
    /// Attaches the task producing this promise, as the closure `cancel` that stops it (and, if
    /// it can, rejects the promise with a cancellation error), so a cancellable wrapper can
    /// cancel it; with `nil`, removes an attached task. Replaces a task attached before. Only
    /// while the promise is pending and not governed by anything other than a producer's task:
    /// a promise of a cancellable chain keeps its place in the chain (`CancellablePromiseKit`'s
    /// public `setCancellable(_:reject:)` may be called on any promise). Returns whether it
    /// changed anything.
    @discardableResult
    package final func attachCancellation(_ cancel: (@Sendable () -> Void)?) -> Bool {
        let cancellation = cancel.map(PromiseCancellation.init)
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

    /// The closure that stops the task attached by this promise's producer, while it is
    /// pending.
    @usableFromInline package final var _attachedCancellation: (@Sendable () -> Void)? {
        lock()
        let a = attachment
        unlock()
        return (a as? PromiseCancellation)?.body
    }
}

// MARK: - Attachments (rules 2 and 3)

/// An owner told once, outside every lock, that a promise it watches settled: the one way
/// library code hears a settle besides the ordinary handlers. It is either a promise's
/// attachment (a producer's task, a cancellable chain's storage; held strongly until the
/// promise settles) or a settle listener in its handler list
/// (`addSettleListener(_:key:holdingStrongly:)`; held weakly unless asked otherwise). One
/// owner may watch many promises: each passes back the `key` the owner gave it (an
/// attachment's key is 32 bits, a slot of a cancel storage's member table; a listener's 64, so
/// that a table can pack a slot and its generation).
@usableFromInline package protocol PromiseAttachment: AnyObject {
    /// Called once per promise (per listener added), synchronously on the thread that settled
    /// it, outside every lock; on the thread adding a listener if the promise had settled
    /// already.
    func promiseDidSettle(key: UInt64)

    /// Asked, outside every lock, just before a step body (not an observer's) starts, of the
    /// step's attachment: an error here means the body must not run and the step rejects with
    /// it instead (a cancelled chain). An owner that governs no step answers `nil`.
    func errorBeforeBody(key: UInt32) -> (any Error)?
}

/// Whether a step's body may start (see `Promise.bodyStart`).
@usableFromInline enum BodyStart {
    /// Pending, and its attachment (if any) allows it: the body starts, marked as this thread's
    /// running body for that attachment (`mark`, put back with `leaveRunningBody(_:)` when the
    /// body returns; `nil` for a step with no attachment, see RunningBody.swift).
    case start(RunningBodyMark?)
    /// Settled already (rejected by a cancellation): the body must not start.
    case settled
    /// The attachment forbids it: settle with this error instead.
    case reject(any Error)
}

extension Promise {
    /// Replaces the attachment while pending, with `new` knowing this promise by `key`. The
    /// previous attachment, if it is not a producer's task, becomes a settle listener (held
    /// weakly, see `addSettleListener(_:key:holdingStrongly:)`): it is still told, with its
    /// key, that the promise settled. Returns `false` (attaching nothing) once settled;
    /// `replaced`: a producer's task that was attached, for the caller to release once it holds
    /// no lock.
    @usableFromInline package final func replaceAttachment(
        with new: any PromiseAttachment, key: UInt32
    ) -> (attached: Bool, replaced: AnyObject?) {
        var listener: SettleListener?
        var releasedAfterUnlock: [AnyObject] = []
        lock()
        guard !isSettled else {
            unlock()
            return (false, nil)
        }
        let previous = attachment
        if let previous, !(previous is PromiseCancellation) {
            let made = SettleListener(owner: previous, key: UInt64(attachmentKey))
            appendListenerLocked(made, releasedAfterUnlock: &releasedAfterUnlock)
            listener = made
        }
        attachment = new
        attachmentKey = key
        unlock()
        withExtendedLifetime((listener, releasedAfterUnlock)) {}
        return (true, listener == nil ? previous : nil)
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
        guard let attached else { return .start(nil) }
        if let error = attached.errorBeforeBody(key: key) { return .reject(error) }
        return .start(enterRunningBody(owner: attached, key: key, step: self))
    }

    /// Marks an observer step's body as the running body of its attachment, read under the
    /// lock (`nil` if it has none any more): an observer's body runs also once its chain was
    /// cancelled, so it asks nothing, but it sees its step as every body does.
    @usableFromInline final func enterObserverBody() -> RunningBodyMark? {
        lock()
        let attached = attachment
        let key = attachmentKey
        unlock()
        guard let attached else { return nil }
        return enterRunningBody(owner: attached, key: key, step: self)
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
}

// MARK: - Rejecting the members of a chain (rule 4)

/// A promise that a cancellation can reject, whatever its value type (used by
/// `CancellablePromiseKit`'s cancel contexts).
@usableFromInline package protocol CancelTarget: AnyObject {
    /// Rejects the promise with `error` if it is pending; returns what settling released
    /// (nothing if it had settled already), for the caller to `drain` once it has unlocked.
    func settle(rejected error: any Error) -> ReleasedHandlers

    /// `true` while pending; takes the promise's lock.
    var isPending: Bool { get }

    /// The closure stopping the task attached by the promise's producer, while it is pending
    /// (see `Promise.attachCancellation(_:)`).
    var _attachedCancellation: (@Sendable () -> Void)? { get }

    /// Replaces the attachment while pending (see `Promise.replaceAttachment(with:key:)`).
    func replaceAttachment(with new: any PromiseAttachment, key: UInt32) -> (attached: Bool, replaced: AnyObject?)

    /// Sets the key the attachment knows this promise by, for a step made with its attachment
    /// and not yet connected (`_makeMap`…), which no other thread can see: its owner makes the
    /// step first, then reserves its key and lists it under the owner's one lock.
    func setAttachmentKeyUnshared(_ key: UInt32)
}

extension Promise: CancelTarget {
    @usableFromInline package final func setAttachmentKeyUnshared(_ key: UInt32) {
        attachmentKey = key
    }
}

// MARK: - Reporting the input that settled an aggregate (rule 5)

/// `race` over promises that reports the input that settled it: `onWin` runs once, with that
/// promise (one of `promises`), on the settling thread, after the result is settled and before
/// its handlers run. (For `CancellablePromiseKit`'s `autoCancel`.)
@inlinable
package func _race<T>(
    reportingWinner promises: [Promise<T>],
    fulfilledOnly: Bool,
    onWin: @escaping (AnyObject) -> Void
) -> Promise<T> {
    makeRace(promises, fulfilledOnly: fulfilledOnly, onWin: onWin)
}

/// `when(fulfilled:)` over promises that reports the input whose rejection settled it:
/// `onReject` runs once, with that promise (one of `promises`), on the settling thread, before
/// the result's handlers run. (For `CancellablePromiseKit`'s `autoCancel`.)
@inlinable
package func _when<T>(
    fulfilledReportingRejection promises: [Promise<T>], onReject: @escaping (AnyObject) -> Void
) -> Promise<[T]> {
    whenAllFulfilled(promises, onReject: onReject)
}

// MARK: - State a wrapper keeps beside a promise (rule 6)

extension Promise {
    /// Runs `body` with this promise's lock held, for state a wrapper keeps beside the promise
    /// (the context `CancellablePromiseKit` makes on first use for a promise made settled): the
    /// one lock PromiseCore lends (see Lock.swift). `body` takes no other lock, does not touch
    /// this promise, and releases nothing whose `deinit` could.
    package final func _withLockForWrapper<R>(_ body: () -> R) -> R {
        lock()
        defer { unlock() }
        return body()
    }
}
