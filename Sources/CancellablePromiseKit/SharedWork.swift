import PromiseCore

// The state machine of shared work, used by `SharedCancellablePromise` (behind its own lock) and
// by `InFlightCoalescer` (one per key in flight, behind the coalescer's lock).
//
// Shared work is one source promise and the followers waiting on it. The state holds each
// follower's *resolver* (to settle it as the source settles), never the follower's cancel
// handle: a follower whose every handle was dropped is abandoned (no `CancellablePromise`, context, bag or
// link of its chain is left), and a small
// ticket captured by its cancel closure reports that from its `deinit`. A follower leaves the
// table when it is cancelled or abandoned; the last one to leave cancels the source.
//
// Every event is a mutating method that decides under the owner's lock and returns what to do
// after unlocking: resolvers to settle, the source to cancel, objects to release (a released
// promise or resolver may run user code in deinits, so nothing is dropped under the lock).

/// A follower's place in a ``FollowerTable``: its slot and that slot's generation when it was
/// added (a slot reused by a later follower has another generation).
struct FollowerKey: Equatable, Sendable {
    let slot: Int32
    let generation: UInt32
}

/// The resolvers of the followers of one piece of shared work: a slot table with a free list,
/// so adding and removing cost O(1) in any order, and the table never holds more slots than
/// followers were waiting at once.
///
/// Not generic: it holds each resolver as an object (`SharedWork` casts it back), so the table's
/// code is compiled once, specialized, rather than run through generic array code for every
/// value type.
struct FollowerTable {
    private struct Slot {
        /// The follower's resolver; `nil` while the slot is free.
        var resolver: AnyObject?
        var generation: UInt32
        /// The next free slot while this one is free; -1 ends the list.
        var nextFree: Int32
    }

    private var slots: [Slot] = []
    private var firstFree: Int32 = -1
    /// The number of followers in the table.
    private(set) var count = 0

    mutating func add(_ resolver: AnyObject) -> FollowerKey {
        count += 1
        if firstFree >= 0 {
            let index = Int(firstFree)
            firstFree = slots[index].nextFree
            slots[index].resolver = resolver
            return FollowerKey(slot: Int32(index), generation: slots[index].generation)
        }
        precondition(slots.count < Int(Int32.max), "SharedCancellablePromise: too many followers at once")
        slots.append(Slot(resolver: resolver, generation: 0, nextFree: -1))
        return FollowerKey(slot: Int32(slots.count - 1), generation: 0)
    }

    /// Removes the follower `key` names and returns its resolver; `nil` if it left already.
    mutating func remove(_ key: FollowerKey) -> AnyObject? {
        let index = Int(key.slot)
        guard index < slots.count, slots[index].generation == key.generation,
            let resolver = slots[index].resolver
        else { return nil }
        slots[index].resolver = nil
        slots[index].generation &+= 1
        slots[index].nextFree = firstFree
        firstFree = Int32(index)
        count -= 1
        return resolver
    }

    /// Empties the table and returns every follower's resolver, in slot order.
    mutating func removeAll() -> [AnyObject] {
        var resolvers: [AnyObject] = []
        resolvers.reserveCapacity(count)
        for slot in slots {
            if let resolver = slot.resolver { resolvers.append(resolver) }
        }
        slots = []
        firstFree = -1
        count = 0
        return resolvers
    }
}

/// The result of settled shared work, kept for followers made later. A box, so that `SharedWork`
/// has the same layout whatever `T` is: the state machine runs unspecialized in the library, and
/// a layout that depends on `T` would make every access to it go through runtime metadata.
final class SettledResult<T>: @unchecked Sendable {
    // @unchecked: immutable; `T` need not be `Sendable`, as for `Promise`.
    let result: Result<T>

    init(_ result: Result<T>) {
        self.result = result
    }
}

