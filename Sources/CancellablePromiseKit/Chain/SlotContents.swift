/// What a slot of a `SlotTable` holds. `init()` makes the contents of a free slot: holding
/// nothing, so freeing a slot releases what it held.
protocol SlotContents {
    init()
}

extension Optional: SlotContents {
    init() { self = nil }
}
