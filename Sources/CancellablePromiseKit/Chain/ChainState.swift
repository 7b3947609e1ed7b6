import PromiseCore

// The state machine of a cancellable chain: every rule of a chain's cancellation is decided
// here, and only here. `CancelStorage` finds and locks the chain's root, calls one event of the
// root's `ChainState`, unlocks, and runs what the event recorded in `ChainActions`.
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
// - `cancel`, `cancelIfListed`, `cancelLoser`: cancelling rejects every listed member but those
//   waiting behind an observer, in chain order; an `autoCancel` loser in the winner's chain is
//   cancelled alone.
// - `lastHandleReleased`: with no handle left, the chain is abandoned: its members release
//   their cancel closures and links uncalled.
// - `join`: two chains become one, the smaller group absorbed by the larger; joining a
//   cancelled chain cancels the other.
//
// A storage absorbed by a join keeps its own table (members never move: their promises know
// their storage and slot), guarded by the root's lock from then on; the root lists the
// storages it absorbed (`group`) so that cancelling or abandoning reaches every table. Each
// table is a `MemberTable`: the machine decides what happens to a slot, the table only stores it.

/// Where a member's slot is: the root's own table, or the table of a storage its root absorbed.
struct MemberHome {
    /// The storage the member was listed in; its promise's attachment. Unowned: a home lives
    /// only for one event, called by that storage (no reference counted per event).
    unowned(unsafe) let storage: CancelStorage
    /// Whether `storage` is the root (its table is the machine's own `table`).
    let isRoot: Bool

    init(_ storage: CancelStorage, root: CancelStorage) {
        self.storage = storage
        self.isRoot = storage === root
    }
}

/// The state of one storage's chain, guarded by the lock of the chain's root: the phase and the
/// group for a root, only the table for a storage a join absorbed.
@usableFromInline
struct ChainState {
    enum Phase {
        /// Listing the chain's pending promises.
        case active
        /// Cancelled with this error, from this call site; lists nothing, never changes again.
        case cancelled(any Error, CancelSite)
        /// No handle left: lists nothing, cancels nothing, never changes again.
        case abandoned
        /// Absorbed by a join: only `table` is used, by the root's machine.
        case absorbed
    }

    private(set) var phase = Phase.active
    /// This storage's members.
    var table = MemberTable()
    /// The storages a root absorbed (directly or through the storages it absorbed), while it is
    /// active: their tables list members of this chain too. Emptied when the chain is cancelled
    /// or abandoned (nothing lists then). A storage whose table is empty may be dropped from it
    /// (`pruneGroup`) and is listed again when it reserves a slot.
    private(set) var group: [CancelStorage] = []
    /// How many times a table of `group` was found empty (when its storage was absorbed, or
    /// after an event in it) since the last pass of `pruneGroup`: a pass runs only when many
    /// may be empty, and a root whose absorbed storages are all busy is never walked.
    private var emptiedInGroup = 0

    init() {}

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

    /// The listed members of the chain, in every table of its group.
    var listedCount: Int {
        var count = table.listedCount
        for storage in group { count += storage.chain.table.listedCount }
        return count
    }

    /// Runs `body` on the table `home` names.
    @inline(__always)
    private mutating func withTable<R>(_ home: MemberHome, _ body: (inout MemberTable) -> R) -> R {
        if home.isRoot { return body(&table) }
        return body(&home.storage.chain.table)
    }

    /// Counts an absorbed table found empty after an event in it (see `emptiedInGroup`).
    @inline(__always)
    private mutating func noteIfEmptied(_ home: MemberHome) {
        if !home.isRoot, home.storage.chain.table.inUse == 0 { emptiedInGroup += 1 }
    }

    // MARK: New members

