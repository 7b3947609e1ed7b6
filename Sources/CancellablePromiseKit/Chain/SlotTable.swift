import PromiseCore

// The slots of one storage's members: an allocator with no policy. It hands out slots, reuses
// them through a free list, gives storage back, and keeps the counts the state machine asks for
// (slots in use, listed, observers). What a member's state means and when it changes is decided
// by `ChainState` (ChainState.swift); this file only stores it.

/// The members of one storage: a slot per pending promise of the chain listed there. The first
/// slot is stored inline, so a chain with one member allocates no array; the array is released
/// once every slot is free, so a settled chain holds no storage. Guarded by the lock of the
/// storage's root.
struct SlotTable {
    struct Slot {
        enum State {
            /// Unused (listed in `freeSlots`, unless it is at the end of the table).
            case free
            /// Reserved for a promise being made or attached, and listed before the lock it was
            /// reserved under is released.
            case reserved
            /// Listed: its promise is pending and a cancellation rejects it.
            case listed
            /// Left the chain (cancelled, abandoned, or left by a cancellation while its promise
            /// had settled on its own): holds nothing, and is freed by its promise's settle
            /// notification.
            case detached
        }

        // 80 bytes. A 64-byte layout (the one-byte fields after the link's tag, the upstream key
        // not optional) saved about 20 instructions per chain link but made the median of the
        // 64,000-step promise loop row 20 % slower (its fastest iterations were unchanged), so
        // it was not kept.
        var state: State
        var generation: UInt32 = 0
        /// An observer (`ensure`, `ensureThen`, `tap`): see `ChainState.cancelTable`.
        var isObserver = false
        /// Scratch for a cancellation: whether the member waits behind an observer.
        var waitsBehindObserver: Bool?
        /// The step this one follows in the chain (in the same table).
        var upstream: _CancelKey?
        var contents = MemberContents()

        static var empty: Slot { Slot(state: .free) }
    }

    private var first = Slot.empty
    private var rest: [Slot] = []
    /// Slots in use or on the free list (`first` counts when this is at least 1).
    private(set) var slotCount = 0
    /// Free slots to reuse, most recently freed last. An entry may be stale (its slot was
    /// dropped from the end of the table, or reused through another entry): `reserve` skips
    /// those, and `compactFreeSlots` drops them once they could be half of the list.
    private var freeSlots: [Int32] = []
    private var nextGeneration: UInt32 = 0
    /// Slots in use by observers. (32 bits, beside `nextGeneration`: the table stays as large.)
    private(set) var observersInUse: UInt32 = 0
    /// Slots in the `listed` state.
    private(set) var listedCount = 0
    /// Slots not free.
    private(set) var inUse = 0
    /// Whether this (absorbed) storage is in its root's group list: see `ChainState.group`.
    var isInRootsGroup = false

    init() {}

    /// Slots allocated beyond the inline one (for tests).
    var capacity: Int { rest.capacity }

    // Slots are reached through these two helpers rather than a subscript with `_read` and
    // `_modify` accessors: those are coroutines, and one not inlined allocates its frame on
    // every access.

    /// Runs `body` on slot `index`, in place.
    @inline(__always)
    private mutating func withSlot<R>(_ index: Int, _ body: (inout Slot) -> R) -> R {
        if index == 0 { return body(&first) }
        return body(&rest[index - 1])
    }

    /// Reads slot `index`.
    @inline(__always)
    private func readSlot<R>(_ index: Int, _ body: (borrowing Slot) -> R) -> R {
        if index == 0 { return body(first) }
        return rest.withUnsafeBufferPointer { body($0[index - 1]) }
    }

    func state(_ index: Int) -> Slot.State { readSlot(index) { $0.state } }
    func isObserver(_ index: Int) -> Bool { readSlot(index) { $0.isObserver } }
    func upstream(_ index: Int) -> _CancelKey? { readSlot(index) { $0.upstream } }
    func waitsBehindObserver(_ index: Int) -> Bool? { readSlot(index) { $0.waitsBehindObserver } }
    private func generation(_ index: Int) -> UInt32 { readSlot(index) { $0.generation } }

    func isListed(_ index: Int) -> Bool {
        if case .listed = state(index) { return true }
        return false
    }

    /// The slot of `key` if it is still the reservation `key` names.
    func index(of key: _CancelKey) -> Int? {
        let index = Int(key.index)
        guard index < slotCount, generation(index) == key.generation else { return nil }
        if case .free = state(index) { return nil }
        return index
    }

    /// The slot of `key` if it is listed.
    func listedIndex(of key: _CancelKey) -> Int? {
        guard let index = index(of: key), isListed(index) else { return nil }
        return index
    }

    func isListed(_ key: _CancelKey) -> Bool { listedIndex(of: key) != nil }

    // MARK: Changing a slot

