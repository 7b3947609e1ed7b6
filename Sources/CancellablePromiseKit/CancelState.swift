import PromiseCore

// MARK: - The state machine

/// The state of one storage. Every event is a method that decides under the lock of the
/// storage's root and records in `CancelActions` what must be done after the lock is released.
///
/// A storage's members live in its own `MemberTable` for ever (the storage's `members`, beside
/// its state: the two are guarded by different locks once a join absorbed the storage): a join
/// does not move them. An absorbed (forwarded) storage's table is guarded by its root's lock,
/// and the root lists the storages it absorbed (`absorbed`), so that cancelling or abandoning
/// the chain reaches every table.
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
    /// The storages a root absorbed (directly or through the storages it absorbed), while it is
    /// active: their tables list members of this chain too. Emptied when the chain is cancelled
    /// or abandoned (nothing lists then), which also ends the cycle with their `next`.
    private(set) var absorbed: [CancelStorage] = []
    /// How many times a table of `absorbed` was found empty (when its storage was absorbed, or
    /// after an event in it) since the last pass of `pruneAbsorbed`: a pass runs only when many
    /// may be empty, and a root whose absorbed storages are all busy is never walked.
    private var emptiedAbsorbed = 0

    var cancelledError: (any Error)? {
        if case .cancelled(let error, _) = phase { return error }
        return nil
    }

    var cancelSite: CancelSite? {
        if case .cancelled(_, let site) = phase { return site }
        return nil
    }

    var isActive: Bool {
        if case .active = phase { return true }
        return false
    }

    // MARK: Handles

    enum HandleRelease {
        /// Nothing more to do.
        case none
        /// The chain is abandoned now: the caller abandons the members of every table of the
        /// group (`groupAbandoned`).
        case abandoned([CancelStorage])
        /// An absorbed storage lost its last handle: it stops counting as a handle of this one.
        case release(CancelStorage)
    }

    /// The last handle of this storage went away (its count, kept atomically by the storage,
    /// reached zero; it never rises again). Decides whether the chain is abandoned now, or, for
    /// an absorbed storage, that it stops counting as a handle of the one it forwards to.
    mutating func lastHandleReleased() -> HandleRelease {
        switch phase {
        case .active:
            phase = .abandoned
            let group = absorbed
            absorbed = []
            return .abandoned(group)
        case .forwarded(let next, let holding):
            phase = .forwarded(next: next, holding: nil)
            return holding.map { .release($0) } ?? .none
        case .cancelled, .abandoned:
            return .none
        }
    }

    // MARK: Cancelling

    /// Marks the chain cancelled and hands back the absorbed storages, whose tables the caller
    /// cancels with this one's (`MemberTable.cancelMembers`). `nil` if it was cancelled, or
    /// abandoned, already.
    mutating func cancel(with error: any Error, at site: CancelSite) -> [CancelStorage]? {
        guard case .active = phase else {
            if case .forwarded = phase {
                preconditionFailure("CancelState.cancel: a forwarded storage lists nothing (lock the root)")
            }
            return nil
        }
        phase = .cancelled(error, site)
        let group = absorbed
        absorbed = []
        return group
    }

    // MARK: Joining

    enum JoinOutcome {
        /// Joined into an active root, which lists the absorbed storages now.
        case joined
        /// Joined into a cancelled root: the absorbed storages (an active root, and the storages
        /// it had absorbed) forward to it, and the caller cancels their tables with `error`.
        case cancelled(absorbed: [CancelStorage], error: any Error)
        /// Nothing to join: run the actions.
        case done
        /// One of the two was absorbed elsewhere meanwhile: find the roots again.
        case retry
    }

    /// Joins the chains of two roots, both locked by the caller. A cancelled root absorbs the
    /// other (it never changes again), which is cancelled with it; otherwise the root whose
    /// group has fewer storages is absorbed by the other (union by size, so that forwarding
    /// paths stay short) and forwards to it, counting as one of its handles while it has
    /// handles of its own. Members do not move: the absorbing root lists the absorbed storages.
    static func join(
        _ a: inout CancelState, b: inout CancelState, aStorage: CancelStorage, bStorage: CancelStorage,
        aIsEmpty: Bool, bIsEmpty: Bool
    ) -> JoinOutcome {
        if case .forwarded = a.phase { return .retry }
        if case .forwarded = b.phase { return .retry }
        if case .abandoned = a.phase { return .done }
        if case .abandoned = b.phase { return .done }
        let aCancelled = a.cancelledError != nil
        let bCancelled = b.cancelledError != nil
        if aCancelled, bCancelled { return .done }
        if bCancelled || (!aCancelled && a.absorbed.count <= b.absorbed.count) {
            return b.absorb(&a, absorbedStorage: aStorage, isEmpty: aIsEmpty, into: bStorage)
        } else {
            return a.absorb(&b, absorbedStorage: bStorage, isEmpty: bIsEmpty, into: aStorage)
        }
    }

    /// Absorbs `other` (an active root, `absorbedStorage`, whose table `isEmpty`) into this
    /// root, `storage`.
    private mutating func absorb(
        _ other: inout CancelState, absorbedStorage: CancelStorage, isEmpty: Bool, into storage: CancelStorage
    ) -> JoinOutcome {
        switch phase {
        case .active:
            // The caller counts the absorbed storage as a handle of this one.
            other.phase = .forwarded(next: storage, holding: storage)
            // Appended in place: a join allocates nothing but the list's amortised growth.
            absorbed.append(contentsOf: other.absorbed)
            absorbed.append(absorbedStorage)
            other.absorbed = []
            emptiedAbsorbed += other.emptiedAbsorbed + (isEmpty ? 1 : 0)
            other.emptiedAbsorbed = 0
            return .joined
        case .cancelled(let error, _):
            // Joining a cancelled chain cancels this one.
            other.phase = .forwarded(next: storage, holding: nil)
            var group = other.absorbed
            other.absorbed = []
            group.append(absorbedStorage)
            return .cancelled(absorbed: group, error: error)
        case .abandoned, .forwarded:
            preconditionFailure("CancelState.absorb: only an active or cancelled root absorbs")
        }
    }

    /// An absorbed storage's table was found empty after an event in it.
    mutating func noteAbsorbedTableEmptied() {
        emptiedAbsorbed += 1
    }

    /// Drops the absorbed storages for which `isEmpty` (no member: nothing to cancel or abandon
    /// there; one that lists a member again is listed again, see `relist`), once tables emptied
    /// at least half as many times as there are absorbed storages since the last pass: a pass
    /// costs O(1) amortised per join or event, and a long-lived root that joins many short-lived
    /// chains stays about as large as what is still live. Returns them, to release after the lock.
    mutating func pruneAbsorbed(where isEmpty: (CancelStorage) -> Bool) -> [CancelStorage] {
        guard emptiedAbsorbed >= 32, 2 * emptiedAbsorbed >= absorbed.count else { return [] }
        emptiedAbsorbed = 0
        var dropped: [CancelStorage] = []
        absorbed.removeAll { storage in
            guard isEmpty(storage) else { return false }
            dropped.append(storage)
            return true
        }
        return dropped
    }

    /// Lists again an absorbed storage that `pruneAbsorbed` dropped, as it makes a member.
    mutating func relist(_ storage: CancelStorage) {
        absorbed.append(storage)
    }

    /// Re-points a forwarded storage at the root found past `next` (path compression).
    mutating func compress(to root: CancelStorage) {
        if case .forwarded(let next, let holding) = phase, next !== root {
            phase = .forwarded(next: root, holding: holding)
        }
    }
}
