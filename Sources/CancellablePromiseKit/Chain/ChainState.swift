import PromiseCore

// The state machine of a cancellable chain. Each event takes the chain's state (kept by the
// root's `CancelStorage`, under its lock) and returns what it decided: an answer (`reserve`'s
// key, `runningBodyToken`'s token, `join`'s `Joined`) or a `ChainOutcome`, what is left to do
// after the lock, which the storage runs in one way (`CancelStorage.perform`). The state is
// private: tests send events and assert what they return (ChainStateTests and the files beside
// it). One decision is taken outside: when the last handle goes (an atomic count,
// CancelHandle.swift); what follows from it is `handlesGone`.
//
// What the machine decides, by event:
// - `reserve`, `list`, `attach`: a new member (a step, or a promise adopted by the chain) is
//   listed while the chain is active; in a cancelled chain it is rejected at once, unless
//   something upstream passes the cancellation on to it (a step, an observer); in an abandoned
//   chain it holds nothing.
// - `memberSettled`: a member that settled leaves the chain; what it held is released.
// - `link`: a step waiting on another chain links it while it waits; once it has left, what it
//   returned is cancelled if the chain was cancelled (or it was cancelled alone while its body
//   ran), released otherwise.
// - `cancel`, `cancelIfListed`, `cancelLoser`, `linkedCancel`: cancelling rejects every listed
//   member but those waiting behind an observer, in chain order (`cancelMember`, the one place
//   that learns whether a member's promise was still pending); an `autoCancel` loser in the
//   winner's chain is cancelled alone (the machine compares the roots); a link followed never
//   reaches the chain it must not (an `autoCancel` winner's).
// - `handlesGone`: with no handle left, the root's chain is abandoned: its members release
//   their cancel closures and links uncalled; an absorbed storage stops counting as a handle of
//   the storage that absorbed it.
// - `join`: two chains become one, the smaller group absorbed by the larger; joining a
//   cancelled chain cancels the other.
// - `runningBodyToken`: a body that runs reads its member's token (`CancellationToken.current`),
//   made on first read and kept in the member's slot; the token is cancelled with the chain (or
//   with the member, cancelled alone) while the member is pending, completed "not cancelled"
//   when it leaves on its own or the chain is abandoned.
//
// A storage absorbed by a join keeps its members' slots (their promises know their storage and
// slot), but its table moves into the root's machine (`group`, found by the storage's identity):
// the machine holds the whole state of the chain and refers to no storage, so that its tests
// build machines alone. Generations are counted once for every table of the chain
// (`nextGeneration`), so that a table dropped while empty and made again never repeats a key.

/// The state of a chain, kept by its root's storage and guarded by that storage's lock: the
/// phase, the root's own table and the tables of the storages it absorbed (`group`), with the
/// tokens their running bodies read. A storage a join absorbed keeps a state in phase `absorbed`
/// that nothing reads: its table moved into its root's.
@usableFromInline
struct ChainState {
    private enum Phase {
        /// Listing the chain's pending promises.
        case active
        /// Cancelled with this error, from this call site; lists nothing, never changes again.
        case cancelled(any Error, CancelSite)
        /// No handle left: lists nothing, cancels nothing, never changes again.
        case abandoned
        /// Absorbed by a join: its table moved into the root's machine; this state is no longer
        /// used.
        case absorbed
    }

    private var phase = Phase.active
    /// The root's own members.
    private var table = MemberTable()
    /// What this root keeps of the storages it absorbed; `nil` until its first join, so that a
    /// chain that never joins makes and drops no collection for it.
    private var group: Group?
    /// The generation of the next slot reserved in any table of the chain.
    private var nextGeneration: UInt32 = 0

    init() {}

    // MARK: Queries

    /// The phase, by name: what a test or a debug description may read of the state.
    enum PhaseName: Equatable {
        case active, cancelled, abandoned, absorbed
    }

    var phaseName: PhaseName {
        switch phase {
        case .active: return .active
        case .cancelled: return .cancelled
        case .abandoned: return .abandoned
        case .absorbed: return .absorbed
        }
    }

    var cancelledError: (any Error)? {
        if case .cancelled(let error, _) = phase { return error }
        return nil
    }