    /// Reserves a slot for a new member in `home`'s table. An absorbed storage that was dropped
    /// from the group while its table was empty is listed in it again.
    mutating func reserve(
        in home: MemberHome, upstream: SlotKey?, isObserver: Bool, cancelBody: (() -> Void)?
    ) -> SlotKey {
        let key = withTable(home) { $0.reserve(upstream: upstream, isObserver: isObserver, cancelBody: cancelBody) }
        if !home.isRoot, !home.storage.chain.table.isInRootsGroup, isActive {
            group.append(home.storage)
            home.storage.chain.table.isInRootsGroup = true
        }
        return key
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
            withTable(home) { table in
                if table.isObserver(index) || table.upstream(index) != nil {
                    ChainState.detachCancellingLinks(index, in: &table, with: error, into: &actions)
                } else {
                    table.setTarget(index, target)
                    ChainState.reject(index, in: &table, home: home.storage, with: error, into: &actions)
                }
            }
        case .abandoned:
            withTable(home) { table in
                actions.release(table.take(index))
                table.setState(index, .detached)
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
    /// with the attachment the promise had before it was listed, to release and tell after the
    /// lock. (Returned rather than recorded in `ChainActions`: settling is the most frequent
    /// event, and it never calls a closure or follows a link.)
    mutating func memberSettled(_ index: Int, in home: MemberHome) -> LeftMember {
        let left = withTable(home) { table -> LeftMember in
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
        noteIfEmptied(home)
        return left
    }

    /// `link`'s common case: the member `key` of an active chain waits, and keeps `link` while it
    /// does. `false`, changing nothing, in every other case.
    mutating func linkIfWaiting(_ key: SlotKey, _ link: CancelLink, in home: MemberHome) -> Bool {
        guard case .active = phase else { return false }
        return withTable(home) { table in
            guard let index = table.index(of: key) else { return false }
            switch table.state(index) {
            case .reserved, .listed:
                table.addLink(index, link)
                return true
            case .free, .detached:
                return false
            }
        }
    }

    /// Records `link` for the member `key` (a step whose body returned a pending cancellable
    /// promise, or a wrapper's returned promise). While the member waits, cancelling it
    /// cancels the link. A member that left the chain discards its body's result: its work is
    /// cancelled if the chain was cancelled, or if the member was cancelled alone while its
    /// body ran (an `autoCancel` loser); otherwise it is released. An abandoned chain keeps no
    /// link. `whileBodyRuns`: the link comes from the member's own step body, which is running.
    mutating func link(
        _ key: SlotKey, _ link: CancelLink, whileBodyRuns: Bool, in home: MemberHome,
        into actions: inout ChainActions
    ) {
        let isMember = withTable(home) { table -> Bool in
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

    /// Cancels the chain of this root, `root`: marks it cancelled with `error` from `site` and
    /// cancels the members of its table and of every table of its group (see `cancelTable`).
    /// `false` if it was cancelled, or abandoned, already.
    @discardableResult
    mutating func cancel(
        with error: any Error, at site: CancelSite, root: CancelStorage, into actions: inout ChainActions
    ) -> Bool {
        switch phase {
        case .active:
            break
        case .cancelled, .abandoned:
            return false
        case .absorbed:
            preconditionFailure("ChainState.cancel: an absorbed storage lists nothing (lock the root)")
        }
        phase = .cancelled(error, site)
        ChainState.cancelTable(&table, home: root, with: error, into: &actions)
        // A chain that no join absorbed into (the common case) has no group to go through.
        guard !group.isEmpty else { return true }
        let absorbed = group
        group = []
        emptiedInGroup = 0
        for storage in absorbed {
            ChainState.cancelTable(&storage.chain.table, home: storage, with: error, into: &actions)
            storage.chain.table.isInRootsGroup = false
        }
        actions.releaseStorages(absorbed)
        return true
    }

    /// Cancels the chain if the member `key` of `home` is still listed (its promise pending):
    /// what a `CancelBag` does for a stored promise, and `autoCancel` for the inputs of a
    /// cancelled combinator.
    mutating func cancelIfListed(
        _ key: SlotKey, in home: MemberHome, root: CancelStorage, into actions: inout ChainActions
    ) {
        guard withTable(home, { $0.isListed(key) }) else { return }
        cancel(with: boxedCancellation, at: .library, root: root, into: &actions)
    }

    /// Cancels the loser `key` of an `autoCancel` combinator. A loser that shares its chain
    /// with the winner (`sharesChainWithWinner`) is cancelled alone: its own promise, cancel
    /// closure and links, so the winner's chain is not marked cancelled. Otherwise its chain is
    /// cancelled. Nothing if the loser is no longer listed (settled).
    mutating func cancelLoser(
        _ key: SlotKey, in home: MemberHome, sharesChainWithWinner: Bool, root: CancelStorage,
        into actions: inout ChainActions
    ) {
        guard sharesChainWithWinner else {
            return cancelIfListed(key, in: home, root: root, into: &actions)
        }
        withTable(home) { table in
            guard let index = table.listedIndex(of: key) else { return }
            ChainState.reject(index, in: &table, home: home.storage, with: boxedCancellation, into: &actions)
        }
        noteIfEmptied(home)
    }

    // MARK: Handles

    /// The last handle of this root's chain went away: an active chain is abandoned, and the
    /// listed members of every table of its group release their cancel closures and links
    /// uncalled (their promises stay pending, settled by their work). A cancelled or abandoned
    /// chain changes nothing.
    mutating func lastHandleReleased(into actions: inout ChainActions) {
        switch phase {
        case .active:
            break
        case .cancelled, .abandoned:
            return
        case .absorbed:
            preconditionFailure("ChainState.lastHandleReleased: an absorbed storage counts in its root")
        }
        phase = .abandoned
        ChainState.abandonTable(&table, into: &actions)
        guard !group.isEmpty else { return }
        let absorbed = group
        group = []
        emptiedInGroup = 0
        for storage in absorbed {
            ChainState.abandonTable(&storage.chain.table, into: &actions)
            storage.chain.table.isInRootsGroup = false
        }
        actions.releaseStorages(absorbed)
    }

    // MARK: Joining

    /// What a join decided: `absorbed` (a root until now) forwards to `root` from now on, and
    /// counts as one of its handles while it has handles of its own if `countsAsHandle`.
    struct Absorption {
        let absorbed: CancelStorage
        let root: CancelStorage
        let countsAsHandle: Bool
    }

    /// Joins the chains of two roots, `aStorage` and `bStorage`, whose states are `a` and `b`.
    /// A cancelled root absorbs the other, whose tables are cancelled with its error (joining a
    /// cancelled chain cancels the other). Otherwise the root whose group has fewer storages is
    /// absorbed by the other (union by size, so that forwarding paths stay short) and counts as
    /// one of its handles. Nothing happens if either chain was abandoned (nothing can cancel it
    /// any more) or both were cancelled. Members do not move: the absorbing root lists the
    /// absorbed storages in its group.
    static func join(
        _ a: inout ChainState, _ aStorage: CancelStorage, _ b: inout ChainState, _ bStorage: CancelStorage,
        into actions: inout ChainActions
    ) -> Absorption? {
        switch (a.phase, b.phase) {
        case (.absorbed, _), (_, .absorbed):
            preconditionFailure("ChainState.join: join the roots")
        case (.abandoned, _), (_, .abandoned), (.cancelled, .cancelled):
            return nil
        case (.active, .cancelled):
            return b.absorb(&a, aStorage, into: bStorage, actions: &actions)
        case (.cancelled, .active):
            return a.absorb(&b, bStorage, into: aStorage, actions: &actions)
        case (.active, .active):
            if a.group.count <= b.group.count {
                return b.absorb(&a, aStorage, into: bStorage, actions: &actions)
            }
            return a.absorb(&b, bStorage, into: aStorage, actions: &actions)
        }
    }

    /// Absorbs `other`, the state of the active root `otherStorage`, into this root, `storage`.
    private mutating func absorb(
        _ other: inout ChainState, _ otherStorage: CancelStorage, into storage: CancelStorage,
        actions: inout ChainActions
    ) -> Absorption {
        var joining = other.group
        other.group = []
        other.phase = .absorbed
        switch phase {
        case .active:
            // Appended in place: a join allocates nothing but the list's amortised growth.
            group.append(contentsOf: joining)
            group.append(otherStorage)
            other.table.isInRootsGroup = true
            emptiedInGroup += other.emptiedInGroup + (other.table.inUse == 0 ? 1 : 0)
            other.emptiedInGroup = 0
            actions.releaseStorages(pruneGroup())
            return Absorption(absorbed: otherStorage, root: storage, countsAsHandle: true)
        case .cancelled(let error, _):
            // Cancelled in chain order, as `cancel` does; the absorbed storages forward to this
            // root but are not in its group (a cancelled chain lists nothing).
            ChainState.cancelTable(&other.table, home: otherStorage, with: error, into: &actions)
            for absorbed in joining {
                ChainState.cancelTable(&absorbed.chain.table, home: absorbed, with: error, into: &actions)
                absorbed.chain.table.isInRootsGroup = false
            }
            joining.append(otherStorage)
            actions.releaseStorages(joining)
            return Absorption(absorbed: otherStorage, root: storage, countsAsHandle: false)
        case .abandoned, .absorbed:
            preconditionFailure("ChainState.absorb: only an active or cancelled root absorbs")
        }
    }

    /// Drops the storages of the group whose table is empty (nothing to cancel or abandon
    /// there; one that reserves a slot again is listed again, see `reserve`), once tables
    /// emptied at least half as many times as the group has storages since the last pass: a
    /// pass costs O(1) amortised per join or event, and a long-lived root that joins many
    /// short-lived chains stays about as large as what is still live. Returns them, to release
    /// after the lock.
    private mutating func pruneGroup() -> [CancelStorage] {
        guard emptiedInGroup >= 32, 2 * emptiedInGroup >= group.count else { return [] }
        emptiedInGroup = 0
        var dropped: [CancelStorage] = []
        group.removeAll { storage in
            guard storage.chain.table.inUse == 0 else { return false }
            storage.chain.table.isInRootsGroup = false
            dropped.append(storage)
            return true
        }
        return dropped
    }
}

// MARK: - Members of one table

extension ChainState {
    /// Cancels the members of `table` (the table of `home`) with `error`: rejects every listed
    /// promise that does not wait behind an observer; the others settle when the observer
    /// ahead of them passes the cancellation on (chain order), and what they link to is
    /// cancelled now. Reserved members are settled when they are listed.
    static func cancelTable(
        _ table: inout MemberTable, home: CancelStorage, with error: any Error, into actions: inout ChainActions
    ) {
        guard table.listedCount > 0 else { return }
        actions.reserveRejections(table.listedCount)
        var index = 0
        if table.observersInUse > 0 {
            while index < table.slotCount {
                if table.isListed(index) { markWaitingBehindObserver(index, in: &table) }
                index += 1
            }
            index = 0
        }
        // `free` may release the array once the last slot is freed: `slotCount` is read again.
        while index < table.slotCount {
            if table.isListed(index) {
                if table.waitsBehindObserver(index) == true {
                    detachCancellingLinks(index, in: &table, with: error, into: &actions)
                } else {
                    reject(index, in: &table, home: home, with: error, into: &actions)
                }
            }
            index += 1
        }
    }

    /// Abandons the listed members of `table`: their cancel closures and links are released
    /// uncalled; their slots are freed by their promises' settle notifications.
    static func abandonTable(_ table: inout MemberTable, into actions: inout ChainActions) {
        guard table.listedCount > 0 else { return }
        var index = 0
        while index < table.slotCount {
            if table.isListed(index) {
                actions.release(table.take(index))
                table.setState(index, .detached)
            }
            index += 1
        }
    }

    /// Detaches the member of slot `index` without rejecting its promise (something upstream
    /// will settle it), cancelling with `error` what it links to and releasing the rest after
    /// the lock. Its slot is freed by its promise's settle notification.
    private static func detachCancellingLinks(
        _ index: Int, in table: inout MemberTable, with error: any Error, into actions: inout ChainActions
    ) {
        var taken = table.take(index)
        if let link = taken.link {
            taken.link = nil
            actions.follow(link, error: error)
        }
        actions.release(taken)
        table.setState(index, .detached)
    }

    /// Rejects the promise of slot `index` under the lock (the one named step that acts under
    /// it: see `ChainActions.reject`); frees the slot if its settle notification was taken care
    /// of there, otherwise leaves it detached for that notification.
    @inline(__always)
    private static func reject(
        _ index: Int, in table: inout MemberTable, home: CancelStorage, with error: any Error,
        into actions: inout ChainActions
    ) {
        let notified = actions.reject(table.take(index), home: home, key: UInt32(index), with: error)
        if notified {
            table.free(index)
        } else {
            table.setState(index, .detached)
        }
    }

    /// Whether slot `index` is an observer or follows one that is still listed (in this
    /// cancellation pass); computed for a whole table in linear time by remembering the answer
    /// per slot.
    private static func markWaitingBehindObserver(_ index: Int, in table: inout MemberTable) {
        // Common case without allocating: the slot is decided by itself or by its upstream,
        // already marked.
        if table.waitsBehindObserver(index) != nil { return }
        if table.isObserver(index) {
            table.setWaitsBehindObserver(index, true)
            return
        }
        guard let upstreamKey = table.upstream(index), let upstreamIndex = table.listedIndex(of: upstreamKey) else {
            table.setWaitsBehindObserver(index, false)
            return
        }
        if let known = table.waitsBehindObserver(upstreamIndex) {
            table.setWaitsBehindObserver(index, known)
            return
        }
        var path: [Int] = []
        var current = index
        var answer: Bool
        while true {
            if let known = table.waitsBehindObserver(current) {
                answer = known
                break
            }
            if table.isObserver(current) {
                answer = true
                table.setWaitsBehindObserver(current, true)
                break
            }
            guard let key = table.upstream(current), let next = table.listedIndex(of: key) else {
                answer = false
                table.setWaitsBehindObserver(current, false)
                break
            }
            path.append(current)
            current = next
        }
        for waiting in path { table.setWaitsBehindObserver(waiting, answer) }
    }
}
