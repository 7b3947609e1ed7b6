import PromiseCore

// The one host of the `SharedWork` state machine (SharedWork.swift), used by
// `SharedCancellablePromise` (one host per shared promise) and by `InFlightCoalescer` (one host
// per key in flight). The host owns the lock and the machine, runs every event under the lock
// and its actions after unlocking, makes the source and watches it, and hands out followers.
//
// What holds what:
// - the source's completion handler holds a `SharedSourceWatch`, which holds the host, and the
//   host holds the followers' resolvers, abandoned ones included: a follower nobody can cancel
//   settles with the source for as long as the source can settle. If the source is freed
//   unsettled (nothing can settle it any more), the watch's `deinit` ends the work and the
//   resolvers are released;
// - the host holds the source (to cancel it) only while it can still be cancelled: until a
//   follower is abandoned, or the owner releases the host before any follower joined. Then it
//   lets go, so no cycle through the source's handler outlives the last cancel handle;
// - a follower's cancel closure holds a `SharedFollowerTicket`, which holds the host (and the
//   owner's handle, if the owner asks: a `SharedCancellablePromise`): a follower that can still
//   be cancelled keeps the host alive. The ticket's `deinit` reports the follower abandoned when
//   its chain's last cancel handle goes away;
// - the host holds its owner only through the `ended` closure the owner gives it (the
//   coalescer's captures the coalescer weakly): the owner is never kept alive by its work.

/// One piece of shared work: its source and its followers, behind one lock.
///
/// Kept alive by its owner (a ``SharedCancellablePromise`` handle, or an ``InFlightCoalescer``
/// entry while in flight), by the cancel closures of its followers (through their tickets) and
/// by its source's completion handler (through its watch) until the source settles or is freed.
///
/// Events run on the calling thread: the state changes under the lock, and what that decided
/// (settling followers, cancelling the source, calling `ended`, releasing objects) runs after
/// unlocking, on the same thread. `ended` runs once, when the work ends (the source settled, the
/// last follower was cancelled, or the source was freed unsettled), before the followers are
/// settled or the source cancelled.
final class SharedWorkHost<T>: SharedFollowerHost, @unchecked Sendable {
    // @unchecked: `machine` is only reached between `lockWordLock(of:)` and `lockWordUnlock(of:)`.

    /// What the owner is told, after unlocking, once the work ended.
    typealias Ended = @Sendable (SharedWorkHost<T>) -> Void

    /// The lock word of the machine, inline under PromiseCore's rule for inline lock words
    /// (Lock.swift): the event then runs inline here, with no second object, where
    /// `Locked.withLock` would be a call with a closure into generic code of another module.
    private var lockWord = LockWord()  // must stay the first stored property
    /// The state machine; guarded by the lock word (so no dynamic exclusivity check is needed).
    @exclusivity(unchecked) private var machine = SharedWork<T>(phase: .starting)
    /// Called (after unlocking) once the work ended; `nil` if the owner needs no notice.
    private let ended: Ended?

    /// A host whose source is still to be made (followers may join already); `ended` is
    /// called once the work ended.
    init(ended: Ended? = nil) {
        self.ended = ended
    }

    deinit {
        lockWordDestroy(of: self)
    }

    /// Runs `body` on the machine with the lock held, on the calling thread; `body` must not
    /// call user code or release objects.
    @inline(__always) func withLock<R>(_ body: (inout SharedWork<T>) -> R) -> R {
        lockWordLock(of: self)
        defer { lockWordUnlock(of: self) }
        return body(&machine)
    }

    // MARK: Starting

    /// Calls `body` (on the calling thread, outside any lock) and returns the promise it
    /// returns made cancellable, or a promise rejected with the error it throws.
    static func makeSource<R: Thenable>(_ body: () throws -> R) -> CancellablePromise<T> where R.T == T {
        do {
            return try body().cancellize()
        } catch {
            return CancellablePromise(error: error)
        }
    }

    /// The source was made: the work runs (and the source is watched), or, if every follower
    /// was cancelled while it was being made, the source is cancelled here.
    func start(_ source: CancellablePromise<T>) {
        if let cancelled = withLock({ $0.started(source) }) {
            cancelled.cancel()
            return
        }
        // Running, or committed (a follower was abandoned while the source was made): the host
        // does not hold `source` then, and only its completion handler keeps it waiting.
        let watch = SharedSourceWatch(self)
        source.pipe { result in watch.settled(result) }
    }

    // MARK: Followers

    /// Adds a follower with `resolver`, or says that the work is over (the caller settles it).
    func join(_ resolver: Resolver<T>) -> SharedWork<T>.Joining {
        withLock { $0.join(resolver) }
    }

    /// The cancel function of the follower `key` joined as: it reports the follower cancelled
    /// when called, abandoned when released uncalled. It keeps `keeper` alive as long as the
    /// follower can be cancelled.
    func cancelFunction(of key: FollowerKey, keeping keeper: (AnyObject & Sendable)? = nil) -> @Sendable () -> Void {
        let ticket = SharedFollowerTicket(self, key, keeping: keeper)
        return { ticket.cancelled() }
    }

    /// A new follower: a chain of its own that settles as the source does (at once if the work
    /// is over), and whose cancellation withdraws only its interest. It keeps `keeper` alive as
    /// long as it can be cancelled.
    func follower(keeping keeper: (AnyObject & Sendable)? = nil) -> CancellablePromise<T> {
        CancellablePromise<T> { resolver in
            switch join(resolver) {
            case .joined(let key):
                return cancelFunction(of: key, keeping: keeper)
            case .settled(let settled):
                resolver.resolve(settled.result)
            case .cancelled(let error):
                resolver.reject(error)
            }
            return {}
        }
    }

    // MARK: Events

    /// A follower was cancelled (its cancellation rejected it already).
    func cancel(_ key: FollowerKey) {
        let cancelling = withLock { $0.cancel(key) }
        if cancelling.ended { ended?(self) }
        cancelling.run()
    }

    /// A follower was abandoned: it keeps waiting, and the source is let go of (released here,
    /// after unlocking).
    func abandon(_ key: FollowerKey) {
        let committing = withLock { $0.abandon(key) }
        _ = committing
    }

    /// The owner lets go of the host: nothing can join any more. A source no follower waits on
    /// is let go of (released here, after unlocking); one that followers wait on stays
    /// cancellable by them.
    func release() {
        let committing = withLock { $0.release() }
        _ = committing
    }

    /// The source settled.
    func sourceSettled(_ result: Result<T>) {
        let settling = withLock { $0.settle(result) }
        if settling.ended { ended?(self) }
        settling.run(result)
    }

    /// The source was freed unsettled: the work ends, and the followers' resolvers are released
    /// here, after unlocking (nothing can settle them any more). Does nothing once the work ended.
    func sourceLost() {
        let lost = withLock { work -> (followers: [AnyObject], ended: Bool) in
            let wasEnded = work.isEnded
            return (work.lose(), !wasEnded)
        }
        if lost.ended { ended?(self) }
        _ = lost.followers
    }
}
