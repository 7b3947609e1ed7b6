import PromiseCore

// MARK: - The state machine

/// The state of one storage. Every event is a method that decides under the storage's lock and
/// returns what must be done after the lock is released.
struct CancelState {
    enum Phase {
        /// Listing the chain's pending promises.
        case active
        /// Cancelled with this error, from this call site; lists nothing, never changes again.
        case cancelled(any Error, CancelSite)
        /// No handle left: lists nothing, cancels nothing, never changes again.
        case abandoned
        /// Absorbed by a join: everything happens in `next`'s root. `holding` is the storage
        /// this one counts as a handle of (until its own handles are gone), if any.
        case forwarded(next: CancelStorage, holding: CancelStorage?)
    }

    private(set) var phase = Phase.active
    private(set) var members = MemberList()
    /// Live handles: `CancelContext`s of this storage, and storages forwarding here that still
    /// have handles of their own. Starts with the handle that creates the storage.
    private var handles = 1

    var cancelledError: (any Error)? {
        if case .cancelled(let error, _) = phase { return error }
        return nil
    }

    var cancelSite: CancelSite? {
        if case .cancelled(_, let site) = phase { return site }
        return nil
    }

    var memberCount: Int { members.count }
    var memberCapacity: Int { members.capacity }

    // MARK: Handles

    /// A handle of this storage went away. Decides whether the chain is abandoned now, or, for an
    /// absorbed storage, whether it stops counting as a handle of the one it forwards to.
    mutating func releaseHandle(into actions: inout CancelActions) -> CancelStorage? {
        precondition(handles > 0, "CancelContext: a handle was released twice")
        handles -= 1
        guard handles == 0 else { return nil }
        switch phase {
        case .active:
            phase = .abandoned
            let taken = members
            members = MemberList()
            taken.forEach { actions.abandon($0) }
            return nil
        case .forwarded(let next, let holding):
            phase = .forwarded(next: next, holding: nil)
            return holding
        case .cancelled, .abandoned:
            return nil
        }
    }

    // MARK: Members

    /// Lists `entry`, whose promise is `target`.
    mutating func list(_ entry: CancelEntry, target: any CancelTarget, into actions: inout CancelActions) {
        switch phase {
        case .active:
            if entry.index == CancelEntry.done {
                // Settled between being attached and being listed.
                actions.release(entry.takeAll())
                return
            }
            entry.target = target
            members.append(entry)
        case .cancelled(let error, _):
            entry.target = target
            if entry.isObserver || entry.upstream != nil {
                // A step added to a cancelled chain: its upstream promise passes the
                // cancellation on to it, or, if it fulfilled, the step's body finds the chain
                // cancelled before starting (`PromiseAttachment.errorBeforeBody`) and rejects.
                // A body that already ran has its returned chain cancelled.
                entry.index = CancelEntry.done
                if let link = entry.link {
                    entry.link = nil
                    actions.follow(link, error: error)
                }
                actions.release(entry.takeAll())
            } else {
                actions.reject(entry, with: error)
            }
        case .abandoned:
            entry.index = CancelEntry.done
            actions.release(entry.takeAll())
        case .forwarded:
            preconditionFailure("CancelState.list: a forwarded storage lists nothing (lock the root)")
        }
    }

    /// Lists `entry` if that is all there is to do (an active chain, the entry not settled yet):
    /// the common case of `list`, decided without recording actions. `false` leaves everything
    /// as it was, for `list`.
    mutating func listIfActive(_ entry: CancelEntry, target: any CancelTarget) -> Bool {
        guard case .active = phase, entry.index != CancelEntry.done else { return false }
        entry.target = target
        members.append(entry)
        return true
    }

    /// The entry's promise settled: unlist it. Returns what it held, to release after the lock,
    /// and the earlier attachment of its promise, to notify after the lock.
    mutating func unlist(_ entry: CancelEntry) -> (CancelEntry.Released, (any PromiseAttachment)?) {
        if entry.index >= 0 { members.remove(entry) }
        entry.index = CancelEntry.done
        let earlier = entry.earlier
        entry.earlier = nil
        return (entry.takeAll(), earlier)
    }