    /// What an observer (`ensure`, `tap`, `ensureThen`, `catch`, `finally`) passes on once its body
    /// has run: the chain's cancellation if the chain was cancelled (the steps after it settle
    /// with it, in chain order), otherwise nothing (its source's result goes on). The same for
    /// every observer of the chain: no member is asked about.
    var errorPassedOnByObservers: (any Error)? {
        cancelledError
    }

    var cancelSite: CancelSite? {
        if case .cancelled(_, let site) = phase { return site }
        return nil
    }

    /// The listed members of the chain, in every table of its group.
    var listedCount: Int { table.listedCount + (group?.tables.listedCount ?? 0) }

    /// The storages this root absorbed that it still keeps a table for.
    var absorbedCount: Int { group?.tables.count ?? 0 }

    /// Slots allocated beyond the inline one in `home`'s table (for tests of its bound).
    func capacity(of home: MemberHome) -> Int {
        if home.isRoot { return table.capacity }
        return group?.tables.readTable(home.storage) { $0.capacity } ?? 0
    }

    /// The running bodies' tokens the chain keeps, in every table (for tests of their bound).
    var bodyTokenCount: Int {
        var count = table.tokensInUse
        group?.tables.forEachTable { count += $0.tokensInUse }
        return count
    }

    /// Whether `storage` belongs to this chain, whose root is `root`: the root itself, or an
    /// absorbed storage that still holds a handle or lists members. (An idle entry may outlive
    /// its storage, whose identity a new storage of another chain can then take.)
    func contains(_ storage: ObjectIdentifier, root: ObjectIdentifier) -> Bool {
        storage == root || group?.tables.isLive(storage) == true
    }

    /// Whether this root's chain is active (a cancelled or abandoned one never changes again);
    /// stops with `misuse` if this is an absorbed storage's state, which decides nothing.
    private func isActiveRoot(_ misuse: StaticString) -> Bool {
        switch phase {
        case .active: return true
        case .cancelled, .abandoned: return false
        case .absorbed: preconditionFailure("\(misuse)")
        }
    }

    // MARK: Tables

    /// Reads the table `home` names (an empty one if an absorbed storage has none now).
    private func readTable<R>(_ home: MemberHome, _ body: (MemberTable) -> R) -> R {
        if home.isRoot { return body(table) }
        return group?.tables.readTable(home.storage, body) ?? body(MemberTable())
    }

    /// Runs `body` on the table `home` names.
    @inline(__always)
    private mutating func withTable<R: ~Copyable>(_ home: MemberHome, _ body: (inout MemberTable) -> R) -> R {
        if home.isRoot { return body(&table) }
        return withAbsorbedTable(home.storage, body)
    }

    /// `withTable` for an absorbed storage's table (out of line: the root's own table is the
    /// common case, on every chain link).
    @inline(never)
    private mutating func withAbsorbedTable<R: ~Copyable>(
        _ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R
    ) -> R {
        if group == nil { group = Group() }
        return group!.tables.withTable(storage, body)
    }

    /// Runs `body` on the table `home` names if it has one (a member's table has one while the
    /// member is in it); `nil` otherwise. Events about a member that may have left use it, so
    /// that a stale key makes no table.
    @inline(__always)
    private mutating func withExistingTable<R>(_ home: MemberHome, _ body: (inout MemberTable) -> R) -> R? {
        if home.isRoot { return body(&table) }
        return group?.tables.withExistingTable(home.storage, body)
    }

    /// Counts an absorbed table found empty after an event in it (see `Group.emptied`).
    @inline(__always)
    private mutating func noteIfEmptied(_ home: MemberHome) {
        if !home.isRoot { noteIfAbsorbedTableEmptied(home.storage) }
    }

    @inline(never)
    private mutating func noteIfAbsorbedTableEmptied(_ storage: ObjectIdentifier) {
        if group?.tables.readTable(storage, { $0.inUse == 0 }) == true { group!.emptied += 1 }
    }

    // MARK: New members

    /// Reserves a slot for a new member in `home`'s table. The table of an absorbed storage that
    /// was dropped while empty is made again.
    mutating func reserve(
        in home: MemberHome, upstream: SlotKey?, isObserver: Bool, cancelBody: (() -> Void)?
    ) -> SlotKey {
        let generation = nextGeneration
        nextGeneration &+= 1
        return withTable(home) {
            $0.reserve(generation: generation, upstream: upstream, isObserver: isObserver, cancelBody: cancelBody)
        }
    }

