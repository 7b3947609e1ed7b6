extension ChainState {
    /// What a join decided: the root `absorbed` forwards to `root` from now on, and counts as
    /// one of its handles while it has handles of its own if `countsAsHandle`.
    struct Absorption: Equatable {
        let absorbed: ObjectIdentifier
        let root: ObjectIdentifier
        let countsAsHandle: Bool
    }

    /// What `join` returns: the absorption, if the chains became one, for the storages to
    /// forward (with both roots locked), and what is left to do after the locks.
    struct Joined: ~Copyable {
        var absorption: Absorption?
        var outcome: ChainOutcome
    }
}
