import PromiseCore

// One source promise shared by followers, with reference-counted cancellation: each follower is
// a cancellable promise of its own chain, and the source is cancelled only when the last
// follower was cancelled or abandoned. The state machine is `SharedWork` (SharedWork.swift);
// this file is its storage: the lock, the events, and the actions run after unlocking.
//
// What holds what:
// - the handle (`SharedCancellablePromise`) holds the state, and through it the source (until
//   the source settles or is cancelled) and the followers' resolvers;
// - the source's completion handler holds the handle weakly: a handle nobody holds any more
//   (no variable, no follower) is freed, and so releases the source;
// - a follower's cancel closure holds a ticket, and the ticket holds the handle: a follower
//   that can still be cancelled keeps the work alive. The ticket's `deinit` reports the
//   follower abandoned when its chain's last cancel handle goes away (nothing can cancel it any
//   more).

/// A cancellable promise shared by several waiters, with reference-counted cancellation: it
/// hands out followers, and its source is cancelled only once no follower waits any more.
///
/// Share the work, then give each waiter a ``follower()`` of its own:
///
/// ```swift
/// let image = download(url).shared()       // a SharedCancellablePromise<Image>
///
/// let header = image.follower().done { show($0, in: headerView) }
/// let detail = image.follower().done { show($0, in: detailView) }
///
/// header.cancel()    // only `header` is rejected; the download goes on for `detail`
/// detail.cancel()    // the last follower left: the download is cancelled
/// ```
///
/// What followers are and do:
/// - Each follower is a ``CancellablePromise`` of a chain of its own (not the source's chain).
///   It settles as the source does: with its value, or with its error.
/// - Cancelling a follower (or any promise of its chain) rejects that follower only, with
///   `CancellablePromiseError.cancelled` as any cancellation does, and withdraws its interest.
///   When the last interested follower leaves, the source is cancelled, as `source.cancel()`
///   would: synchronously, on the thread whose cancel (or release) made the last follower
///   leave, outside every lock of this type.
/// - A follower is *abandoned* when no cancel handle of its chain is left (no promise of its
///   chain, its `cancelContext`, a finalizer, a bag or token holding it: see
///   <doc:CancellingAChain>). An abandoned follower can never be cancelled, so it withdraws its
///   interest as a cancelled one does, and is itself rejected with
///   `CancellablePromiseError.cancelled`, so that its `ensure`/`catch(policy: .allErrors)`
///   handlers still run. Keep a follower (or store it in a ``CancelBag``) for as long as you
///   want its result: `shared.follower().done { … }` with the result dropped withdraws at once.
/// - A follower made after the source settled is settled at once with the same result; one
///   made after the work was cancelled (its last follower left) is rejected at once with
///   `CancellablePromiseError.cancelled`. Shared work never restarts: use
///   ``InFlightCoalescer`` to start the work anew once it has ended.
/// - When the source settles, the followers waiting are settled one after the other,
///   synchronously on the thread that settled the source, in no set order; their handlers
///   then run on the queues their `on:` names.
///
/// The handle itself is *not* an interest. Before the first follower, the handle keeps the
/// source (running, not cancelled); if the handle is released before any follower joined,
/// nothing can cancel the source through it any more, so the source is released as any
/// abandoned chain is (its cancel closures are released uncalled and its work goes on, unless
/// something else holds it). After that, followers keep the work alive without the handle.
///
/// Give a shared promise a source that nothing else cancels: cancelling the last follower
/// cancels the source's whole chain, and cancelling that chain from elsewhere rejects every
/// follower with the cancellation error.
///
/// Thread-safe: make, cancel and drop followers from any thread. Each follower costs O(1) to
/// add and to remove, in any order; the state holds a slot per waiting follower at most, and
/// after the source settled only the result.
public final class SharedCancellablePromise<T>: @unchecked Sendable {
    // @unchecked: `work` is only reached through its storage's lock (`withLock`); `T` need not
    // be `Sendable`, as for `Promise` (the value crosses threads only through the promises' own
    // synchronisation).
    /// The shared work's state machine and its lock.
    private let work: LockStorage<SharedWork<T>>

    /// Shares `source`: followers made with ``follower()`` settle as it does, and it is
    /// cancelled once every follower was cancelled or abandoned.
    ///
    /// The shared promise takes over cancelling `source`: code that keeps `source` to cancel
    /// it cancels every follower with it. A settled `source` gives its result to every
    /// follower at once.
    public init(_ source: CancellablePromise<T>) {
        work = .create(value: SharedWork(phase: .running(source)))
        source.pipe { [weak self] result in self?.sourceSettled(result) }
    }

