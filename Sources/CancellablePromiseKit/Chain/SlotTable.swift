// The package's one slot table: an allocator with no policy of its own about what a slot means.
// It hands out slots named by a `SlotKey`, reuses them through a free list, gives storage back,
// and keeps the count of slots in use. A chain's members (`MemberTable`), a bag's entries and a
// shared promise's followers are kept in it. Adding and removing cost O(1) amortised in any
// order, and the table never holds many more slots than entries were present at once.

/// Slots reused through a free list. The first slot is stored inline, so a table with one entry
/// at a time allocates no array; the array is released once every slot is free, free slots at
/// the end are dropped, and the array's storage is given back once it is less than a quarter
/// used. Not thread-safe: its owner's lock guards it.
struct SlotTable<Contents: SlotContents> {
    private struct Slot {
        var isFree = true
        var generation: UInt32 = 0
        var contents = Contents()
    }

    private var first = Slot()
    private var rest: [Slot] = []
    /// Slots in use or on the free list (`first` counts when this is at least 1).
    private(set) var slotCount = 0
    /// Free slots to reuse, most recently freed last. An entry may be stale (its slot was
    /// dropped from the end of the table, or reused through another entry): `reserve` skips
    /// those, and `compactFreeSlots` drops them once they could be half of the list.
    private var freeSlots: [Int32] = []
    private var nextGeneration: UInt32 = 0
    /// Slots in use.
    private(set) var inUse = 0

    init() {}

    /// Slots allocated beyond the inline one (for tests).
    var capacity: Int { rest.capacity }

    // Slots are reached through these two helpers rather than a subscript with `_read` and
    // `_modify` accessors: those are coroutines, and one not inlined allocates its frame on
    // every access.

    /// Runs `body` on the contents of slot `index`, in place.
    @inline(__always)
    mutating func withContents<R>(_ index: Int, _ body: (inout Contents) -> R) -> R {
        if index == 0 { return body(&first.contents) }
        return body(&rest[index - 1].contents)
    }

    /// Reads the contents of slot `index`.
    @inline(__always)
    func readContents<R>(_ index: Int, _ body: (borrowing Contents) -> R) -> R {
        if index == 0 { return body(first.contents) }
        return rest.withUnsafeBufferPointer { body($0[index - 1].contents) }
    }

    @inline(__always)
    private mutating func withSlot<R>(_ index: Int, _ body: (inout Slot) -> R) -> R {
        if index == 0 { return body(&first) }
        return body(&rest[index - 1])
    }

    @inline(__always)
    private func readSlot<R>(_ index: Int, _ body: (borrowing Slot) -> R) -> R {
        if index == 0 { return body(first) }
        return rest.withUnsafeBufferPointer { body($0[index - 1]) }
    }

    /// Reads the contents of slot `index` if it is in use; `nil` if it is free.
    @inline(__always)
    func readInUse<R>(_ index: Int, _ body: (borrowing Contents) -> R) -> R? {
        readSlot(index) { $0.isFree ? nil : body($0.contents) }
    }

    /// Whether slot `index` (below `slotCount`) is free.
    func isFree(_ index: Int) -> Bool { readSlot(index) { $0.isFree } }

    /// The slot of `key` if it still holds the reservation `key` names.
    func index(of key: SlotKey) -> Int? {
        let index = Int(key.slot)
        guard index < slotCount else { return nil }
        let matches = readSlot(index) { !$0.isFree && $0.generation == key.generation }
        return matches ? index : nil
    }

    /// Takes a slot, filled by `fill` in place (a free slot holds nothing: nothing is copied or
    /// released), and returns its key.
    @inline(__always)
    mutating func reserve(_ fill: (inout Contents) -> Void) -> SlotKey {
        let generation = nextGeneration
        nextGeneration &+= 1
        return reserve(generation: generation, fill)
    }