    /// Lists the member reserved as `key`, whose promise is `target`. In an active chain it is
    /// listed (`none`: nothing to do after the lock). In a cancelled chain a step or an observer
    /// is left for its upstream promise to pass the cancellation on (or, if that fulfilled, for
    /// its body to find the chain cancelled before starting), with what it links to cancelled;
    /// a first member is rejected at once. In an abandoned chain it holds nothing.
    @inline(__always)
    mutating func list(_ key: SlotKey, target: any CancelTarget, in home: MemberHome) -> ChainOutcome {
        guard case .active = phase else { return listOutsideActive(key, target: target, in: home) }
        withTable(home) { $0.listReserved(Int(key.slot), target: target) }
        return .none
    }

    /// `list` in a chain that is not active (out of line: listing is on every chain link, and
    /// almost always in an active chain).
    @inline(never)
    private mutating func listOutsideActive(
        _ key: SlotKey, target: any CancelTarget, in home: MemberHome
    ) -> ChainOutcome {
        let index = Int(key.slot)
        switch phase {
        case .active:
            preconditionFailure("ChainState.listOutsideActive: the chain is active")
        case .cancelled(let error, _):
            var effects = ChainEffects()
            withTable(home) { table in
                let waitsUpstream = table.isObserver(index) || table.upstream(index) != nil
                if !waitsUpstream { table.setTarget(index, target) }
                ChainState.cancelMember(
                    index, in: &table, home: home.storage, with: error, rejecting: !waitsUpstream, into: &effects)
            }
            noteIfEmptied(home)
            return ChainOutcome(effects)
        case .abandoned:
            let taken = withTable(home) { table -> MemberContents in
                let taken = table.take(index)
                table.detach(index)
                return taken
            }
            noteIfEmptied(home)
            return taken.isEmpty ? .none : .release(taken)
        case .absorbed:
            preconditionFailure("ChainState.list: an absorbed storage lists nothing (lock the root)")
        }
    }

    /// A promise was reserved `key` and then offered this chain's storage as its attachment:
    /// `attached` is false if it had settled first (nothing to cancel: the slot is freed, and
    /// its cancel closure released uncalled); otherwise it is listed. (An attachment it had,
    /// other than a producer's task, which its cancel closure stands for, is told by the
    /// promise itself when it settles.) The token the body of its initialiser read, if any,
    /// becomes the member's (see `runningBodyToken`).
    mutating func attach(
        _ key: SlotKey, target: any CancelTarget, attached: Bool, in home: MemberHome
    ) -> ChainOutcome {
        let index = Int(key.slot)
        let hasFirstBodyToken = readTable(home) { $0.hasBodyTokens }
        if attached, !hasFirstBodyToken { return list(key, target: target, in: home) }
        var effects = ChainEffects()
        if hasFirstBodyToken {
            // Only a new storage's first member can have one: nothing else knows the storage
            // while that body runs.
            let isActive = phaseName == .active
            let isCancelled = phaseName == .cancelled
            withTable(home) { table in
                guard let token = table.takeFirstBodyToken() else { return }
                if isActive, attached {
                    table.setBodyToken(index, token)
                } else {
                    effects.complete(token, cancelled: isCancelled)
                }
            }
        }
        guard attached else {
            let taken = withTable(home) { table -> MemberContents in
                let taken = table.take(index)
                table.free(index)
                return taken
            }
            noteIfEmptied(home)
            if effects.isEmpty { return taken.isEmpty ? .none : .release(taken) }
            effects.release(taken)
            return ChainOutcome(effects)
        }
        switch list(key, target: target, in: home) {
        case .none: break
        case .release(let contents): effects.release(contents)
        case .run(let listed): effects.adopt(listed)
        }
        return ChainOutcome(effects)
    }

    // MARK: Members leaving

    /// The promise of slot `index` in `home`'s table settled: the slot is freed (unless it is no
    /// longer in use: a settle reported twice changes nothing), and what it held is released
    /// after the lock, with the token its running body read, if any, completed "not cancelled".
    mutating func memberSettled(_ index: Int, in home: MemberHome) -> ChainOutcome {
        let outcome = withTable(home) { table -> ChainOutcome in
            guard index < table.slotCount else { return .none }
            switch table.state(index) {
            case .listed, .detached:
                // With its running body's token, if any: completed "not cancelled".
                let taken = table.take(index)
                table.free(index)
                return .release(taken)
            case .reserved:
                preconditionFailure("ChainState.memberSettled: a member reports only once listed")
            case .free:
                return .none
            }
        }
        noteIfEmptied(home)
        return outcome
    }

