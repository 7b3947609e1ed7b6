// A slot table with a free list, keyed by slot and ticket: what a bag's entries and a shared
// promise's followers are kept in. Adding and removing cost O(1) in any order, the count is
// stored, and the table never holds more slots than entries were present at once.

/// An entry's place in a `KeyedSlots`: its slot, and the ticket the entry got when it was added.
/// Tickets count up across the whole table (wrapping in 32 bits), so a key kept after its entry
/// left never names a later entry in the same slot, even once an emptied table gave its slots
/// back: a key is only used by the one remover of its entry.
struct SlotKey: Equatable, Sendable {
    let slot: UInt32
    let ticket: UInt32

    init(slot: UInt32, ticket: UInt32) {
        self.slot = slot
        self.ticket = ticket
    }

    /// The key packed in one word (as a settle listener carries it).
    init(packed: UInt64) {
        slot = UInt32(truncatingIfNeeded: packed >> 32)
        ticket = UInt32(truncatingIfNeeded: packed)
    }

    var packed: UInt64 { UInt64(slot) << 32 | UInt64(ticket) }
}

/// Entries in slots reused through a free list. An emptied table keeps up to `keptWhenEmpty`
/// slots (a table that holds one entry at a time does not allocate each time) and gives the
/// rest back.
struct KeyedSlots<Element> {
    private struct Slot {
        /// The entry; `nil` while the slot is free.
        var element: Element?
        var ticket: UInt32
        /// The next free slot while this one is free; -1 ends the list.
        var nextFree: Int32
    }

    private var slots: [Slot] = []
    private var firstFree: Int32 = -1
    private var lastTicket: UInt32 = 0
    private let keptWhenEmpty: Int
    /// The number of entries.
    private(set) var count = 0

    init(keptWhenEmpty: Int) {
        self.keptWhenEmpty = keptWhenEmpty
    }

    /// Slots allocated, free or not (for tests of the bound).
    var slotCount: Int { slots.count }

    mutating func add(_ element: Element) -> SlotKey {
        count += 1
        lastTicket &+= 1
        if firstFree >= 0 {
            let index = Int(firstFree)
            firstFree = slots[index].nextFree
            slots[index].element = element
            slots[index].ticket = lastTicket
            return SlotKey(slot: UInt32(index), ticket: lastTicket)
        }
        precondition(slots.count < Int(Int32.max), "KeyedSlots: too many entries at once")
        slots.append(Slot(element: element, ticket: lastTicket, nextFree: -1))
        return SlotKey(slot: UInt32(slots.count - 1), ticket: lastTicket)
    }

    /// The entry `key` names, if it is still there.
    func element(_ key: SlotKey) -> Element? {
        let index = Int(key.slot)
        guard index < slots.count, slots[index].ticket == key.ticket else { return nil }
        return slots[index].element
    }

    /// Whether the entry `key` names is still there.
    func contains(_ key: SlotKey) -> Bool {
        let index = Int(key.slot)
        return index < slots.count && slots[index].ticket == key.ticket && slots[index].element != nil
    }

    /// Removes the entry `key` names and returns it; `nil` if it left already.
    mutating func remove(_ key: SlotKey) -> Element? {
        let index = Int(key.slot)
        guard index < slots.count, slots[index].ticket == key.ticket, let element = slots[index].element else {
            return nil
        }
        count -= 1
        if count == 0, slots.count > keptWhenEmpty {
            slots = []
            firstFree = -1
            return element
        }
        slots[index].element = nil
        slots[index].nextFree = firstFree
        firstFree = Int32(index)
        return element
    }

    /// Empties the table and returns every entry, in slot order.
    mutating func removeAll() -> [Element] {
        var elements: [Element] = []
        elements.reserveCapacity(count)
        for slot in slots {
            if let element = slot.element { elements.append(element) }
        }
        slots = []
        firstFree = -1
        count = 0
        return elements
    }

    /// Calls `body` with every entry, in slot order, as the table goes: for a table taken out
    /// whole (no array of the entries is made).
    consuming func forEachElement(_ body: (Element) -> Void) {
        for slot in slots {
            if let element = slot.element { body(element) }
        }
    }
}
