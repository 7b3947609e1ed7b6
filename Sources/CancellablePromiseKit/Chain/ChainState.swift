import PromiseCore

// The state machine of a cancellable chain: its events (here and in ChainState+Tables.swift,
// ChainState+RunningBodies.swift and ChainState+Group.swift) decide the rules of a chain's
// cancellation, but for two decided elsewhere: when the last handle goes (an atomic count,
// CancelHandle.swift), and whether a member's promise was still pending when rejected (by the
// promise, under its own lock, in `ChainActions.reject`). `CancelStorage` finds and locks the
// chain's root, calls one event of the root's `ChainState`, unlocks, and runs what the event
// left to do: what it recorded in `ChainActions`, or what it returned (see ChainActions.swift).
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
//   member but those waiting behind an observer, in chain order; an `autoCancel` loser in the
//   winner's chain is cancelled alone (the machine compares the roots); a link followed never
//   reaches the chain it must not (an `autoCancel` winner's).
// - `handlesGone`: with no handle left, the root's chain is abandoned: its members release
//   their cancel closures and links uncalled; an absorbed storage stops counting as a handle of
//   the storage that absorbed it.
// - `join`: two chains become one, the smaller group absorbed by the larger; joining a
//   cancelled chain cancels the other.
// - `runningBodyToken`: a body that runs reads its member's token (`CancellationToken.current`),
//   made on first read; the token is cancelled with the chain (or with the member, cancelled
//   alone) while the member is pending, completed "not cancelled" when it leaves on its own or
//   the chain is abandoned (ChainState+RunningBodies.swift).
//
// A storage absorbed by a join keeps its members' slots (their promises know their storage and
// slot), but its table moves into the root's machine (`absorbed`, found by the storage's
// identity): the machine holds the whole state of the chain and refers to no storage, so that
// its tests build machines alone. Generations are counted once for every table of the chain
// (`nextGeneration`), so that a table dropped while empty and made again never repeats a key.

/// The state of a chain, kept by its root's storage and guarded by that storage's lock: the
/// phase, the root's own table, the tables of the storages it absorbed (`group`) and the tokens
/// its running bodies read. A storage a join absorbed keeps a state in phase `absorbed` that
/// nothing reads: its table moved into its root's.
@usableFromInline
struct ChainState {
    enum Phase {
        /// Listing the chain's pending promises.
        case active
        /// Cancelled with this error, from this call site; lists nothing, never changes again.
        case cancelled(any Error, CancelSite)
        /// No handle left: lists nothing, cancels nothing, never changes again.
        case abandoned
        /// Absorbed by a join: its table moved into the root's machine (`absorbed`); this state
        /// is no longer used.
        case absorbed
    }

    private(set) var phase = Phase.active
    /// The root's own members.
    var table = MemberTable()
    /// What this root keeps of the storages it absorbed; `nil` until its first join, so that a
    /// chain that never joins makes and drops no collection for it.
    private(set) var group: Group?
    /// The generation of the next slot reserved in any table of the chain.
    private var nextGeneration: UInt32 = 0
    /// The tokens running bodies of the chain's pending members read, by member; `nil` until
    /// the first is made, so that a chain whose bodies never read one pays one word for it.
    var bodyTokens: BodyTokens?

    /// The tables of the storages this root absorbed.
    var absorbed: AbsorbedTables { group?.tables ?? AbsorbedTables() }

    init() {}

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

    /// Whether this root's chain is active (a cancelled or abandoned one never changes again);
    /// stops with `misuse` if this is an absorbed storage's state, which decides nothing.
    private func isActiveRoot(_ misuse: StaticString) -> Bool {
        switch phase {
        case .active: return true
        case .cancelled, .abandoned: return false
        case .absorbed: preconditionFailure("\(misuse)")
        }
    }

    /// The listed members of the chain, in every table of its group.
    var listedCount: Int { table.listedCount + (group?.tables.listedCount ?? 0) }

