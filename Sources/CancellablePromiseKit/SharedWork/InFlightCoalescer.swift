import PromiseCore

// In-flight coalescing: equal requests share one piece of work while it runs. Each key in flight
// has a `SharedWorkHost` (SharedWorkHost.swift, the host of the `SharedWork` state machine), and
// the hosts live in one dictionary behind the coalescer's lock. A request joins the host of its
// key with the coalescer's lock held (the host's lock is taken inside it: always in that order),
// so "join the work in flight, or start it anew" is decided atomically: a host whose work ended
// (settled, or cancelled by its last follower) refuses the follower, and the request then
// replaces it with a new host and starts the work anew. It never joins work that was cancelled.
//
// A host tells the coalescer that its work ended (through the closure it was made with, which
// holds the coalescer weakly) after unlocking its own lock and before it settles its followers
// or cancels its source, and the coalescer forgets the key if it still maps to that host: the
// coalescer holds only work in flight. A follower leaving takes only its host's lock and costs
// no hashing, and a report about ended work never touches a newer host of the same key. An
// abandoned follower stays in its host and settles with the work; if the source is then freed
// unsettled (nothing can settle it any more), its work ends too and the key leaves, so a later
// request starts anew.

/// Shares work in flight between equal requests: while work for a key runs, a request for the
/// same key gets a new follower of that work instead of starting it again.
///
/// ```swift
/// let images = InFlightCoalescer<URL, Image>()
///
/// func image(at url: URL) -> CancellablePromise<Image> {
///     images.promise(for: url) { download(url) }     // one download per URL in flight
/// }
///
/// let a = image(at: url)        // starts the download
/// let b = image(at: url)        // joins it
/// a.cancel()                    // the download goes on for `b`
/// b.cancel()                    // every follower was cancelled: the download is cancelled
///
/// images.promise(for: url) { download(url) }.done { show($0) }   // fire and forget: `show` runs
/// ```
///
/// Each promise returned is a follower of the key's shared work, with the semantics of
/// ``SharedCancellablePromise/follower()``: a chain of its own that settles as the work does;
/// cancelling it withdraws only its interest; the work is cancelled once every follower was
/// cancelled. A follower that is abandoned (no cancel handle of its chain left, as with a
/// fire-and-forget `done`) keeps its interest and settles with the work, so from then on that
/// work is not cancelled by its followers. The entry for a key leaves the coalescer as soon as
/// its work settles or is cancelled, or once nothing can settle it any more (its source was
/// freed unsettled): the next request starts the work anew. Nothing is cached beyond work in
/// flight.
///
/// A request racing the cancellation of a key's last follower, on another thread, either joins
/// the work (the cancellation then is not the last one, and the work goes on) or starts it
/// anew: it never waits on cancelled work.
///
/// The coalescer itself is not an interest: releasing it neither cancels nor ends the work in
/// flight, which goes on for its followers. Thread-safe: request, cancel and drop followers
/// from any thread. Joining and leaving cost O(1) amortised, in any order; a long-lived
/// coalescer holds only the keys in flight and their waiting followers.
public final class InFlightCoalescer<Key: Hashable & Sendable, Value>: Sendable {
    // `Value` need not be `Sendable`, as for `Promise`: a value crosses threads only through
    // the promises' own synchronisation.
    private typealias Host = SharedWorkHost<Value>

    /// The work in flight, by key (a host whose work ended may stay until it reports that).
    private let entries = Locked<[Key: Host]>([:])

    /// Creates a coalescer with nothing in flight.
    public init() {}

    // MARK: Requests

    /// A follower of the work in flight for `key`; if there is none, calls `start` to start it
    /// and returns its first follower.
    ///
    /// `start` runs at most once per piece of work, synchronously on the calling thread,
    /// outside the coalescer's lock (requests for the same key made meanwhile, on other
    /// threads, join the work it is starting). It may return a ``CancellablePromise``, or a
    /// `Promise`/`Guarantee` made cancellable with `cancellize()`, which stops a task attached
    /// to that very promise (a promise derived from it with `map` carries none: return
    /// `after(seconds: 1).cancellize().map { … }`, as <doc:SharingWork> shows). If it throws,
    /// every follower of that work is rejected with the error. `start` must not wait on a
    /// request for its own key: that request would join the very work being started.
    ///
    /// The returned promise is a chain of its own: cancelling it rejects it with
    /// `CancellablePromiseError.cancelled` and withdraws its interest; if it was the last
    /// follower, and none was abandoned, the work is cancelled (synchronously on the
    /// cancelling thread, outside the lock, or as soon as `start` returns if it has not yet)
    /// and the key leaves the coalescer. A follower whose chain is abandoned keeps waiting, as
    /// any abandoned chain does: `promise(for: key) { … }.done { … }` with the result not kept
    /// runs its `done`, and the work is then not cancelled by its followers. When the work
    /// settles, the key leaves the coalescer and every follower is settled with the result,
    /// synchronously on the settling thread.
    public func promise<R: Thenable>(for key: Key, start: () throws -> R) -> CancellablePromise<Value>
    where R.T == Value {
        var starting: Host?
        // The follower is made (and counted as waiting) before the work starts.
        let follower = CancellablePromise<Value> { resolver in
            let joined = entries.withLock { entries in self.join(&entries, key, resolver) }
            if joined.starts { starting = joined.host }
            _ = joined.replaced  // released outside the lock
            return joined.host.cancelFunction(of: joined.follower)
        }
        starting?.start(Host.makeSource(start))
        return follower
    }

    /// A request for `key`, with the coalescer's lock held: joins the host in flight, or makes
    /// a new one (`starts`: the caller starts its work), replacing a host whose work ended
    /// (`replaced`, to be released after unlocking).
    private func join(
        _ entries: inout [Key: Host], _ key: Key, _ resolver: Resolver<Value>
    ) -> (host: Host, follower: FollowerKey, starts: Bool, replaced: Host?) {
        if let host = entries[key], case .joined(let follower) = host.join(resolver) {
            return (host, follower, false, nil)
        }
        let host = Host { [weak self] host in self?.forget(key, host) }
        guard case .joined(let follower) = host.join(resolver) else {
            preconditionFailure("InFlightCoalescer: new work has ended")
        }
        return (host, follower, true, entries.updateValue(host, forKey: key))
    }

    /// The work of `host` ended: the key leaves, unless it maps to newer work already.
    private func forget(_ key: Key, _ host: Host) {
        let removed = entries.withLock { entries -> Host? in
            guard entries[key] === host else { return nil }
            return entries.removeValue(forKey: key)
        }
        _ = removed  // released outside the lock
    }

    /// The number of keys with work in flight. Safe from any thread.
    public var inFlightCount: Int { entries.withLock { $0.count } }

    /// The number of followers waiting on the work in flight for `key` (0 if none), abandoned
    /// ones included. Safe from any thread.
    public func followerCount(for key: Key) -> Int {
        entries.withLock { $0[key]?.withLock { $0.followerCount } ?? 0 }
    }
}
