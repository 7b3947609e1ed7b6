import PromiseCore

// In-flight coalescing: equal requests share one piece of work while it runs. Each key in flight
// has a `SharedWork` (the state machine of SharedWork.swift), and every entry lives in one
// dictionary behind the coalescer's one lock, so "join the work in flight, or start it anew" and
// "the last follower was cancelled: cancel the work and forget it" are decided atomically: a
// request either finds the entry while a follower still waits (and shares the work), or finds no
// entry (and starts anew). It never joins work that was cancelled.
//
// An entry leaves the dictionary in the same critical section in which its work ends (settled,
// or cancelled by its last follower), so the coalescer holds only work in flight. An entry is a
// small object (`InFlightWork`), guarded by the coalescer's lock like the dictionary: the
// tickets of its followers and its source's completion handler hold it, so a follower leaving
// costs no hashing, and a report about ended work never touches a newer entry of the same key.
// An abandoned follower stays in its entry and settles with the work (see SharedWork.swift);
// the entry then lets go of the source, which its completion handler keeps waiting. If that
// source is freed unsettled (nothing can settle it any more), the handler's `deinit` ends the
// work and the key leaves, so a later request starts anew.

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
public final class InFlightCoalescer<Key: Hashable & Sendable, Value>: @unchecked Sendable {
    // @unchecked: `state` is only touched with the lock held; `Value` need not be `Sendable`,
    // as for `Promise`.
    fileprivate typealias Entry = InFlightWork<Key, Value>

    private struct State {
        var entries: [Key: Entry] = [:]

        /// A request for `key`: joins the entry in flight, or makes one (`starts`: the caller
        /// starts its work).
        mutating func join(
            _ key: Key, _ resolver: Resolver<Value>
        ) -> (entry: Entry, follower: FollowerKey, starts: Bool) {
            if let entry = entries[key] {
                guard case .joined(let follower) = entry.work.join(resolver) else {
                    preconditionFailure("InFlightCoalescer: an entry in flight has ended")
                }
                return (entry, follower, false)
            }
            let entry = Entry(key)
            guard case .joined(let follower) = entry.work.join(resolver) else {
                preconditionFailure("InFlightCoalescer: new work has ended")
            }
            entries[key] = entry
            return (entry, follower, true)
        }

        /// Runs `event` on `entry`'s work; if that ended the work, removes the entry (returned,
        /// to be released after unlocking).
        mutating func update<R>(_ entry: Entry, _ event: (inout SharedWork<Value>) -> R) -> (R, Entry?) {
            let wasEnded = entry.work.isEnded
            let result = event(&entry.work)
            guard !wasEnded, entry.work.isEnded else { return (result, nil) }
            return (result, entries.removeValue(forKey: entry.key))
        }
    }

    // The lock word must remain the first stored property: an inline lock word, by the rule of
    // PromiseCore's Lock.swift (through a `LockStorage`, this generic class's unspecialized calls
    // would look up type metadata on every request).
    private var lockWord = LockWord()
    /// Guarded by the lock.
    @exclusivity(unchecked) private var state = State()

    /// Creates a coalescer with nothing in flight.
    public init() {}

    deinit {
        lockWordDestroy(of: self)
    }