    /// Reads the table `home` names (an empty one if an absorbed storage has none now).
    func readTable<R>(_ home: MemberHome, _ body: (MemberTable) -> R) -> R {
        if home.isRoot { return body(table) }
        return group?.tables.readTable(home.storage, body) ?? body(MemberTable())
    }

    /// Runs `body` on the table `home` names.
    @inline(__always)
    private mutating func withTable<R>(_ home: MemberHome, _ body: (inout MemberTable) -> R) -> R {
        if home.isRoot { return body(&table) }
        return withAbsorbedTable(home.storage, body)
    }

    /// `withTable` for an absorbed storage's table (out of line: the root's own table is the
    /// common case, on every chain link).
    @inline(never)
    private mutating func withAbsorbedTable<R>(_ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R) -> R {
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

    /// `list`'s common case: in an active chain the member is listed, with nothing to do after
    /// the lock. `false`, changing nothing, in every other phase.
    mutating func listIfActive(_ key: SlotKey, target: any CancelTarget, in home: MemberHome) -> Bool {
        guard case .active = phase else { return false }
        let index = Int(key.slot)
        withTable(home) { $0.listReserved(index, target: target) }
        return true
    }

    /// Lists the member reserved as `key`, whose promise is `target`. In an active chain it is
    /// listed (nothing to do after the lock). In a cancelled chain a step or an observer is
    /// left for its upstream promise to pass the cancellation on (or, if that fulfilled, for
    /// its body to find the chain cancelled before starting), with what it links to cancelled;
    /// a first member is rejected at once. In an abandoned chain it holds nothing.
    mutating func list(
        _ key: SlotKey, target: any CancelTarget, in home: MemberHome, into actions: inout ChainActions
    ) {
        if listIfActive(key, target: target, in: home) { return }
        let index = Int(key.slot)
        switch phase {
        case .active:
            break
        case .cancelled(let error, _):
            // A member listed now has no running body yet: no token.
            var noTokens: BodyTokens?
            withTable(home) { table in
                if table.isObserver(index) || table.upstream(index) != nil {
                    ChainState.detachCancellingLinks(
                        index, in: &table, home: home.storage, with: error, tokens: &noTokens, into: &actions)
                } else {
                    table.setTarget(index, target)
                    ChainState.reject(
                        index, in: &table, home: home.storage, with: error, tokens: &noTokens, into: &actions)
                }
            }
        case .abandoned:
            withTable(home) { table in
                actions.release(table.take(index))
                table.detach(index)
            }
        case .absorbed:
            preconditionFailure("ChainState.list: an absorbed storage lists nothing (lock the root)")
        }
        noteIfEmptied(home)
    }

    /// A promise was reserved `key` and then offered this chain's storage as its attachment:
    /// `attached` is false if it had settled first (nothing to cancel: the slot is freed, and
    /// its cancel closure released uncalled); otherwise it is listed. (An attachment it had,
    /// other than a producer's task, which its cancel closure stands for, is told by the
    /// promise itself when it settles.)
    mutating func attach(
        _ key: SlotKey, target: any CancelTarget, attached: Bool, in home: MemberHome,
        into actions: inout ChainActions
    ) {
        let index = Int(key.slot)
        if bodyTokens != nil { adoptFirstBodyToken(as: key.slot, in: home, attached: attached, into: &actions) }
        guard attached else {
            withTable(home) { table in
                actions.release(table.take(index))
                table.free(index)
            }
            noteIfEmptied(home)
            return
        }
        list(key, target: target, in: home, into: &actions)
    }

    // MARK: Members leaving

    /// The promise of slot `index` in `home`'s table settled: the slot is freed (unless it is no
    /// longer in use: a settle reported twice changes nothing), and what it held is handed back,
    /// with the token its running body read if any, to release (and complete "not cancelled")
    /// after the lock. (Returned rather than recorded in `ChainActions`: settling is the most
    /// frequent event, and it never calls a closure or follows a link.)
    mutating func memberSettled(_ index: Int, in home: MemberHome) -> LeftMember {
        var left = withTable(home) { table -> LeftMember in
            guard index < table.slotCount else { return LeftMember() }
            switch table.state(index) {
            case .listed, .detached:
                let left = LeftMember(contents: table.take(index))
                table.free(index)
                return left
            case .reserved:
                preconditionFailure("ChainState.memberSettled: a member reports only once listed")
            case .free:
                return LeftMember()
            }
        }
        if bodyTokens?.isEmpty == false { left.token = takeBodyToken(UInt32(index), in: home) }
        noteIfEmptied(home)
        return left
    }

    /// `link`'s common case: the member `key` of an active chain waits, and keeps `link` (into
    /// another chain, whose storage is `reaching` for a `.chain` link) while it does. `false`,
    /// changing nothing, in every other case.
    mutating func linkIfWaiting(
        _ key: SlotKey, _ link: CancelLink, in home: MemberHome, reaching: ObjectIdentifier?, root: ObjectIdentifier
    ) -> Bool {
        guard case .active = phase else { return false }
        if let reaching, contains(reaching, root: root) { return false }
        return withExistingTable(home) { table in
            guard let index = table.index(of: key) else { return false }
            switch table.state(index) {
            case .reserved, .listed:
                table.addLink(index, link)
                return true
            case .free, .detached:
                return false
            }
        } ?? false
    }

    /// Records `link` for the member `key` (a step whose body returned a pending cancellable
    /// promise, or a wrapper's returned promise). While the member waits, cancelling it
    /// cancels the link. A member that left the chain discards its body's result: its work is
    /// cancelled if the chain was cancelled, or if the member was cancelled alone while its
    /// body ran (an `autoCancel` loser); otherwise it is released. An abandoned chain keeps no
    /// link. `whileBodyRuns`: the link comes from the member's own step body, which is running.
    /// A link into this very chain (`reaching` one of its storages) links nothing: the chain
    /// cancels that promise anyway, and a link to its own handle would keep the chain
    /// cancellable for ever; it is released.
    mutating func link(
        _ key: SlotKey, _ link: CancelLink, whileBodyRuns: Bool, in home: MemberHome, reaching: ObjectIdentifier?,
        root: ObjectIdentifier, into actions: inout ChainActions
    ) {
        if let reaching, contains(reaching, root: root) {
            actions.release(link)
            return
        }
        let isMember = readTable(home) { table -> Bool in
            guard let index = table.index(of: key) else { return false }
            switch table.state(index) {
            case .reserved, .listed:
                return true
            case .free, .detached:
                return false
            }
        }
        switch phase {
        case .active where isMember, .cancelled where isMember:
            withTable(home) { $0.addLink(Int(key.slot), link) }
        case .abandoned where isMember:
            actions.release(link)
        case .cancelled(let error, _) where !isMember:
            actions.follow(link, error: error)
        case .active where whileBodyRuns:
            actions.follow(link, error: boxedCancellation)
        case .absorbed:
            preconditionFailure("ChainState.link: an absorbed storage links nothing (lock the root)")
        default:
            actions.release(link)
        }
    }

    // MARK: Cancelling

    /// Cancels this chain, whose root is `root`: marks it cancelled with `error` from `site` and
    /// cancels the members of its table and of every absorbed table (see `cancelTable`). The
    /// absorbed tables stay: their detached members are freed by their settle notifications.
    /// `false` if it was cancelled, or abandoned, already.
    @discardableResult
    mutating func cancel(
        with error: any Error, at site: CancelSite, root: ObjectIdentifier, into actions: inout ChainActions
    ) -> Bool {
        guard isActiveRoot("ChainState.cancel: an absorbed storage lists nothing (lock the root)") else {
            return false
        }
        phase = .cancelled(error, site)
        guard bodyTokens == nil else {
            cancelTablesWithBodyTokens(with: error, root: root, into: &actions)
            return true
        }
        var noTokens: BodyTokens?
        cancelTables(with: error, root: root, tokens: &noTokens, into: &actions)
        return true
    }

    /// `cancelTables` in a chain whose running bodies read tokens (out of line: most chains
    /// have none). Tokens of members that settled on their own first stay for their settle
    /// notifications.
    @inline(never)
    private mutating func cancelTablesWithBodyTokens(
        with error: any Error, root: ObjectIdentifier, into actions: inout ChainActions
    ) {
        var tokens = bodyTokens
        bodyTokens = nil
        cancelTables(with: error, root: root, tokens: &tokens, into: &actions)
        bodyTokens = tokens
    }

    /// Cancels the members of every table of the chain (see `cancelTable`).
    @inline(__always)
    private mutating func cancelTables(
        with error: any Error, root: ObjectIdentifier, tokens: inout BodyTokens?, into actions: inout ChainActions
    ) {
        if let group {
            // Room for every listed member of the group at once: the list then grows once, not
            // once per doubling (a long-lived root may list thousands across its tables).
            actions.reserveRejections(table.listedCount + group.tables.listedCount)
        }
        ChainState.cancelTable(&table, home: root, with: error, tokens: &tokens, into: &actions)
        group?.tables.forEach { storage, table in
            ChainState.cancelTable(&table, home: storage, with: error, tokens: &tokens, into: &actions)
        }
    }

    /// A link of another chain reached this one, whose root is `root`, while a cancellation was
    /// followed: cancels it with `error` from `site`, unless it is the chain the links must not
    /// reach (`excluded`: a storage of it, an `autoCancel` winner's, which a loser may wait on;
    /// decided from this machine's own entries, so a join since the winner settled counts).
    mutating func linkedCancel(
        with error: any Error, at site: CancelSite, root: ObjectIdentifier, excluding excluded: ObjectIdentifier?,
        into actions: inout ChainActions
    ) {
        if let excluded, contains(excluded, root: root) { return }
        cancel(with: error, at: site, root: root, into: &actions)
    }

    /// Cancels the chain if the member `key` of `home` is still listed (its promise pending):
    /// what a `CancelBag` does for a stored promise, and `autoCancel` for the inputs of a
    /// cancelled combinator.
    mutating func cancelIfListed(
        _ key: SlotKey, in home: MemberHome, root: ObjectIdentifier, into actions: inout ChainActions
    ) {
        guard readTable(home, { $0.isListed(key) }) else { return }
        cancel(with: boxedCancellation, at: .library, root: root, into: &actions)
    }

    /// Cancels the input `key` of an `autoCancel` combinator that `winner` settled (the
    /// winner's storage and key there), decided under this chain's lock from the machine's own
    /// entries: the winner itself (the same member given twice) is left alone; a loser that
    /// shares its chain with the winner (the winner's storage is this root or one it absorbed) is
    /// cancelled alone: its own promise, cancel closure and links, so the winner's chain is not
    /// marked cancelled. Otherwise its chain is cancelled. Nothing if the loser is no longer
    /// listed (settled).
    mutating func cancelLoser(
        _ key: SlotKey, in home: MemberHome, winner: (storage: ObjectIdentifier, key: SlotKey),
        root: ObjectIdentifier, into actions: inout ChainActions
    ) {
        if winner.storage == home.storage, winner.key == key { return }
        guard contains(winner.storage, root: root) else {
            return cancelIfListed(key, in: home, root: root, into: &actions)
        }
        var tokens = bodyTokens
        bodyTokens = nil
        withExistingTable(home) { table in
            guard let index = table.listedIndex(of: key) else { return }
            ChainState.reject(
                index, in: &table, home: home.storage, with: boxedCancellation, tokens: &tokens, into: &actions)
        }
        bodyTokens = tokens
        noteIfEmptied(home)
    }

    // MARK: Handles

    /// The last handle of the storage `home` names went away. For the root: an active chain is
    /// abandoned, and the listed members of every table release their cancel closures and links
    /// uncalled (their promises stay pending, settled by their work); a cancelled or abandoned
    /// chain changes nothing. For an absorbed storage that counted as a handle of the storage
    /// that absorbed it: it stops counting, and `true` tells the caller to release that handle
    /// (which may be the last of that storage in turn).
    mutating func handlesGone(of home: MemberHome, into actions: inout ChainActions) -> Bool {
        guard home.isRoot else {
            guard group?.tables.releaseHold(of: home.storage) == true else { return false }
            noteIfEmptied(home)
            return true
        }
        guard isActiveRoot("ChainState.handlesGone: an absorbed storage counts in its root") else { return false }
        phase = .abandoned
        if bodyTokens != nil { endBodyTokens(into: &actions) }
        ChainState.abandonTable(&table, into: &actions)
        group?.tables.forEach { _, table in ChainState.abandonTable(&table, into: &actions) }
        return false
    }

    // MARK: Joining

    /// What a join decided: the root `absorbed` forwards to `root` from now on, and counts as
    /// one of its handles while it has handles of its own if `countsAsHandle`.
    struct Absorption: Equatable {
        let absorbed: ObjectIdentifier
        let root: ObjectIdentifier
        let countsAsHandle: Bool
    }

    /// Joins the chains of two roots, `aRoot` and `bRoot`, whose states are `a` and `b`. A
    /// cancelled root absorbs the other, whose tables are cancelled with its error (joining a
    /// cancelled chain cancels the other). Otherwise the root with fewer tables is absorbed by
    /// the other (union by size: forwarding paths stay short, and a table moves O(log n) times)
    /// and counts as one of its handles. Nothing happens if either chain was abandoned (nothing
    /// can cancel it any more) or both were cancelled. Members do not move: their tables move
    /// into the absorbing root's machine, under their storages' identities.
    static func join(
        _ a: inout ChainState, _ aRoot: ObjectIdentifier, _ b: inout ChainState, _ bRoot: ObjectIdentifier,
        into actions: inout ChainActions
    ) -> Absorption? {
        switch (a.phase, b.phase) {
        case (.absorbed, _), (_, .absorbed):
            preconditionFailure("ChainState.join: join the roots")
        case (.abandoned, _), (_, .abandoned), (.cancelled, .cancelled):
            return nil
        case (.active, .cancelled):
            return b.absorb(&a, aRoot, into: bRoot, actions: &actions)
        case (.cancelled, .active):
            return a.absorb(&b, bRoot, into: aRoot, actions: &actions)
        case (.active, .active):
            if (a.group?.tables.count ?? 0) <= (b.group?.tables.count ?? 0) {
                return b.absorb(&a, aRoot, into: bRoot, actions: &actions)
            }
            return a.absorb(&b, bRoot, into: aRoot, actions: &actions)
        }
    }

    /// Absorbs `other`, the state of the active root `otherRoot`, into this root, `root`.
    private mutating func absorb(
        _ other: inout ChainState, _ otherRoot: ObjectIdentifier, into root: ObjectIdentifier,
        actions: inout ChainActions
    ) -> Absorption {
        other.phase = .absorbed
        var otherTable = MemberTable()
        swap(&otherTable, &other.table)
        nextGeneration = max(nextGeneration, other.nextGeneration)
        var joining = other.group ?? Group()
        other.group = nil
        var joiningTokens = other.bodyTokens
        other.bodyTokens = nil
        var mine = group ?? Group()
        group = nil
        let countsAsHandle: Bool
        switch phase {
        case .active:
            countsAsHandle = true
            if let joiningTokens { bodyTokens = (bodyTokens ?? [:]).merging(joiningTokens) { mine, _ in mine } }
        case .cancelled(let error, _):
            // Cancelled in chain order, as `cancel` does.
            ChainState.cancelTable(&otherTable, home: otherRoot, with: error, tokens: &joiningTokens, into: &actions)
            joining.tables.forEach { storage, table in
                ChainState.cancelTable(&table, home: storage, with: error, tokens: &joiningTokens, into: &actions)
            }
            // What is left: members that settled on their own first, told by their notifications.
            if let joiningTokens, !joiningTokens.isEmpty {
                bodyTokens = (bodyTokens ?? [:]).merging(joiningTokens) { mine, _ in mine }
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
        return Absorption(absorbed: otherRoot, root: root, countsAsHandle: countsAsHandle)
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
