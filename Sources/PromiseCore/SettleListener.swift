// Settle listeners: how an owner that is not a promise's attachment (a `CancelBag` watching the
// promises of the chains it holds, the condition of a `when(_:while:)`, a chain's storage whose
// member was adopted by another chain) hears that the promise settled. It is the attachment's
// call, `PromiseAttachment.promiseDidSettle(key:)`, made from the handler list: one small
// object that is not generic, so adding it to a promise of any value type allocates once and
// instantiates no generic metadata (a closure handler costs two allocations and a metadata
// lookup per promise when the watching code is not specialized for the promise's value type).
//
// A listener holds its owner weakly: it keeps nothing alive, and an owner that is gone has
// nothing to hear. A long-lived promise drops the listeners whose owner is gone when its
// handler list would otherwise grow (see `Handlers.append(listener:releasedAfterUnlock:)`), so
// it stores about as many listeners as there are live owners. An owner that is a part of the
// object watching (a bag's table of entries, which the bag empties as it goes) may be held
// strongly instead, until the promise settles: that object is not kept alive, and no weak
// reference is paid for (its first one gives the owner a side table: an allocation, and about
// 400 instructions over the owner's life).

/// A handler that tells its owner, held weakly or strongly, the key it was made with.
final class SettleListener: PromiseHandler {
    private weak let weakOwner: (any PromiseAttachment)?
    private let heldOwner: (any PromiseAttachment)?
    private let key: UInt64

    init(owner: any PromiseAttachment, key: UInt64, holdingStrongly: Bool = false) {
        if holdingStrongly {
            heldOwner = owner
            weakOwner = nil
        } else {
            heldOwner = nil
            weakOwner = owner
        }
        self.key = key
    }

    /// The owner, if it is still alive. Under a promise's lock, the caller releases the
    /// reference returned only once that lock is unlocked: it may be the last.
    var liveOwner: (any PromiseAttachment)? { heldOwner ?? weakOwner }

    func handle(settled source: AnyObject) -> ReleasedHandlers {
        liveOwner?.promiseDidSettle(key: key)
        return .none
    }
}

extension Promise {
    /// Tells `owner` (held weakly: a listener keeps nothing alive) `key` once this promise
    /// settles, synchronously on the settling thread, outside every lock; at once, on this
    /// thread, if it has settled already. One allocation, whatever `T` is. `holdingStrongly`:
    /// holds `owner` until the promise settles, for an owner that is a part of what watches
    /// (see above).
    package final func addSettleListener(_ owner: any PromiseAttachment, key: UInt64, holdingStrongly: Bool = false) {
        let listener = SettleListener(owner: owner, key: key, holdingStrongly: holdingStrongly)
        var releasedAfterUnlock: [AnyObject] = []
        lock()
        guard !isSettled else {
            unlock()
            _ = listener.handle(settled: self)
            return
        }
        appendListenerLocked(listener, releasedAfterUnlock: &releasedAfterUnlock)
        unlock()
        withExtendedLifetime(releasedAfterUnlock) {}
    }
}