    @inline(__always) private func withLock<R>(_ body: (inout State) -> R) -> R {
        lockWordLock(of: self)
        defer { lockWordUnlock(of: self) }
        return body(&state)
    }

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
        var joined: (entry: Entry, follower: FollowerKey, starts: Bool)?
        // The follower is made (and counted as waiting) before the work starts.
        let follower = CancellablePromise<Value> { resolver in
            let joining = withLock { $0.join(key, resolver) }
            joined = joining
            let ticket = CoalescedFollowerTicket(self, joining.entry, joining.follower)
            return { ticket.cancelled() }
        }
        guard let joined, joined.starts else { return follower }
        let entry = joined.entry
        let source: CancellablePromise<Value>
        do {
            source = try start().cancellize()
        } catch {
            source = CancellablePromise(error: error)
        }
        if let cancelled = withLock({ state in state.update(entry) { $0.started(source) } }).0 {
            // Every follower was cancelled while `start` ran: the work was cancelled and forgotten.
            cancelled.cancel()
            return follower
        }
        // Running, or committed (a follower was abandoned while `start` ran): the entry does not
        // hold `source` then, and only its completion handler keeps it waiting.
        let watch = InFlightSourceWatch(self, entry)
        source.pipe { result in watch.settled(result) }
        return follower
    }

    /// The number of keys with work in flight. Safe from any thread.
    public var inFlightCount: Int { withLock { $0.entries.count } }

    /// The number of followers waiting on the work in flight for `key` (0 if none), abandoned
    /// ones included. Safe from any thread.
    public func followerCount(for key: Key) -> Int {
        withLock { $0.entries[key]?.work.followerCount ?? 0 }
    }

    // MARK: Events

    /// A follower was cancelled (its cancellation rejected it already).
    fileprivate func cancel(_ entry: Entry, _ follower: FollowerKey) {
        let (cancelling, removed) = withLock { state in state.update(entry) { $0.cancel(follower) } }
        cancelling.run()
        _ = removed  // released outside the lock
    }

    /// A follower was abandoned: it keeps waiting, and the entry lets go of the source
    /// (released here, after unlocking).
    fileprivate func abandon(_ entry: Entry, _ follower: FollowerKey) {
        let committing = withLock { _ in entry.work.abandon(follower) }
        _ = committing
    }

    fileprivate func sourceSettled(_ entry: Entry, _ result: Result<Value>) {
        let (settling, removed) = withLock { state in state.update(entry) { $0.settle(result) } }
        settling.run(result)
        _ = removed
    }

    /// The source was freed unsettled: its work ends and the key leaves, so that the next
    /// request starts anew instead of joining work nothing can settle. Does nothing once the
    /// work ended.
    fileprivate func sourceLost(_ entry: Entry) {
        let (followers, removed) = withLock { state in state.update(entry) { $0.lose() } }
        _ = (followers, removed)  // released outside the lock
    }
}

/// What the completion handler of a piece of work's source captures: it reports the result, and
/// from its `deinit` that the handler was released (after the source settled, or unsettled when
/// nothing can settle the source any more: only an abandoned follower waited on it).
private final class InFlightSourceWatch<Key: Hashable & Sendable, Value>: Sendable {
    private let coalescer: InFlightCoalescer<Key, Value>
    private let entry: InFlightWork<Key, Value>

    init(_ coalescer: InFlightCoalescer<Key, Value>, _ entry: InFlightWork<Key, Value>) {
        self.coalescer = coalescer
        self.entry = entry
    }

    func settled(_ result: Result<Value>) {
        coalescer.sourceSettled(entry, result)
    }

    deinit {
        coalescer.sourceLost(entry)
    }
}

/// The work in flight for one key: its state machine, guarded by the coalescer's lock (it has
/// no lock of its own; only the coalescer touches `work`, and only with its lock held).
private final class InFlightWork<Key: Hashable & Sendable, Value>: @unchecked Sendable {
    // @unchecked: `work` is guarded by the lock of the coalescer that made this entry.
    let key: Key
    @exclusivity(unchecked) var work = SharedWork<Value>(phase: .starting)

    init(_ key: Key) {
        self.key = key
    }
}

/// What a coalesced follower's cancel closure captures: it reports the follower cancelled when
/// the closure is called, and abandoned when it is released uncalled (see `SharedFollowerTicket`).
private final class CoalescedFollowerTicket<Key: Hashable & Sendable, Value>: @unchecked Sendable {
    // @unchecked: every property is immutable; the coalescer is thread-safe and guards the entry.
    private let coalescer: InFlightCoalescer<Key, Value>
    private let entry: InFlightWork<Key, Value>
    private let follower: FollowerKey

    init(_ coalescer: InFlightCoalescer<Key, Value>, _ entry: InFlightWork<Key, Value>, _ follower: FollowerKey) {
        self.coalescer = coalescer
        self.entry = entry
        self.follower = follower
    }

    func cancelled() {
        coalescer.cancel(entry, follower)
    }

    deinit {
        coalescer.abandon(entry, follower)
    }
}
