import PromiseCore

// The walks of `ChainState` over one table of members: cancelling it, abandoning it, and what
// each does to one member. Decided under the lock of the chain's root, as every event is.

// MARK: - Members of one table

extension ChainState {
    /// Cancels the members of `table` (the table of `home`) with `error`: rejects every listed
    /// promise that does not wait behind an observer; the others settle when the observer
    /// ahead of them passes the cancellation on (chain order), and what they link to is
    /// cancelled now (see `cancelMember`). Reserved members are settled when they are listed.
    static func cancelTable(
        _ table: inout MemberTable, home: ObjectIdentifier, with error: any Error, into effects: inout ChainEffects
    ) {
        guard table.listedCount > 0 else { return }
        effects.reserveRejections(table.listedCount)
        var index = 0
        if table.observersInUse > 0 {
            while index < table.slotCount {
                if table.isListed(index) { markWaitingBehindObserver(index, in: &table) }
                index += 1
            }
            index = 0
        }
        // `free` may release the array once the last slot is freed: `slotCount` is read again.
        while index < table.slotCount {
            if table.isListed(index) {
                let rejecting = table.waitsBehindObserver(index) != true
                cancelMember(index, in: &table, home: home, with: error, rejecting: rejecting, into: &effects)
            }
            index += 1
        }
    }

    /// Abandons the listed members of `table`: their cancel closures and links are released
    /// uncalled; their slots are freed by their promises' settle notifications. Their running
    /// bodies' tokens complete "not cancelled" (see `handlesGone`).
    static func abandonTable(_ table: inout MemberTable, into effects: inout ChainEffects) {
        if let token = table.takeFirstBodyToken() { effects.complete(token, cancelled: false) }
        guard table.listedCount > 0 else { return }
        var index = 0
        while index < table.slotCount {
            if table.isListed(index) {
                effects.release(table.take(index))
                table.detach(index)
            }
            index += 1
        }
    }

    /// A cancellation reached the listed member of slot `index` of `table` (the table of `home`):
    /// the one place that learns whether its promise was still pending, and decides what follows
    /// from it.
    ///
    /// `rejecting`: the promise is rejected with `error` here, under the lock (what makes every
    /// pending promise of the chain rejected before `cancel()` returns, whatever a cancel closure
    /// does later); if it was pending, its cancel closure is called and its links followed after
    /// the lock, the handlers its rejection released run, and its slot is freed (its settle
    /// notification was taken care of here); if it had settled on its own first, what it held is
    /// released uncalled (a settled promise links nothing) and the slot is left detached for
    /// that notification. Otherwise the member waits behind an observer, which settles it in
    /// chain order: what it links to is cancelled now, the rest released, the slot detached.
    /// Either way its running body's token is cancelled if its promise was pending, and spared
    /// otherwise (its settle notification completes it "not cancelled").
    @inline(__always)
    static func cancelMember(
        _ index: Int, in table: inout MemberTable, home: ObjectIdentifier, with error: any Error, rejecting: Bool,
        into effects: inout ChainEffects
    ) {
        var taken = table.take(index)
        let wasPending: Bool
        if rejecting {
            // Moved out (no reference taken): put back unless the rejection released it.
            guard let target = taken.target.take() else {
                preconditionFailure("ChainState.cancelMember: a listed member has its promise")
            }
            let settled = target.settle(rejected: error)
            // Consumed, so that the payload moves into what is kept instead of being copied.
            switch consume settled {
            case .none:
                wasPending = false
                taken.target = target
            case .settled:
                wasPending = true
                taken.target = target
                // Nothing to run; the promise is released after the lock (its step may hold a
                // body whose captures run user code as they go).
                effects.runHandlers(.settled)
            case .released(let source, let handlers, let attachment, let key):
                // `source` is the promise: the handlers keep it until they have run.
                wasPending = true
                if let attachment, ObjectIdentifier(attachment) == home, key == UInt32(index) {
                    // This member left the chain here, under the lock: `drain` does not tell the
                    // chain again (it would take the lock again).
                    effects.runHandlers(.released(source: source, handlers: handlers, attachment: nil, key: 0))
                } else {
                    effects.runHandlers(.released(source: source, handlers: handlers, attachment: attachment, key: key))
                }
            }
            if wasPending {
                if let body = taken.cancelBody.take() { effects.call(body) }
                if let link = taken.link.take() { effects.follow(link, error: error) }
            }
        } else {
            // Asked only if its body read a token (it takes the promise's lock): nothing else
            // depends on it here.
            wasPending = taken.token == nil ? true : (taken.target?.isPending ?? true)
            if let link = taken.link.take() { effects.follow(link, error: error) }
        }
        if let token = taken.token.take() {
            if wasPending {
                effects.complete(token, cancelled: true)
            } else {
                // Spared: the member's settle notification completes it "not cancelled".
                table.setBodyToken(index, token)
            }
        }
        effects.release(taken)
        if rejecting && wasPending {
            table.free(index)
        } else {
            table.detach(index)
        }
    }

    /// Whether slot `index` is an observer or follows one that is still listed (in this
    /// cancellation pass); computed for a whole table in linear time by remembering the answer
    /// per slot.
    private static func markWaitingBehindObserver(_ index: Int, in table: inout MemberTable) {
        // Common case without allocating: the slot is decided by itself or by its upstream,
        // already marked.
        if table.waitsBehindObserver(index) != nil { return }
        if table.isObserver(index) {
            table.setWaitsBehindObserver(index, true)
            return
        }
        guard let upstreamKey = table.upstream(index), let upstreamIndex = table.listedIndex(of: upstreamKey) else {
            table.setWaitsBehindObserver(index, false)
            return
        }
        if let known = table.waitsBehindObserver(upstreamIndex) {
            table.setWaitsBehindObserver(index, known)
            return
        }
        var path: [Int] = []
        var current = index
        var answer: Bool
        while true {
            if let known = table.waitsBehindObserver(current) {
                answer = known
                break
            }
            if table.isObserver(current) {
                answer = true
                table.setWaitsBehindObserver(current, true)
                break
            }
            guard let key = table.upstream(current), let next = table.listedIndex(of: key) else {
                answer = false
                table.setWaitsBehindObserver(current, false)
                break
            }
            path.append(current)
            current = next
        }
        for waiting in path { table.setWaitsBehindObserver(waiting, answer) }
    }
}
