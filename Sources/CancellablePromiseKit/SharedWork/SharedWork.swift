import PromiseCore

// The state machine of shared work. Its one host, `SharedWorkHost` (SharedWorkHost.swift),
// keeps it behind a lock, for `SharedCancellablePromise` (one per shared promise) and for
// `InFlightCoalescer` (one per key in flight).
//
// Shared work is one source promise and the followers waiting on it. The state holds each
// follower's *resolver* (to settle it as the source settles), never the follower's cancel
// handle. A follower leaves the table when it is cancelled, and the last one to leave by
// cancellation cancels the source. A follower whose every cancel handle was dropped is
// *abandoned* (a small ticket captured by its cancel closure reports that from its `deinit`): it
// stays in the table and settles with the source, as any abandoned chain settles with its work.
// Since nothing can cancel it, the source can no longer be cancelled through this work: the
// state lets go of the source's cancel handle (`committed`), and only the source's completion
// handler, which holds the host, keeps the abandoned followers' resolvers, until it settles.
//
// Every event is a mutating method that decides under the host's lock and returns what to do
// after unlocking: resolvers to settle, the source to cancel, objects to release (a released
// promise or resolver may run user code in deinits, so nothing is dropped under the lock).

/// A follower's place in the followers' table.
typealias FollowerKey = SlotKey

/// The resolvers of the followers of one piece of shared work (see `SlotTable`). It holds
/// each resolver as an object (`SharedWork` casts it back), so the table's code is compiled
/// once, specialized, rather than run through generic array code for every value type.
typealias FollowerTable = SlotTable<AnyObject?>

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
///
/// A value: copying one and sending it an event changes only the copy (the tests try
/// transitions that way).
struct SharedWork<T> {
    enum Phase {
        /// The source is being made (a coalescer's `start` runs, outside the lock); followers
        /// may join already.
        case starting
        /// The source runs, and the last follower to be cancelled cancels it. With no follower
        /// only before the first one joined.
        case running(CancellablePromise<T>)
        /// The source runs (or is being made) and is never cancelled through this work: an
        /// abandoned follower waits on it, or no follower can join any more (the handle went
        /// away before the first one did). The state no longer holds the source; followers
        /// still join, and cancelled ones still leave.
        case committed
        /// The source settled; followers made from now on get this result at once.
        case settled(SettledResult<T>)
        /// The last follower was cancelled and so was the source; followers made from now on are
        /// rejected with this error.
        case cancelled(any Error)
    }

    /// What a follower that asks to join gets.
    enum Joining {
        case joined(FollowerKey)
        case settled(SettledResult<T>)
        case cancelled(any Error)
    }

    /// What to do, after unlocking, once a follower was cancelled.
    struct Cancelling {
        /// The follower's resolver, to release (its cancellation rejected it already).
        var follower: Resolver<T>?
        /// The source, to cancel: the follower was the last one, and none was abandoned.
        var sourceToCancel: CancellablePromise<T>?
        /// Whether the work ended (the source is to be cancelled, or was still being made).
        var ended = false
    }

    /// What to do, after unlocking, once the source can no longer be cancelled through this
    /// work: release it (its chain is then abandoned, unless something else holds it).
    struct Committing {
        var sourceToRelease: CancellablePromise<T>?
    }

    /// What to do, after unlocking, once the source settled: settle `followers` (each a
    /// `Resolver<T>`) with the result and release the source.
    struct Settling {
        var followers: [AnyObject] = []
        var source: CancellablePromise<T>?
        /// Whether the work ended now (it had not already).
        var ended = false
    }

    private(set) var phase: Phase
    /// The resolvers (`Resolver<T>`) of the followers waiting, abandoned ones included.
    private var followers = FollowerTable()

    init(phase: Phase) {
        self.phase = phase
    }

    /// The number of followers waiting: neither settled nor cancelled (abandoned ones wait).
    var followerCount: Int { followers.count }