    /// Records a link of a step whose body returned a pending cancellable promise.
    mutating func link(_ entry: CancelEntry, _ link: CancelLink, into actions: inout CancelActions) {
        guard entry.index == CancelEntry.done else {
            if case .abandoned = phase { return actions.release(link) }
            entry.link = CancelLink.adding(link, to: entry.link)
            return
        }
        // The step was cancelled while its body ran: the body's result is discarded, and its
        // work is cancelled with it.
        if entry.cancelledAlone {
            actions.follow(link, error: boxedCancellation)
        } else if let error = cancelledError {
            actions.follow(link, error: error)
        } else {
            actions.release(link)
        }
    }

    // MARK: Cancelling

    /// Cancels the chain: rejects every pending promise that does not wait behind an observer,
    /// takes the cancel closures and links to run after the lock. `false` if it was cancelled,
    /// or abandoned, already.
    mutating func cancel(with error: any Error, at site: CancelSite, into actions: inout CancelActions) -> Bool {
        guard case .active = phase else {
            if case .forwarded = phase {
                preconditionFailure("CancelState.cancel: a forwarded storage lists nothing (lock the root)")
            }
            return false
        }
        phase = .cancelled(error, site)
        let taken = members
        members = MemberList()
        Self.cancelMembers(taken, with: error, into: &actions)
        return true
    }

    /// Settles the members of a chain being cancelled with `error` (still carrying their
    /// indexes): rejects every pending promise that does not wait behind an observer; the others
    /// settle when the observer ahead of them passes the cancellation on.
    private static func cancelMembers(_ taken: MemberList, with error: any Error, into actions: inout CancelActions) {
        actions.reserveRejections(taken.count)
        taken.forEach { markWaitingBehindObserver($0) }
        taken.forEach { entry in
            if entry.waitsBehindObserver == true {
                // Settles when the observer ahead of it passes the cancellation on.
                entry.index = CancelEntry.done
                actions.release(entry.takeAll())
            } else {
                actions.reject(entry, with: error)
            }
        }
    }

    /// Cancels one listed entry, not its chain (an `autoCancel` loser that shares its chain with
    /// the winner). `false` if it is not listed.
    mutating func cancelAlone(_ entry: CancelEntry, with error: any Error, into actions: inout CancelActions) -> Bool {
        guard case .active = phase, entry.index >= 0 else { return false }
        members.remove(entry)
        entry.cancelledAlone = true
        actions.reject(entry, with: error)
        return true
    }

    /// Whether `entry` is an observer or follows one that is still listed (in this cancellation
    /// pass); computed for a whole chain in linear time by remembering the answer per entry.
    private static func markWaitingBehindObserver(_ entry: CancelEntry) {
        // Common case without allocating: the entry is decided by itself or by its upstream,
        // already marked (members are listed in creation order, upstream first).
        if entry.waitsBehindObserver != nil { return }
        if entry.isObserver {
            entry.waitsBehindObserver = true
            return
        }
        guard let upstream = entry.upstream, upstream.index >= 0 else {
            entry.waitsBehindObserver = false
            return
        }
        if let known = upstream.waitsBehindObserver {
            entry.waitsBehindObserver = known
            return
        }
        var path: [CancelEntry] = []
        var current = entry
        var answer: Bool
        while true {
            if let known = current.waitsBehindObserver {
                answer = known
                break
            }
            if current.isObserver {
                answer = true
                current.waitsBehindObserver = true
                break
            }
            guard let upstream = current.upstream, upstream.index >= 0 else {
                answer = false
                current.waitsBehindObserver = false
                break
            }
            path.append(current)
            current = upstream
        }
        for waiting in path { waiting.waitsBehindObserver = answer }
    }

    // MARK: Joining

    enum JoinOutcome {
        /// Joined, or nothing to join: run the actions.
        case done
        /// One of the two was absorbed elsewhere meanwhile: find the roots again.
        case retry
    }

