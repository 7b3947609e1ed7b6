import PromiseCore

// In-flight coalescing: equal requests share one piece of work while it runs. Each key in flight
// has a `SharedWork` (the state machine of SharedWork.swift), and every entry lives in one
// dictionary behind the coalescer's one lock, so "join the work in flight, or start it anew" and
// "the last follower left: cancel the work and forget it" are decided atomically: a request
// either finds the entry while a follower still waits (and shares the work), or finds no entry
// (and starts anew). It never joins work that was cancelled.
//
// An entry leaves the dictionary in the same critical section in which its work ends (settled,
// or cancelled by its last follower), so the coalescer holds only work in flight. Each entry has
// an id; the tickets of its followers and its source's completion handler name it by key and
// id, so a report about ended work never touches a newer entry of the same key.

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
/// b.cancel()                    // the last follower left: the download is cancelled
/// ```
///
/// Each promise returned is a follower of the key's shared work, with the semantics of
/// ``SharedCancellablePromise/follower()``: a chain of its own that settles as the work does;
/// cancelling it (or abandoning it: no cancel handle of its chain left) withdraws only its
/// interest; the work is cancelled once the last follower left. The entry for a key leaves the
/// coalescer as soon as its work settles or is cancelled: the next request starts the work anew.
/// Nothing is cached beyond work in flight.
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
    private struct Entry {
        let id: UInt64
        var work: SharedWork<Value>
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var nextID: UInt64 = 0

        /// A request for `key`: joins the entry in flight, or makes one (returns its id, so
        /// that the caller starts the work).
        mutating func join(_ key: Key, _ resolver: Resolver<Value>) -> (ticket: EntryKey, starts: Bool) {
            if let index = entries.index(forKey: key) {
                let id = entries.values[index].id
                guard case .joined(let follower) = entries.values[index].work.join(resolver) else {
                    preconditionFailure("an entry in flight has ended")
                }
                return (EntryKey(id: id, follower: follower), false)
            }
            nextID &+= 1
            var work = SharedWork<Value>(phase: .starting)
            guard case .joined(let follower) = work.join(resolver) else { preconditionFailure("new work has ended") }
            entries[key] = Entry(id: nextID, work: work)
            return (EntryKey(id: nextID, follower: follower), true)
        }

        /// Runs `event` on the entry `id` of `key`, and removes the entry if its work ended.
        /// `nil` if that entry is gone.
        mutating func update<R>(_ key: Key, _ id: UInt64, _ event: (inout SharedWork<Value>) -> R) -> (R, Entry?)? {
            guard let index = entries.index(forKey: key), entries.values[index].id == id else { return nil }
            let result = event(&entries.values[index].work)
            guard entries.values[index].work.isEnded else { return (result, nil) }
            return (result, entries.remove(at: index).value)
        }
    }

    /// A follower's place: its entry's id and its key in the entry's table.
    struct EntryKey {
        let id: UInt64
        let follower: FollowerKey
    }

    // The lock word must remain the first stored property (see PromiseCore's Lock.swift).
    private var lockWord = makeLockWord()
    /// Guarded by the lock.
    @exclusivity(unchecked) private var state = State()

    /// Creates a coalescer with nothing in flight.
    public init() {}

    deinit {
        lockWordDestroy(lockWordPointer(self))
    }

    /// The address of the stored lock word as Swift sees it; used by tests to check the offset
    /// `lockWordPointer` assumes.
    func _storedLockWordAddress() -> UnsafeMutableRawPointer {
        withUnsafeMutablePointer(to: &lockWord) { UnsafeMutableRawPointer($0) }
    }

    @inline(__always) private func withLock<R>(_ body: (inout State) -> R) -> R {
        let pointer = lockWordPointer(self)
        lockWordLock(pointer)
        defer { lockWordUnlock(pointer) }
        return body(&state)
    }

    // MARK: Requests

    /// A follower of the work in flight for `key`; if there is none, calls `start` to start it
    /// and returns its first follower.
    ///
    /// `start` runs at most once per piece of work, synchronously on the calling thread,
    /// outside the coalescer's lock (requests for the same key made meanwhile, on other
    /// threads, join the work it is starting). It may return a ``CancellablePromise``, or a
    /// `Promise`/`Guarantee` made cancellable with `cancellize()`. If it throws, every follower
    /// of that work is rejected with the error. `start` must not wait on a request for its own
    /// key: that request would join the very work being started.
    ///
    /// The returned promise is a chain of its own: cancelling it rejects it with
    /// `CancellablePromiseError.cancelled` and withdraws its interest; if it was the last
    /// follower, the work is cancelled (synchronously on the cancelling thread, outside the
    /// lock, or as soon as `start` returns if it has not yet) and the key leaves the coalescer.
    /// A follower whose chain is abandoned leaves the same way and is rejected with the
    /// cancellation error. When the work settles, the key leaves the coalescer and every
    /// follower is settled with the result, synchronously on the settling thread.
    public func promise<R: Thenable>(for key: Key, start: () throws -> R) -> CancellablePromise<Value>
    where R.T == Value {
        var joined: EntryKey?
        var starts = false
        // The follower is made (and counted as waiting) before the work starts.
        let follower = CancellablePromise<Value> { resolver in
            let (entry, isNew) = withLock { $0.join(key, resolver) }
            joined = entry
            starts = isNew
            let ticket = CoalescedFollowerTicket(self, key, entry)
            return { ticket.leave(abandoned: false) }
        }
        guard starts, let id = joined?.id else { return follower }
        let source: CancellablePromise<Value>
        do {
            source = try start().cancellize()
        } catch {
            source = CancellablePromise(error: error)
        }
        guard withLock({ state in state.update(key, id) { $0.started(source) } }) != nil else {
            // Every follower left while `start` ran: the work was cancelled and forgotten.
            source.cancel()
            return follower
        }
        source.pipe { result in self.sourceSettled(key, id, result) }
        return follower
    }

    /// The number of keys with work in flight. Safe from any thread.
    public var inFlightCount: Int { withLock { $0.entries.count } }

    /// The number of followers waiting on the work in flight for `key` (0 if none). Safe from
    /// any thread.
    public func followerCount(for key: Key) -> Int {
        withLock { $0.entries[key]?.work.followerCount ?? 0 }
    }

    // MARK: Events

    /// A follower was cancelled (`abandoned` false) or abandoned.
    fileprivate func leave(_ key: Key, _ entry: EntryKey, abandoned: Bool) {
        let left = withLock { state in state.update(key, entry.id) { $0.leave(entry.follower) } }
        guard let (leaving, ended) = left else { return }
        leaving.run(abandoned: abandoned)
        _ = ended  // released outside the lock
    }

    private func sourceSettled(_ key: Key, _ id: UInt64, _ result: Result<Value>) {
        let settled = withLock { state in state.update(key, id) { $0.settle(result) } }
        guard let (settling, ended) = settled else { return }
        settling.run(result)
        _ = ended
    }
}

/// What a coalesced follower's cancel closure captures: it leaves the work when the closure is
/// called or released uncalled (see `SharedFollowerTicket`).
private final class CoalescedFollowerTicket<Key: Hashable & Sendable, Value>: @unchecked Sendable {
    // @unchecked: every property is immutable; the coalescer is thread-safe.
    private let coalescer: InFlightCoalescer<Key, Value>
    private let key: Key
    private let entry: InFlightCoalescer<Key, Value>.EntryKey

    init(_ coalescer: InFlightCoalescer<Key, Value>, _ key: Key, _ entry: InFlightCoalescer<Key, Value>.EntryKey) {
        self.coalescer = coalescer
        self.key = key
        self.entry = entry
    }

    func leave(abandoned: Bool) {
        coalescer.leave(key, entry, abandoned: abandoned)
    }

    deinit {
        coalescer.leave(key, entry, abandoned: true)
    }
}