    /// `reserve`, with a generation its owner counts (a chain counts one sequence for every table
    /// of its group, so that a table dropped while empty and made again never repeats one).
    @inline(__always)
    mutating func reserve(generation: UInt32, _ fill: (inout Contents) -> Void) -> SlotKey {
        let index: Int
        if !freeSlots.isEmpty, let reused = popFreeSlot() {
            index = reused
        } else if slotCount == 0 {
            index = 0
            slotCount = 1
        } else {
            precondition(slotCount < Int(Int32.max), "SlotTable.reserve: too many slots in use at once")
            index = slotCount
            rest.append(Slot())
            slotCount += 1
        }
        withSlot(index) { slot in
            slot.isFree = false
            slot.generation = generation
            fill(&slot.contents)
        }
        inUse += 1
        return SlotKey(slot: UInt32(index), generation: generation)
    }

    /// A free slot to reuse, if the free list has one that is still free and in the table.
    @inline(never)
    private mutating func popFreeSlot() -> Int? {
        while let candidate = freeSlots.popLast() {
            let index = Int(candidate)
            if index < slotCount, isFree(index) { return index }
        }
        return nil
    }

    /// Frees slot `index` (in use), releasing what it held in place. The array is released once
    /// every slot is free; free slots at the end of the table are dropped from it (a long-lived
    /// table whose newer entries left gives their storage back); others go on the free list.
    mutating func free(_ index: Int) {
        withSlot(index) { slot in
            slot.contents = Contents()
            slot.isFree = true
        }
        slotFreed(index)
    }

    /// Frees slot `index` (in use) as `free` does, and returns what it held.
    mutating func take(_ index: Int) -> Contents {
        var taken = Contents()
        withSlot(index) { slot in
            swap(&taken, &slot.contents)
            slot.isFree = true
        }
        slotFreed(index)
        return taken
    }

    /// Keeps the counts and the free list after slot `index` was freed.
    @inline(__always)
    private mutating func slotFreed(_ index: Int) {
        inUse -= 1
        if inUse == 0 {
            first = Slot()
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
        while slotCount > 1, isFree(slotCount - 1) {
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
            guard index < slotCount, isFree(index), seen.insert(candidate).inserted else { continue }
            kept.append(candidate)
        }
        freeSlots = kept
    }
}

// MARK: - A table of entries

/// The table as a keyed collection of entries (a bag's, a shared promise's followers): a slot
/// holds its entry, `nil` while free.
extension SlotTable {
    /// The number of entries.
    var count: Int { inUse }

    /// Adds `element` and returns its key.
    mutating func add<Element>(_ element: Element) -> SlotKey where Contents == Element? {
        reserve { $0 = element }
    }

    /// The entry `key` names, if it is still there.
    func element<Element>(_ key: SlotKey) -> Element? where Contents == Element? {
        guard let index = index(of: key) else { return nil }
        return readContents(index) { $0 }
    }

    /// Whether the entry `key` names is still there.
    func contains(_ key: SlotKey) -> Bool { index(of: key) != nil }

    /// Removes the entry `key` names and returns it; `nil` if it left already.
    mutating func remove<Element>(_ key: SlotKey) -> Element? where Contents == Element? {
        guard let index = index(of: key) else { return nil }
        return take(index)
    }

    /// Calls `body` with every entry, in slot order, consuming the table (its owner took it out
    /// whole under its lock, and runs `body` after it).
    consuming func forEachElement<Element>(_ body: (Element) -> Void) where Contents == Element? {
        var index = 0
        while index < slotCount {
            if let element = readInUse(index, { $0 }) ?? nil { body(element) }
            index += 1
        }
    }

    /// Empties the table and returns every entry, in slot order.
    mutating func removeAll<Element>() -> [Element] where Contents == Element? {
        var elements: [Element] = []
        elements.reserveCapacity(inUse)
        var index = 0
        while index < slotCount {
            if !isFree(index), let element = readContents(index, { $0 }) { elements.append(element) }
            index += 1
        }
        let generation = nextGeneration
        self = SlotTable()
        nextGeneration = generation
        return elements
    }
}
