// Settle notices: how a structure that watches many promises (a `CancelBag`) learns that one of
// them settled, at the least cost per promise. A notice is one small object that is not
// generic: adding it to a promise of any value type allocates once and instantiates no generic
// metadata (a closure handler costs two allocations and a metadata lookup per promise when the
// watching code is not specialized for the promise's value type).

/// The owner of settle notices: told, by a key of its own, that a promise it watches settled.
package protocol SettleNoticeOwner: AnyObject, Sendable {
    /// Called once per notice, synchronously on the thread that settled the promise, outside
    /// every lock (from the loop that runs the promise's handlers), or on the thread adding
    /// the notice if the promise had settled already.
    func promiseDidSettle(noticeKey: UInt64)
}

/// A handler that tells its owner, held weakly, the key it was made with.
final class SettleNotice: PromiseHandler, Sendable {
    private weak let owner: (any SettleNoticeOwner)?
    private let key: UInt64

    init(owner: any SettleNoticeOwner, key: UInt64) {
        self.owner = owner
        self.key = key
    }

    func handle(settled source: AnyObject) -> ReleasedHandlers {
        owner?.promiseDidSettle(noticeKey: key)
        return .none
    }
}

extension Promise {
    /// Tells `owner` (held weakly: a notice keeps nothing alive) `key` once this promise
    /// settles, synchronously on the settling thread, outside every lock; at once, on this
    /// thread, if it has settled already. One allocation, whatever `T` is.
    package final func addSettleNotice(owner: any SettleNoticeOwner, key: UInt64) {
        addHandlerAndDrain(SettleNotice(owner: owner, key: key))
    }
}