/// One piece of shared work: its phase and its followers. Mutated only under its owner's lock.
struct SharedWork<T> {
    enum Phase {
        /// The source is being made (a coalescer's `start` runs, outside the lock); followers
        /// may join already.
        case starting
        /// The source runs; with no follower yet only before the first one joined (the last
        /// follower to leave ends the work).
        case running(CancellablePromise<T>)
        /// The source settled; followers made from now on get this result at once.
        case settled(SettledResult<T>)
        /// The last follower left and the source was cancelled; followers made from now on are
        /// rejected with this error.
        case cancelled(any Error)
    }

    /// What a follower that asks to join gets.
    enum Joining {
        case joined(FollowerKey)
        case settled(SettledResult<T>)
        case cancelled(any Error)
    }

    /// What to do, after unlocking, once a follower left.
    struct Leaving {
        /// The follower's resolver: rejected if it was abandoned (nobody can cancel it any more),
        /// else only released (its cancellation rejected it already).
        var follower: Resolver<T>?
        /// The source, to cancel: the follower was the last one.
        var sourceToCancel: CancellablePromise<T>?
        /// Whether the work ended (the follower was the last one).
        var ended = false
    }

    /// What to do, after unlocking, once the source settled: settle `followers` (each a
    /// `Resolver<T>`) with the result and release the source.
    struct Settling {
        var followers: [AnyObject] = []
        var source: CancellablePromise<T>?
    }

    private(set) var phase: Phase
    /// The resolvers (`Resolver<T>`) of the followers waiting.
    private var followers = FollowerTable()

    init(phase: Phase) {
        self.phase = phase
    }

    /// The number of followers waiting (neither cancelled nor abandoned).
    var followerCount: Int { followers.count }

    /// A follower asks to join, with the resolver that settles it.
    mutating func join(_ resolver: Resolver<T>) -> Joining {
        switch phase {
        case .starting, .running: return .joined(followers.add(resolver))
        case .settled(let result): return .settled(result)
        case .cancelled(let error): return .cancelled(error)
        }
    }

    /// The follower `key` was cancelled or abandoned: it leaves; if it was the last one, the
    /// work is cancelled (the source, if there is one yet: else `started` cancels it).
    mutating func leave(_ key: FollowerKey) -> Leaving {
        var leaving = Leaving()
        switch phase {
        case .starting, .running:
            guard let resolver = followers.remove(key) else { return leaving }
            leaving.follower = unsafeDowncast(resolver, to: Resolver<T>.self)
            guard followers.count == 0 else { return leaving }
            if case .running(let source) = phase { leaving.sourceToCancel = source }
            phase = .cancelled(CancellablePromiseError.cancelled)
            leaving.ended = true
        case .settled, .cancelled:
            break
        }
        return leaving
    }

    /// The source was made: returns it if the work was cancelled meanwhile (to cancel it).
    mutating func started(_ source: CancellablePromise<T>) -> CancellablePromise<T>? {
        guard case .starting = phase else { return source }
        phase = .running(source)
        return nil
    }

    /// The source settled with `result`: every follower is to be settled with it.
    mutating func settle(_ result: Result<T>) -> Settling {
        var settling = Settling()
        switch phase {
        case .running(let source):
            settling.source = source
            settling.followers = followers.removeAll()
            phase = .settled(SettledResult(result))
        case .starting:
            settling.followers = followers.removeAll()
            phase = .settled(SettledResult(result))
        case .settled, .cancelled:
            break
        }
        return settling
    }

    /// Whether the work is over: settled, or cancelled by its last follower.
    var isEnded: Bool {
        switch phase {
        case .starting, .running: return false
        case .settled, .cancelled: return true
        }
    }
}

extension SharedWork.Leaving {
    /// Runs the actions: rejects an abandoned follower, then cancels the source.
    func run(abandoned: Bool) {
        if abandoned { follower?.reject(CancellablePromiseError.cancelled) }
        sourceToCancel?.cancel()
    }
}

extension SharedWork.Settling {
    /// Settles the followers with `result` (the source is released with this value).
    func run(_ result: Result<T>) {
        for follower in followers { unsafeDowncast(follower, to: Resolver<T>.self).resolve(result) }
    }
}
