/// What a token event leaves to do once the token's lock is released.
struct TokenActions {
    /// Entries to run, with the token's outcome.
    var run: [TokenEntry] = []
    var cancelled = false
    /// Links to remove from the operands of a completed derived token.
    var leave = OperandLinks()
    /// Entries to release (removed or swept out), with what they captured.
    var drop: [TokenEntry] = []
    /// The entry list's old storage after a compaction.
    var dropStorage: [TokenEntry] = []
    /// An operand record a derived token forgot (the operand is released with it).
    var forgotten: OperandLink?
    /// The token's reference to itself, given up.
    var release: CancellationToken?

    /// Runs the entries, leaves the operands, then releases what was dropped. Outside every
    /// lock.
    func perform() {
        for entry in run { entry.run(cancelled: cancelled) }
        leave.leave()
        withExtendedLifetime((drop, dropStorage, forgotten, release)) {}
    }
}