    /// Calls `body` at once, on the calling thread, and shares the promise it returns, as
    /// `init(_ source:)` does. A `Promise` or `Guarantee` is made cancellable with
    /// `cancellize()` (a task attached to it is stopped when the last follower leaves). If
    /// `body` throws, every follower is rejected with that error.
    public convenience init<R: Thenable>(_ body: () throws -> R) where R.T == T {
        let source: CancellablePromise<T>
        do {
            source = try body().cancellize()
        } catch {
            source = CancellablePromise(error: error)
        }
        self.init(source)
    }

    @inline(__always) private func withLock<R>(_ body: (inout SharedWork<T>) -> R) -> R {
        work.withLockedValue(body)
    }

    // MARK: Followers

    /// A new follower: a ``CancellablePromise`` of a chain of its own that settles as the source
    /// does, and whose cancellation withdraws only its own interest.
    ///
    /// Cancelling the follower rejects it with `CancellablePromiseError.cancelled` (its
    /// handlers run where their `on:` says, as for any cancellation); if it was the last
    /// follower waiting, the source is then cancelled, synchronously on the cancelling thread.
    /// A follower whose chain is abandoned (no cancel handle of it left) leaves the same way
    /// and is rejected with the cancellation error on the releasing thread.
    ///
    /// Made after the source settled, the follower is settled at once with its result; made
    /// after the work was cancelled, it is rejected at once with
    /// `CancellablePromiseError.cancelled`. Safe from any thread, including from inside the
    /// source's cancel closure or a follower's handler.
    public func follower() -> CancellablePromise<T> {
        CancellablePromise<T> { resolver in
            switch withLock({ $0.join(resolver) }) {
            case .joined(let key):
                let ticket = SharedFollowerTicket(self, key)
                return { ticket.leave(abandoned: false) }
            case .settled(let settled):
                resolver.resolve(settled.result)
            case .cancelled(let error):
                resolver.reject(error)
            }
            return {}
        }
    }

    /// The number of followers waiting: made, and neither settled, cancelled nor abandoned.
    /// 0 before the first follower and once the work is over. Safe from any thread.
    public var followerCount: Int { withLock { $0.followerCount } }

    /// `true` once the shared work was cancelled: its last follower left, or the source was
    /// cancelled from elsewhere (it was rejected with a cancellation error). Safe from any
    /// thread.
    public var isCancelled: Bool {
        withLock { work in
            switch work.phase {
            case .cancelled: return true
            case .settled(let settled):
                guard case .rejected(let error) = settled.result else { return false }
                return error.isCancelled
            case .starting, .running: return false
            }
        }
    }

    /// `true` once the shared work is over: the source settled, or the last follower left and
    /// it was cancelled. Followers made from then on settle at once. Safe from any thread.
    public var isEnded: Bool { withLock { $0.isEnded } }

    // MARK: Events

    /// A follower was cancelled (`abandoned` false: its cancellation rejected it already) or
    /// abandoned.
    fileprivate func leave(_ key: FollowerKey, abandoned: Bool) {
        let leaving = withLock { $0.leave(key) }
        leaving.run(abandoned: abandoned)
    }

    private func sourceSettled(_ result: Result<T>) {
        let settling = withLock { $0.settle(result) }
        settling.run(result)
    }
}

/// What a follower's cancel closure captures: it leaves the shared work when the closure is
/// called (the follower was cancelled) or released uncalled while the work goes on (the
/// follower's chain was abandoned); once the follower has left, the second report does nothing.
private final class SharedFollowerTicket<T>: @unchecked Sendable {
    // @unchecked: both properties are immutable; the shared promise is thread-safe.
    private let shared: SharedCancellablePromise<T>
    private let key: FollowerKey

    init(_ shared: SharedCancellablePromise<T>, _ key: FollowerKey) {
        self.shared = shared
        self.key = key
    }

    func leave(abandoned: Bool) {
        shared.leave(key, abandoned: abandoned)
    }

    deinit {
        shared.leave(key, abandoned: true)
    }
}

extension CancellablePromise {
    /// Shares this promise between followers with reference-counted cancellation (see
    /// ``SharedCancellablePromise``): each ``SharedCancellablePromise/follower()`` settles as
    /// this promise does, and this promise's chain is cancelled once every follower was
    /// cancelled or abandoned.
    ///
    /// ```swift
    /// let shared = download(url).shared()
    /// let first = shared.follower(), second = shared.follower()
    /// first.cancel()     // the download goes on for `second`
    /// ```
    public func shared() -> SharedCancellablePromise<T> {
        SharedCancellablePromise(self)
    }
}