    /// A follower asks to join, with the resolver that settles it.
    mutating func join(_ resolver: Resolver<T>) -> Joining {
        switch phase {
        case .starting, .running, .committed: return .joined(followers.add(resolver))
        case .settled(let result): return .settled(result)
        case .cancelled(let error): return .cancelled(error)
        }
    }

    /// The follower `key` was cancelled: it leaves; if it was the last one and none was
    /// abandoned, the work is cancelled (the source, if there is one yet: else `started`
    /// cancels it). Nothing happens if it left already.
    mutating func cancel(_ key: FollowerKey) -> Cancelling {
        var cancelling = Cancelling()
        switch phase {
        case .starting, .running, .committed:
            guard let resolver = followers.remove(key) else { return cancelling }
            cancelling.follower = unsafeDowncast(resolver, to: Resolver<T>.self)
            guard followers.count == 0 else { return cancelling }
            switch phase {
            case .running(let source): cancelling.sourceToCancel = source
            case .starting: break
            default: return cancelling  // committed: an abandoned follower still waits
            }
            phase = .cancelled(CancellablePromiseError.cancelled)
            cancelling.ended = true
        case .settled, .cancelled:
            break
        }
        return cancelling
    }

    /// The follower `key` was abandoned (nothing can cancel it any more): it keeps waiting, and
    /// the source is committed. Nothing happens if it left already (it was cancelled, or the
    /// work is over).
    mutating func abandon(_ key: FollowerKey) -> Committing {
        guard followers.contains(key) else { return Committing() }
        return commit()
    }

    /// The owner let go of the work: nothing can join any more. With no follower waiting,
    /// nothing can cancel the source any more, so it is committed; followers waiting keep it
    /// as it is (each can still be cancelled, and the last one cancels the source, or was
    /// abandoned and committed it already).
    mutating func release() -> Committing {
        guard followers.count == 0 else { return Committing() }
        return commit()
    }

    private mutating func commit() -> Committing {
        switch phase {
        case .starting:
            phase = .committed
            return Committing()
        case .running(let source):
            phase = .committed
            return Committing(sourceToRelease: source)
        case .committed, .settled, .cancelled:
            return Committing()
        }
    }

    /// The source was made: returns it if the work was cancelled meanwhile (to cancel it).
    mutating func started(_ source: CancellablePromise<T>) -> CancellablePromise<T>? {
        switch phase {
        case .starting:
            phase = .running(source)
            return nil
        case .committed:
            return nil  // kept by nothing here: the caller releases it once it waits on it
        case .running, .settled, .cancelled:
            return source
        }
    }

    /// The source settled with `result`: every follower is to be settled with it.
    mutating func settle(_ result: Result<T>) -> Settling {
        var settling = Settling()
        switch phase {
        case .running(let source):
            settling.source = source
            settling.followers = followers.removeAll()
            phase = .settled(SettledResult(result))
            settling.ended = true
        case .starting, .committed:
            settling.followers = followers.removeAll()
            phase = .settled(SettledResult(result))
            settling.ended = true
        case .settled, .cancelled:
            break
        }
        return settling
    }

    /// The source was freed unsettled (nothing could settle it any more): the work ends as if
    /// cancelled, and the followers' resolvers are returned, to be released after unlocking
    /// (their followers can never settle either). Nothing happens once the work ended.
    mutating func lose() -> [AnyObject] {
        switch phase {
        case .starting, .running, .committed:
            phase = .cancelled(CancellablePromiseError.cancelled)
            return followers.removeAll()
        case .settled, .cancelled:
            return []
        }
    }

    /// Whether the work is over: settled, or cancelled by its last follower.
    var isEnded: Bool {
        switch phase {
        case .starting, .running, .committed: return false
        case .settled, .cancelled: return true
        }
    }
}

extension SharedWork.Cancelling {
    /// Runs the actions: cancels the source (the follower's resolver is released with this
    /// value).
    func run() {
        sourceToCancel?.cancel()
    }
}

extension SharedWork.Settling {
    /// Settles the followers with `result` (the source is released with this value).
    func run(_ result: Result<T>) {
        for follower in followers { unsafeDowncast(follower, to: Resolver<T>.self).resolve(result) }
    }
}
