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
    /// Slots whose member holds a running body's token (`MemberContents.token`).
    private(set) var tokensInUse = 0
    /// The token the body of a cancellable promise's initialiser read before the promise was
    /// listed (see `ChainState.firstBodySlot`): it moves to the member's slot when it is.
    private var firstBodyToken: CancellationToken?

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
        if taken.token != nil { tokensInUse -= 1 }
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

    /// Whether a running body of this table read a token that is still kept.
    var hasBodyTokens: Bool { tokensInUse > 0 || firstBodyToken != nil }

    /// The token of slot `slot`'s running body (`ChainState.firstBodySlot`: the initialiser's
    /// body, before its promise is listed): the one kept, or a new one, kept from now on.
    mutating func bodyToken(_ slot: UInt32) -> CancellationToken {
        if slot == ChainState.firstBodySlot {
            if let firstBodyToken { return firstBodyToken }
            let made = CancellationToken()
            firstBodyToken = made
            return made
        }
        var made = false
        let token = slots.withContents(Int(slot)) { member -> CancellationToken in
            if let token = member.contents.token { return token }
            let token = CancellationToken()
            member.contents.token = token
            made = true
            return token
        }
        if made { tokensInUse += 1 }
        return token
    }

    /// Takes the token the initialiser's body read, if any.
    mutating func takeFirstBodyToken() -> CancellationToken? {
        firstBodyToken.take()
    }

    /// Keeps `token` as the token of slot `index`'s running body (a member whose contents were
    /// taken, or a first member given its initialiser's body's token).
    mutating func setBodyToken(_ index: Int, _ token: CancellationToken) {
        slots.withContents(index) { $0.contents.token = token }
        tokensInUse += 1
    }
}
