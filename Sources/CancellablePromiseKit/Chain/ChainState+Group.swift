extension ChainState {
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
