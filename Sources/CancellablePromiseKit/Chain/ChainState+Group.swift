extension ChainState {
    /// Whether `storage` belongs to this chain, whose root is `root`: the root itself, or an
    /// absorbed storage that still holds a handle or lists members. (An idle entry may outlive
    /// its storage, whose identity a new storage of another chain can then take.)
    func contains(_ storage: ObjectIdentifier, root: ObjectIdentifier) -> Bool {
        storage == root || group?.tables.isLive(storage) == true
    }

    /// The storages a root absorbed (directly or through the storages it absorbed).
    struct Group {
        /// Their tables (they list members of this chain too), and which of them count as a
        /// handle of the storage that absorbed them, until their own last handle goes (see
        /// `handlesGone`). An entry with no slot in use and no hold may be dropped
        /// (`pruneGroup`); its table is made again when its storage reserves a slot.
        var tables = AbsorbedTables()
        /// How many times an absorbed table was found empty (when its storage was absorbed, or
        /// after an event in it) since the last pass of `pruneGroup`: a pass runs only when many
        /// may be empty, and a root whose absorbed storages are all busy is never walked.
        var emptied = 0
    }
}
