import PromiseCore

/// The fields of a storage guarded by its own lock (its root's or not), with that lock and the
/// handle count: the storage's header (see `CancelStorage`). The lock word must stay first.
@usableFromInline
struct OwnFields {
    var lock = LockWord()  // must stay the first stored property
    /// Live handles: `CancellablePromise`s and `CancelContext`s of this storage, and storages
    /// forwarding here that still have handles of their own. Starts with the handle that
    /// creates the storage. Updated only atomically (`atomicAdd`): a promise going away costs
    /// one atomic decrement, and the lock is taken only by the last handle.
    var handles = 1
    /// Where this storage's events are decided.
    var forwarding = CancelStorage.Forwarding.root
    /// The context `context()` handed out, while it lives: every promise of the chain made here
    /// returns the same one.
    weak var publicContext: CancelContext?
}
