import PromiseCore

// The rule of a running body's token (`CancellationToken.current`), decided by the chain's
// machine as its other rules are: the token of a member whose body runs is made when the body
// first reads it, cancelled with the chain (or with the member alone, an `autoCancel` loser)
// while the member is pending, and completed "not cancelled" when the member leaves the chain on
// its own (its promise settled) or nothing can cancel the chain any more (abandoned). A chain
// whose bodies never read it keeps no token and pays one word of state.

extension ChainState {
    /// The slot a body uses before its promise is a member (the body of a cancellable promise's
    /// initialiser, run before the promise is listed): its token moves to the member's slot when
    /// the promise is attached (`attach`).
    /// (`CancelStorage._runFirstBody` spells it `UInt32.max`: it is inlined into clients.)
    static let firstBodySlot = UInt32.max

    /// The token of the member whose body runs: slot `slot` of `home`'s table, whose promise is
    /// `step` (`nil` and `firstBodySlot`: a body run before its promise is listed). In an active
    /// chain, the member's token, made on the first read; `.cancelled` if the member is no
    /// longer listed with that promise (a running body's step leaves only when a cancellation
    /// rejects it), checked before the stored token is looked up: a member cancelled alone frees
    /// its slot at once, and a later member may hold that slot and a token by now; `.cancelled`
    /// in a cancelled chain, `.none` in an abandoned one.
    mutating func runningBodyToken(slot: UInt32, step: ObjectIdentifier?, in home: MemberHome) -> RunningBodyToken {
        switch phase {
        case .cancelled: return .cancelled
        case .abandoned: return .none
        case .absorbed: preconditionFailure("ChainState.runningBodyToken: ask the root")
        case .active: break
        }
        if let step {
            let isListedStep = readTable(home) { table -> Bool in
                let index = Int(slot)
                guard slot != ChainState.firstBodySlot, index < table.slotCount, table.isListed(index) else {
                    return false
                }
                return table.targetIdentity(index) == step
            }
            guard isListedStep else { return .cancelled }
        } else if slot != ChainState.firstBodySlot {
            return .cancelled
        }
        let key = BodyTokenKey(storage: home.storage, slot: slot)
        if let token = bodyTokens?[key] { return .token(token) }
        let made = CancellationToken()
        if bodyTokens == nil { bodyTokens = [:] }
        bodyTokens![key] = made
        return .token(made)
    }

    /// Takes the token of the member of slot `slot` in `home`'s table, if a body read one. Out of
    /// line: the events of every chain link call it only once a body has read a token.
    @inline(never)
    mutating func takeBodyToken(_ slot: UInt32, in home: MemberHome) -> CancellationToken? {
        let token = bodyTokens?.removeValue(forKey: BodyTokenKey(storage: home.storage, slot: slot))
        // A small table is kept (a chain whose bodies read tokens reads more); a large one that
        // is mostly empty is made again at its size, so a long-lived chain keeps what is live.
        if let tokens = bodyTokens, tokens.capacity > 16, tokens.count * 4 < tokens.capacity {
            bodyTokens =
                tokens.isEmpty ? nil : BodyTokens(minimumCapacity: tokens.count * 2).merging(tokens) { a, _ in a }
        }
        return token
    }

    /// Completes every member's token "not cancelled" after the lock: the chain was abandoned.
    mutating func endBodyTokens(into actions: inout ChainActions) {
        guard let tokens = bodyTokens else { return }
        bodyTokens = nil
        for token in tokens.values { actions.complete(token, cancelled: false) }
    }

    /// The first member of `home`'s table was attached as slot `slot` (see `attach`): the token
    /// its initialiser's body read, if any, becomes the member's; if the promise had settled
    /// first, it completes "not cancelled". (Only a new storage's first member can have one:
    /// nothing else knows the storage while that body runs.)
    mutating func adoptFirstBodyToken(
        as slot: UInt32, in home: MemberHome, attached: Bool, into actions: inout ChainActions
    ) {
        guard let token = takeBodyToken(ChainState.firstBodySlot, in: home) else { return }
        switch phase {
        case .active where attached:
            bodyTokens = bodyTokens ?? [:]
            bodyTokens![BodyTokenKey(storage: home.storage, slot: slot)] = token
        case .cancelled:
            actions.complete(token, cancelled: true)
        default:
            actions.complete(token, cancelled: false)
        }
    }
}