    /// Moves slot `index` to `state` (not `free`: see `free`), keeping `listedCount`.
    @inline(__always)
    mutating func setState(_ index: Int, _ state: Slot.State) {
        if isListed(index) { listedCount -= 1 }
        if case .listed = state { listedCount += 1 }
        withSlot(index) { $0.state = state }
    }

    /// Lists the reserved slot `index`, whose promise is `target`, in one access to the slot.
    mutating func listReserved(_ index: Int, target: any CancelTarget) {
        withSlot(index) { slot in
            guard case .reserved = slot.state else { preconditionFailure("SlotTable.listReserved: not reserved") }
            slot.contents.target = target
            slot.state = .listed
        }
        listedCount += 1
    }

    /// Sets the promise slot `index` rejects when its chain is cancelled.
    mutating func setTarget(_ index: Int, _ target: any CancelTarget) {
        withSlot(index) { $0.contents.target = target }
    }

    /// Adds `link` to what slot `index` cancels with it.
    mutating func addLink(_ index: Int, _ link: CancelLink) {
        withSlot(index) { $0.contents.link = CancelLink.adding(link, to: $0.contents.link) }
    }

    mutating func setWaitsBehindObserver(_ index: Int, _ value: Bool) {
        withSlot(index) { $0.waitsBehindObserver = value }
    }

    /// Takes what slot `index` holds, leaving it empty.
    mutating func take(_ index: Int) -> MemberContents {
        var taken = MemberContents()
        withSlot(index) { swap(&taken, &$0.contents) }
        return taken
    }

    // MARK: Reserving and freeing

    /// Reserves a slot for a new member.
    mutating func reserve(upstream: _CancelKey?, isObserver: Bool, cancelBody: (() -> Void)?) -> _CancelKey {
        let generation = nextGeneration
        nextGeneration &+= 1
        let index: Int
        if let reused = popFreeSlot() {
            index = reused
        } else if slotCount == 0 {
            index = 0
            slotCount = 1
        } else {
            index = slotCount
            rest.append(.empty)
            slotCount += 1
        }
        // Filled in place: a free slot is empty, so nothing is copied or released.
        withSlot(index) { slot in
            slot.state = .reserved
            slot.generation = generation
            slot.isObserver = isObserver
            slot.upstream = upstream
            slot.contents.cancelBody = cancelBody
        }
        inUse += 1
        if isObserver { observersInUse += 1 }
        return _CancelKey(index: UInt32(index), generation: generation)
    }

    /// A free slot to reuse, if the free list has one that is still free and in the table.
    private mutating func popFreeSlot() -> Int? {
        while let candidate = freeSlots.popLast() {
            let index = Int(candidate)
            if index < slotCount, case .free = state(index) { return index }
        }
        return nil
    }

    /// Frees slot `index`, whose contents were taken. The array is released once every slot is
    /// free; free slots at the end of the table are dropped from it (a long-lived chain whose
    /// newer members settled gives their storage back); others go on the free list.
    mutating func free(_ index: Int) {
        if isObserver(index) { observersInUse -= 1 }
        if isListed(index) { listedCount -= 1 }
        withSlot(index) { $0 = .empty }
        inUse -= 1
        if inUse == 0 {
            first = .empty
            rest = []
            slotCount = 0
            freeSlots = []
            return
        }
        if index == slotCount - 1 {
            dropFreeSlotsAtTheEnd()
        } else {
            freeSlots.append(Int32(index))
            if freeSlots.count > 2 * (slotCount - inUse) + 16 { compactFreeSlots() }
        }
    }

    /// Drops the free slots at the end of the table (each slot is dropped at most once per time
    /// it was added: O(1) amortised), and gives back the array's storage once it is less than a
    /// quarter used (a new buffer of twice the count: O(1) amortised per slot dropped). Their
    /// entries on the free list become stale.
    private mutating func dropFreeSlotsAtTheEnd() {
        while slotCount > 1, case .free = state(slotCount - 1) {
            rest.removeLast()
            slotCount -= 1
        }
        if rest.capacity > 64, rest.count < rest.capacity / 4 {
            var smaller: [Slot] = []
            smaller.reserveCapacity(2 * rest.count)
            smaller.append(contentsOf: rest)
            rest = smaller
        }
        if freeSlots.count > 2 * (slotCount - inUse) + 16 { compactFreeSlots() }
    }

    /// Rebuilds the free list without stale or repeated entries. Runs once the list could be
    /// more than half stale, so it costs O(1) amortised per entry added.
    private mutating func compactFreeSlots() {
        var seen = Set<Int32>()
        var kept: [Int32] = []
        kept.reserveCapacity(slotCount - inUse)
        for candidate in freeSlots {
            let index = Int(candidate)
            guard index < slotCount, case .free = state(index), seen.insert(candidate).inserted else { continue }
            kept.append(candidate)
        }
        freeSlots = kept
    }
}
