import PromiseCore

// The members of one storage, kept in the package's slot table (SlotTable.swift) with the
// per-member fields (`MemberSlot`) and the counts the state machine asks for (listed,
// observers). What a member's state means and when it changes is decided by `ChainState`
// (ChainState.swift); this file only stores it.

/// The members of one storage: a slot per pending promise of the chain listed there. A chain
/// with one member allocates no array, and a settled chain holds no storage (see `SlotTable`).
/// Guarded by the lock of the storage's root.
struct MemberTable {
    /// A member's state, `free` for a slot that holds no member.
    enum State {
        case free, reserved, listed, detached
    }

    private var slots = SlotTable<MemberSlot>()
    /// Slots in use by observers.
    private(set) var observersInUse = 0
    /// Slots in the `listed` state.
    private(set) var listedCount = 0
    /// The tokens running bodies of this table's members read (`CancellationToken.current`), by
    /// slot; `nil` until the first is made, so that a table whose bodies never read one pays one
    /// word for it. A slot's token goes when its member leaves (see `ChainState`).
    private var bodyTokens: [UInt32: CancellationToken]?

    init() {}

    /// Slots in use or on the free list.
    var slotCount: Int { slots.slotCount }
    /// Slots not free.
    var inUse: Int { slots.inUse }
    /// Slots allocated beyond the inline one (for tests).
    var capacity: Int { slots.capacity }

    func state(_ index: Int) -> State {
        switch slots.readInUse(index, { $0.state }) {
        case nil: return .free
        case .reserved: return .reserved
        case .listed: return .listed
        case .detached: return .detached
        }
    }

    func isObserver(_ index: Int) -> Bool { slots.readContents(index) { $0.isObserver } }
    func upstream(_ index: Int) -> SlotKey? { slots.readContents(index) { $0.upstream } }
    func waitsBehindObserver(_ index: Int) -> Bool? { slots.readContents(index) { $0.waitsBehindObserver } }

    func isListed(_ index: Int) -> Bool {
        if case .listed = slots.readInUse(index, { $0.state }) { return true }
        return false
    }

    /// The slot of `key` if it is still the reservation `key` names.
    func index(of key: SlotKey) -> Int? { slots.index(of: key) }

    /// The slot of `key` if it is listed.
    func listedIndex(of key: SlotKey) -> Int? {
        guard let index = slots.index(of: key), isListed(index) else { return nil }
        return index
    }

    func isListed(_ key: SlotKey) -> Bool { listedIndex(of: key) != nil }

    /// The identity of the promise slot `index` (in use) rejects, if it has one.
    func targetIdentity(_ index: Int) -> ObjectIdentifier? {
        slots.readContents(index) { $0.contents.target.map { ObjectIdentifier($0) } }
    }

    // MARK: Changing a slot

    /// Moves slot `index` (in use) to `detached`, keeping `listedCount`.
    @inline(__always)
    mutating func detach(_ index: Int) {
        if isListed(index) { listedCount -= 1 }
        slots.withContents(index) { $0.state = .detached }
    }

    /// Lists the reserved slot `index`, whose promise is `target`, in one access to the slot.
    mutating func listReserved(_ index: Int, target: any CancelTarget) {
        slots.withContents(index) { slot in
            guard case .reserved = slot.state else { preconditionFailure("MemberTable.listReserved: not reserved") }
            slot.contents.target = target
            slot.state = .listed
        }
        listedCount += 1
    }

    /// Sets the promise slot `index` rejects when its chain is cancelled.
    mutating func setTarget(_ index: Int, _ target: any CancelTarget) {
        slots.withContents(index) { $0.contents.target = target }
    }

    /// Adds `link` to what slot `index` cancels with it.
    mutating func addLink(_ index: Int, _ link: CancelLink) {
        slots.withContents(index) { $0.contents.link = CancelLink.adding(link, to: $0.contents.link) }
    }

    mutating func setWaitsBehindObserver(_ index: Int, _ value: Bool) {
        slots.withContents(index) { $0.waitsBehindObserver = value }
    }

    /// Takes what slot `index` holds, leaving it empty.
    mutating func take(_ index: Int) -> MemberContents {
        var taken = MemberContents()
        slots.withContents(index) { swap(&taken, &$0.contents) }
        return taken
    }

    // MARK: Reserving and freeing

    /// Reserves a slot for a new member, with the generation its chain counted for it.
    mutating func reserve(
        generation: UInt32, upstream: SlotKey?, isObserver: Bool, cancelBody: (() -> Void)?
    ) -> SlotKey {
        if isObserver { observersInUse += 1 }
        return slots.reserve(generation: generation) { slot in
            slot.state = .reserved
            slot.isObserver = isObserver
            slot.upstream = upstream
            slot.contents.cancelBody = cancelBody
        }
    }

    /// Frees slot `index`, whose contents were taken.
    mutating func free(_ index: Int) {
        let (isObserver, isListed) = slots.readContents(index) { slot -> (Bool, Bool) in
            if case .listed = slot.state { return (slot.isObserver, true) }
            return (slot.isObserver, false)
        }
        if isObserver { observersInUse -= 1 }
        if isListed { listedCount -= 1 }
        slots.free(index)
    }

    // MARK: Running bodies' tokens

    /// The tokens kept, and the room for them (for tests of their bound).
    var bodyTokenRoom: (count: Int, capacity: Int) { (bodyTokens?.count ?? 0, bodyTokens?.capacity ?? 0) }

    /// Whether a running body of this table read a token that is still kept.
    var hasBodyTokens: Bool { bodyTokens?.isEmpty == false }

    /// The token of slot `slot`'s running body: the one kept, or a new one, kept from now on.
    mutating func bodyToken(_ slot: UInt32) -> CancellationToken {
        if let token = bodyTokens?[slot] { return token }
        let made = CancellationToken()
        if bodyTokens == nil { bodyTokens = [:] }
        bodyTokens![slot] = made
        return made
    }

    /// Keeps `token` as the token of slot `slot`'s running body.
    mutating func setBodyToken(_ slot: UInt32, _ token: CancellationToken) {
        if bodyTokens == nil { bodyTokens = [:] }
        bodyTokens![slot] = token
    }

    /// Takes the token of slot `slot`'s running body, if one was read. Out of line: the events of
    /// every chain link call it only once a body has read a token.
    @inline(never)
    mutating func takeBodyToken(_ slot: UInt32) -> CancellationToken? {
        guard let token = bodyTokens?.removeValue(forKey: slot) else { return nil }
        // Dropped once empty (a table is one storage's: most read one token at a time), and made
        // again at its size once mostly empty, so a long-lived table keeps what is live.
        if let tokens = bodyTokens, tokens.isEmpty || (tokens.capacity > 16 && tokens.count * 4 < tokens.capacity) {
            bodyTokens =
                tokens.isEmpty
                ? nil
                : [UInt32: CancellationToken](minimumCapacity: tokens.count * 2)
                    .merging(tokens) { a, _ in a }
        }
        return token
    }

    /// Takes every token kept.
    mutating func takeAllBodyTokens() -> [CancellationToken] {
        guard let tokens = bodyTokens else { return [] }
        bodyTokens = nil
        return Array(tokens.values)
    }
}