    /// Records `link` for the member `key` (a step whose body returned a pending cancellable
    /// promise, or a wrapper's returned promise). While the member waits, cancelling it
    /// cancels the link (`none`). A member that left the chain discards its body's result: its
    /// work is cancelled if the chain was cancelled, or if the member was cancelled alone while
    /// its body ran (an `autoCancel` loser); otherwise it is released. An abandoned chain keeps
    /// no link. `whileBodyRuns`: the link comes from the member's own step body, which is
    /// running. A link into this very chain (`reaching` one of its storages) links nothing: the
    /// chain cancels that promise anyway, and a link to its own handle would keep the chain
    /// cancellable for ever; it is released. (A settled promise links nothing: its chain is not
    /// asked for a link, see `_ChainMember.link(chainOf:_:whileBodyRuns:)`.)
    mutating func link(
        _ key: SlotKey, _ link: CancelLink, whileBodyRuns: Bool, in home: MemberHome, reaching: ObjectIdentifier?,
        root: ObjectIdentifier
    ) -> ChainOutcome {
        if let reaching, contains(reaching, root: root) { return .release(MemberContents(link: link)) }
        let followError: any Error
        switch phase {
        case .active, .cancelled:
            let kept = withExistingTable(home) { table -> Bool in
                guard let index = table.index(of: key) else { return false }
                switch table.state(index) {
                case .reserved, .listed:
                    table.addLink(index, link)
                    return true
                case .free, .detached:
                    return false
                }
            }
            if kept == true { return .none }
            if let error = cancelledError {
                followError = error
            } else if whileBodyRuns {
                followError = boxedCancellation
            } else {
                return .release(MemberContents(link: link))
            }
        case .abandoned:
            return .release(MemberContents(link: link))
        case .absorbed:
            preconditionFailure("ChainState.link: an absorbed storage links nothing (lock the root)")
        }
        var effects = ChainEffects()
        effects.follow(link, error: followError)
        return .run(effects)
    }

    // MARK: Cancelling

    /// Cancels this chain, whose root is `root`: marks it cancelled with `error` from `site` and
    /// cancels the members of its table and of every absorbed table (see `cancelTable`). The
    /// absorbed tables stay: their detached members are freed by their settle notifications.
    /// Nothing if it was cancelled, or abandoned, already.
    mutating func cancel(with error: any Error, at site: CancelSite, root: ObjectIdentifier) -> ChainOutcome {
        guard isActiveRoot("ChainState.cancel: an absorbed storage lists nothing (lock the root)") else {
            return .none
        }
        phase = .cancelled(error, site)
        let listed = listedCount
        guard listed > 0 else { return .none }
        var effects = ChainEffects()
        // Room for every listed member of the group at once: the list then grows once, not once
        // per doubling (a long-lived root may list thousands across its tables).
        if group != nil { effects.reserveRejections(listed) }
        ChainState.cancelTable(&table, home: root, with: error, into: &effects)
        group?.tables.forEach { storage, table in
            ChainState.cancelTable(&table, home: storage, with: error, into: &effects)
        }
        return .run(effects)
    }

    /// A link of another chain reached this one, whose root is `root`, while a cancellation was
    /// followed: cancels it with `error` from `site`, unless it is the chain the links must not
    /// reach (`excluded`: a storage of it, an `autoCancel` winner's, which a loser may wait on;
    /// decided from this machine's own entries, so a join since the winner settled counts).
    mutating func linkedCancel(
        with error: any Error, at site: CancelSite, root: ObjectIdentifier, excluding excluded: ObjectIdentifier?
    ) -> ChainOutcome {
        if let excluded, contains(excluded, root: root) { return .none }
        return cancel(with: error, at: site, root: root)
    }

    /// Cancels the chain if the member `key` of `home` is still listed (its promise pending):
    /// what a `CancelBag` does for a stored promise, and `autoCancel` for the inputs of a
    /// cancelled combinator.
    mutating func cancelIfListed(_ key: SlotKey, in home: MemberHome, root: ObjectIdentifier) -> ChainOutcome {
        guard readTable(home, { $0.isListed(key) }) else { return .none }
        return cancel(with: boxedCancellation, at: .library, root: root)
    }

