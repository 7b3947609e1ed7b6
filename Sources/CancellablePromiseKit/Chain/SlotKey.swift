/// A slot's place in a `SlotTable`: its index, and the generation of the reservation that took
/// it. Generations count up across the whole table (wrapping in 32 bits), so a key kept after its
/// entry left (by a `CancellablePromise`, a step downstream, a bag's caller, a follower) names no
/// later entry in the same slot, even once an emptied table gave its slots back.
@usableFromInline
struct SlotKey: Equatable, Sendable {
    @usableFromInline let slot: UInt32
    @usableFromInline let generation: UInt32

    @inlinable init(slot: UInt32, generation: UInt32) {
        self.slot = slot
        self.generation = generation
    }

    /// The key of something that never had a slot (a promise made settled): names no slot.
    @inlinable static var none: SlotKey { SlotKey(slot: .max, generation: 0) }

    /// The key packed in one word (as a settle notification carries it).
    init(packed: UInt64) {
        slot = UInt32(truncatingIfNeeded: packed >> 32)
        generation = UInt32(truncatingIfNeeded: packed)
    }

    var packed: UInt64 { UInt64(slot) << 32 | UInt64(generation) }
}