    /// Joins the chains of two roots, both locked by the caller. A cancelled root absorbs the
    /// other (it never changes again), which is cancelled with it; otherwise the root with fewer
    /// members is absorbed by the other and forwards to it, counting as one of its handles while
    /// it has handles of its own.
    static func join(
        _ a: inout CancelState, b: inout CancelState, aStorage: CancelStorage, bStorage: CancelStorage,
        into actions: inout CancelActions
    ) -> JoinOutcome {
        if case .forwarded = a.phase { return .retry }
        if case .forwarded = b.phase { return .retry }
        if case .abandoned = a.phase { return .done }
        if case .abandoned = b.phase { return .done }
        let aCancelled = a.cancelledError != nil
        let bCancelled = b.cancelledError != nil
        if aCancelled, bCancelled { return .done }
        if bCancelled || (!aCancelled && a.members.count <= b.members.count) {
            b.absorb(&a, into: bStorage, actions: &actions)
        } else {
            a.absorb(&b, into: aStorage, actions: &actions)
        }
        return .done
    }

    /// Absorbs `absorbed` (an active root) into this root, `storage`: its members are listed
    /// here, or cancelled (as by `cancel`) if this chain was cancelled.
    private mutating func absorb(
        _ absorbed: inout CancelState, into storage: CancelStorage, actions: inout CancelActions
    ) {
        let holding: CancelStorage?
        if case .active = phase {
            handles += 1
            holding = storage
        } else {
            holding = nil
        }
        absorbed.phase = .forwarded(next: storage, holding: holding)
        let moved = absorbed.members
        absorbed.members = MemberList()
        switch phase {
        case .active:
            moved.forEach { members.append($0) }
        case .cancelled(let error, _):
            // Joining a cancelled chain cancels this one, in chain order as `cancel` does.
            Self.cancelMembers(moved, with: error, into: &actions)
        case .abandoned, .forwarded:
            preconditionFailure("CancelState.absorb: only an active or cancelled root absorbs")
        }
    }

    /// Re-points a forwarded storage at the root found past `next` (path compression).
    mutating func compress(to root: CancelStorage) {
        if case .forwarded(let next, let holding) = phase, next !== root {
            phase = .forwarded(next: root, holding: holding)
        }
    }
}

// MARK: - Member list

/// The pending members of a storage. The first is stored inline (index 0), so a chain with one
/// pending promise allocates no array; the others are at `index - 1` in `rest`. Guarded by the
/// storage's lock, like the members' `index`. The array is released or shrunk as members leave,
/// so a long-lived chain holds storage for what is pending, not for what it ever listed.
struct MemberList {
    private var first: CancelEntry?
    private var rest: [CancelEntry] = []

    init() {}

    var count: Int { (first == nil ? 0 : 1) + rest.count }

    /// Slots allocated beyond the inline one (for tests).
    var capacity: Int { rest.capacity }

    /// Lists `entry`, recording its index in it.
    mutating func append(_ entry: CancelEntry) {
        if first == nil {
            entry.index = 0
            first = entry
        } else {
            entry.index = rest.count + 1
            rest.append(entry)
        }
    }

    /// Unlists `entry`; the last member takes its place.
    mutating func remove(_ entry: CancelEntry) {
        let index = entry.index
        if index == 0 {
            if let first, first === entry { self.first = nil }
            return
        }
        let position = index - 1
        guard position >= 0, position < rest.count, rest[position] === entry else { return }
        let last = rest.removeLast()
        if position < rest.count {
            rest[position] = last
            last.index = index
        }
        if rest.isEmpty {
            rest = []
        } else if rest.capacity > 64, rest.count < rest.capacity / 4 {
            // A new buffer of twice the count (`Array(rest)` would share the old one and keep
            // its capacity): the next shrink comes after half the members left again, so
            // shrinking costs O(1) amortised per removal.
            var smaller: [CancelEntry] = []
            smaller.reserveCapacity(2 * rest.count)
            smaller.append(contentsOf: rest)
            rest = smaller
        }
    }

    func forEach(_ body: (CancelEntry) -> Void) {
        if let first { body(first) }
        for entry in rest { body(entry) }
    }
}