    /// Cancels the chain if `promise` (not a member: a finalizer's promise, which settles after
    /// the chain's work) is still pending: what a `CancelBag` does for a stored finalizer.
    mutating func cancelIfPending(_ promise: any CancelTarget, root: ObjectIdentifier) -> ChainOutcome {
        guard promise.isPending else { return .none }
        return cancel(with: boxedCancellation, at: .library, root: root)
    }

    /// Cancels the input `key` of an `autoCancel` combinator that `winner` settled (the
    /// winner's storage and key there), decided under this chain's lock from the machine's own
    /// entries: the winner itself (the same member given twice) is left alone; a loser that
    /// shares its chain with the winner (the winner's storage is this root or one it absorbed) is
    /// cancelled alone: its own promise, cancel closure and links, so the winner's chain is not
    /// marked cancelled. Otherwise its chain is cancelled. Nothing if the loser is no longer
    /// listed (settled).
    mutating func cancelLoser(
        _ key: SlotKey, in home: MemberHome, winner: (storage: ObjectIdentifier, key: SlotKey), root: ObjectIdentifier
    ) -> ChainOutcome {
        if winner.storage == home.storage, winner.key == key { return .none }
        guard contains(winner.storage, root: root) else { return cancelIfListed(key, in: home, root: root) }
        var effects = ChainEffects()
        withExistingTable(home) { table in
            guard let index = table.listedIndex(of: key) else { return }
            ChainState.cancelMember(
                index, in: &table, home: home.storage, with: boxedCancellation, rejecting: true, into: &effects)
        }
        noteIfEmptied(home)
        return ChainOutcome(effects)
    }

    // MARK: Handles

    /// The last handle of the storage `home` names went away. For the root: an active chain is
    /// abandoned, and the listed members of every table release their cancel closures and links
    /// uncalled (their promises stay pending, settled by their work), their running bodies'
    /// tokens completed "not cancelled"; a cancelled or abandoned chain changes nothing. For an
    /// absorbed storage that counted as a handle of the storage that absorbed it: it stops
    /// counting (`releaseHold`: the storage releases that handle, which may be the last of that
    /// storage in turn).
    mutating func handlesGone(of home: MemberHome) -> ChainOutcome {
        guard home.isRoot else {
            guard group?.tables.releaseHold(of: home.storage) == true else { return .none }
            noteIfEmptied(home)
            var effects = ChainEffects()
            effects.releaseHold()
            return .run(effects)
        }
        guard isActiveRoot("ChainState.handlesGone: an absorbed storage counts in its root") else { return .none }
        phase = .abandoned
        var effects = ChainEffects()
        ChainState.abandonTable(&table, into: &effects)
        group?.tables.forEach { _, table in ChainState.abandonTable(&table, into: &effects) }
        return ChainOutcome(effects)
    }

    // MARK: Running bodies

    /// The slot a body uses before its promise is a member (the body of a cancellable promise's
    /// initialiser, run before the promise is listed): its token moves to the member's slot when
    /// the promise is attached (`attach`).
    /// (`CancelStorage._runFirstBody` spells it `UInt32.max`: it is inlined into clients.)
    static let firstBodySlot = UInt32.max

    /// The token of the member whose body runs: slot `slot` of `home`'s table, whose promise is
    /// `step` (`nil` and `firstBodySlot`: a body run before its promise is listed). In an active
    /// chain, the member's token, made on the first read and kept in its slot; `.cancelled` if
    /// the member is no longer listed with that promise (a running body's step leaves only when a
    /// cancellation rejects it), checked before the kept token is looked up: a member cancelled
    /// alone frees its slot at once, and a later member may hold that slot and a token by now;
    /// `.cancelled` in a cancelled chain, `.none` in an abandoned one.
    mutating func runningBodyToken(slot: UInt32, step: ObjectIdentifier?, in home: MemberHome) -> RunningBodyToken {
        switch phase {
        case .cancelled: return .cancelled
        case .abandoned: return .none
        case .absorbed: preconditionFailure("ChainState.runningBodyToken: ask the root")
        case .active: break
        }
        if let step {
            let isListedStep = readTable(home) { table -> Bool in
                let index = Int(slot)
                guard slot != ChainState.firstBodySlot, index < table.slotCount, table.isListed(index) else {
                    return false
                }
                return table.targetIdentity(index) == step
            }
            guard isListedStep else { return .cancelled }
        } else if slot != ChainState.firstBodySlot {
            return .cancelled
        }
        return .token(withTable(home) { $0.bodyToken(slot) })
    }
    // MARK: Joining

