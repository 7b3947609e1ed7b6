import PromiseCore

// One source promise shared by followers, with reference-counted cancellation: each follower is
// a cancellable promise of its own chain, and the source is cancelled only when every follower
// was cancelled. The state machine is `SharedWork` (SharedWork.swift), hosted by a
// `SharedWorkHost` (SharedWorkHost.swift, which says what holds what). This handle holds the
// host, and each follower that can still be cancelled holds this handle; the handle's `deinit`
// tells the host that nothing can join any more.

/// A cancellable promise shared by several waiters, with reference-counted cancellation: it
/// hands out followers, and its source is cancelled only once every follower has been cancelled.
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
/// detail.cancel()    // every follower was cancelled: the download is cancelled
///
/// image.follower().done { show($0, in: thumbnail) }   // result not kept: still runs `show`
/// ```
///
/// What followers are and do:
/// - Each follower is a ``CancellablePromise`` of a chain of its own (not the source's chain).
///   It settles as the source does: with its value, or with its error.
/// - Cancelling a follower (or any promise of its chain, or its bag or token) rejects that
///   follower only, with `CancellablePromiseError.cancelled` as any cancellation does, and
///   withdraws its interest. When every follower has been cancelled, the source is cancelled,
///   as `source.cancel()` would: synchronously, on the thread whose cancel made the last
///   follower leave, outside every lock of this type.
/// - A follower is *abandoned* when no cancel handle of its chain is left (no promise of its
///   chain, its `cancelContext`, a finalizer, a bag or token holding it: see
///   <doc:CancellingAChain>). An abandoned follower is like any abandoned chain: it keeps its
///   interest and settles with the source, so fire-and-forget code such as
///   `shared.follower().done { … }` runs its `done`. Nothing can cancel it any more, so from then
///   on the source is never cancelled by the followers: cancelling the others withdraws only
///   their own interest, and the source's cancel closures are released uncalled (its work goes
///   on). The abandoned follower is held by the source's completion handler until the source
///   settles; if nothing can settle the source either, both are freed.
/// - A follower made after the source settled is settled at once with the same result; one
///   made after the work was cancelled (its last follower was cancelled) is rejected at once with
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
/// something else holds it). After that, followers keep the work alive without the handle: a
/// follower that can be cancelled holds the handle, an abandoned one is held with the source.
///
/// Give a shared promise a source that nothing else cancels: cancelling the last follower
/// waiting cancels the source's whole chain, and cancelling that chain from elsewhere rejects every
/// follower with the cancellation error.
///
/// Thread-safe: make, cancel and drop followers from any thread. Each follower costs O(1) to
/// add, to cancel and to abandon, in any order, and settling N followers costs O(N); the state
/// holds a slot per waiting follower at most, and after the source settled only the result.
public final class SharedCancellablePromise<T>: Sendable {
    // `T` need not be `Sendable`, as for `Promise`: the value crosses threads only through the
    // promises' own synchronisation.
    /// The shared work, also held by the source's completion handler and by the followers that
    /// can still be cancelled.
    let host: SharedWorkHost<T>

    /// Shares `source`: followers made with ``follower()`` settle as it does, and it is
    /// cancelled once every follower was cancelled (never while an abandoned follower waits).
    ///
    /// The shared promise takes over cancelling `source`: code that keeps `source` to cancel
    /// it cancels every follower with it. A settled `source` gives its result to every
    /// follower at once.
    public init(_ source: CancellablePromise<T>) {
        host = SharedWorkHost()
        host.start(source)
    }

    /// Calls `body` at once, on the calling thread, and shares the promise it returns, as
    /// `init(_ source:)` does. A `Promise` or `Guarantee` is made cancellable with
    /// `cancellize()`, which stops a task attached to that very promise (as `after(seconds:)`
    /// and PromiseFoundation's producers attach theirs) when every follower was cancelled. A
    /// promise *derived* from one with a task (`after(seconds: 1).map { … }`) carries no task,
    /// so cancelling the followers would not stop the timer: `cancellize()` the promise with
    /// the task first and chain on that, so the chain is cancellable down to it:
    ///
    /// ```swift
    /// SharedCancellablePromise { after(seconds: 1).cancellize().map { fetch() } }
    /// ```
    ///
    /// If `body` throws, every follower is rejected with that error.
    public convenience init<R: Thenable>(_ body: () throws -> R) where R.T == T {
        self.init(SharedWorkHost.makeSource(body))
    }

    deinit {
        // Nothing can join through this handle any more.
        host.release()
    }

    // MARK: Followers

    /// A new follower: a ``CancellablePromise`` of a chain of its own that settles as the source
    /// does, and whose cancellation withdraws only its own interest.
    ///
    /// Cancelling the follower rejects it with `CancellablePromiseError.cancelled` (its
    /// handlers run where their `on:` says, as for any cancellation); if it was the last
    /// follower waiting, and none was abandoned, the source is then cancelled, synchronously on
    /// the cancelling thread. A follower whose chain is abandoned (no cancel handle of it left)
    /// keeps waiting and settles with the source, as any abandoned chain does: so
    /// `shared.follower().done { … }` runs its `done`, and `shared.follower().asPromise()` waits
    /// for the source; from then on the source is not cancelled by the followers.
    ///
    /// Made after the source settled, the follower is settled at once with its result; made
    /// after the work was cancelled, it is rejected at once with
    /// `CancellablePromiseError.cancelled` — and its own `isCancelled` is `false`, as nobody
    /// cancelled it: its error's `isCancelled` (`true`) and this shared promise's ``isCancelled``
    /// say that the work was cancelled. Safe from any thread, including from inside the
    /// source's cancel closure or a follower's handler.
    public func follower() -> CancellablePromise<T> {
        // A follower that can still be cancelled keeps this handle alive.
        host.follower(keeping: self)
    }

    /// The number of followers waiting: made, and neither settled nor cancelled (abandoned
    /// followers wait). 0 before the first follower and once the work is over. Safe from any
    /// thread.
    public var followerCount: Int { host.withLock { $0.followerCount } }

    /// `true` once the shared work was cancelled: its last follower was cancelled, or the source
    /// was cancelled from elsewhere (it was rejected with a cancellation error). Safe from any
    /// thread.
    public var isCancelled: Bool {
        host.withLock { work in
            switch work.phase {
            case .cancelled: return true
            case .settled(let settled):
                guard case .rejected(let error) = settled.result else { return false }
                return error.isCancelled
            case .starting, .running, .committed: return false
            }
        }
    }

    /// `true` once the shared work is over: the source settled, or the last follower was
    /// cancelled and so was the source. Followers made from then on settle at once. Safe from
    /// any thread.
    public var isEnded: Bool { host.withLock { $0.isEnded } }
}

extension CancellablePromise {
    /// Shares this promise between followers with reference-counted cancellation (see
    /// ``SharedCancellablePromise``): each ``SharedCancellablePromise/follower()`` settles as
    /// this promise does, and this promise's chain is cancelled once every follower was
    /// cancelled (an abandoned follower keeps waiting, and the chain is then never cancelled by
    /// the followers).
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
