/// What one slot of a `MemberTable` holds.
struct MemberSlot: SlotContents {
    enum State {
        /// Reserved for a promise being made or attached, and listed before the lock it was
        /// reserved under is released.
        case reserved
        /// Listed: its promise is pending and a cancellation rejects it.
        case listed
        /// Left the chain (cancelled, abandoned, or left by a cancellation while its promise had
        /// settled on its own): holds nothing, and is freed by its promise's settle notification.
        case detached
    }

    // With the table's own fields (free, generation), a slot is 80 bytes. A 64-byte layout (the
    // one-byte fields after the link's tag, the upstream key not optional) saved about 20
    // instructions per chain link but made the median of the 64,000-step promise loop row 20 %
    // slower (its fastest iterations were unchanged), so it was not kept.
    var state = State.reserved
    /// An observer (`ensure`, `ensureThen`, `tap`): see `ChainState.cancelTable`.
    var isObserver = false
    /// Scratch for a cancellation: whether the member waits behind an observer.
    var waitsBehindObserver: Bool?
    /// The step this one follows in the chain (in the same table).
    var upstream: SlotKey?
    var contents = MemberContents()

    init() {}
}