    /// Joins the chains of two roots, `aRoot` and `bRoot`, whose states are `a` and `b`. A
    /// cancelled root absorbs the other, whose tables are cancelled with its error (joining a
    /// cancelled chain cancels the other). Otherwise the root with fewer tables is absorbed by
    /// the other (union by size: forwarding paths stay short, and a table moves O(log n) times)
    /// and counts as one of its handles. Nothing happens if either chain was abandoned (nothing
    /// can cancel it any more) or both were cancelled. Members do not move: their tables (with
    /// their running bodies' tokens) move into the absorbing root's machine, under their
    /// storages' identities.
    static func join(
        _ a: inout ChainState, _ aRoot: ObjectIdentifier, _ b: inout ChainState, _ bRoot: ObjectIdentifier
    ) -> Joined {
        switch (a.phase, b.phase) {
        case (.absorbed, _), (_, .absorbed):
            preconditionFailure("ChainState.join: join the roots")
        case (.abandoned, _), (_, .abandoned), (.cancelled, .cancelled):
            return Joined(absorption: nil, outcome: .none)
        case (.active, .cancelled):
            return b.absorb(&a, aRoot, into: bRoot)
        case (.cancelled, .active):
            return a.absorb(&b, bRoot, into: aRoot)
        case (.active, .active):
            if (a.group?.tables.count ?? 0) <= (b.group?.tables.count ?? 0) {
                return b.absorb(&a, aRoot, into: bRoot)
            }
            return a.absorb(&b, bRoot, into: aRoot)
        }
    }

    /// Absorbs `other`, the state of the active root `otherRoot`, into this root, `root`.
    private mutating func absorb(
        _ other: inout ChainState, _ otherRoot: ObjectIdentifier, into root: ObjectIdentifier
    ) -> Joined {
        other.phase = .absorbed
        var otherTable = MemberTable()
        swap(&otherTable, &other.table)
        nextGeneration = max(nextGeneration, other.nextGeneration)
        var joining = other.group ?? Group()
        other.group = nil
        var mine = group ?? Group()
        group = nil
        let countsAsHandle: Bool
        var effects = ChainEffects()
        switch phase {
        case .active:
            countsAsHandle = true
        case .cancelled(let error, _):
            // Cancelled in chain order, as `cancel` does.
            ChainState.cancelTable(&otherTable, home: otherRoot, with: error, into: &effects)
            joining.tables.forEach { storage, table in
                ChainState.cancelTable(&table, home: storage, with: error, into: &effects)
            }
            countsAsHandle = false
        case .abandoned, .absorbed:
            preconditionFailure("ChainState.absorb: only an active or cancelled root absorbs")
        }
        // A cancelled root keeps the tables too (their detached members are freed by their
        // settle notifications), so it drops idle ones the same way.
        mine.emptied += joining.emptied + (otherTable.inUse == 0 ? 1 : 0)
        mine.tables.insert(.init(storage: otherRoot, table: consume otherTable, holds: countsAsHandle))
        mine.tables.absorb(&joining.tables)
        group = mine
        pruneGroup()
        return Joined(
            absorption: Absorption(absorbed: otherRoot, root: root, countsAsHandle: countsAsHandle),
            outcome: ChainOutcome(effects))
    }

    /// Drops the absorbed tables that are empty (nothing to cancel or abandon there; a storage
    /// that reserves a slot again gets a new one, see `reserve`), once tables emptied at least
    /// half as many times as there are tables since the last pass: a pass costs O(1) amortised
    /// per join or event, and a long-lived root that joins many short-lived chains stays about
    /// as large as what is still live.
    private mutating func pruneGroup() {
        guard let emptied = group?.emptied, emptied >= 32, 2 * emptied >= group!.tables.count else { return }
        group!.emptied = 0
        group!.tables.dropIdleEntries()
    }
}
