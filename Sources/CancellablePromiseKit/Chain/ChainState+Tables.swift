import PromiseCore

// The walks of `ChainState` over one table of members: cancelling it, abandoning it, and what
// each does to one member. Decided under the lock of the chain's root, as every event is.

// MARK: - Members of one table

extension ChainState {
    /// Cancels the members of `table` (the table of `home`) with `error`: rejects every listed
    /// promise that does not wait behind an observer; the others settle when the observer
    /// ahead of them passes the cancellation on (chain order), and what they link to is
    /// cancelled now. Reserved members are settled when they are listed. The running-body
    /// token of each member reached (in `tokens`) is cancelled if its promise was still pending.
    static func cancelTable(
        _ table: inout MemberTable, home: ObjectIdentifier, with error: any Error, tokens: inout BodyTokens?,
        into actions: inout ChainActions
    ) {
        guard table.listedCount > 0 else { return }
        actions.reserveRejections(table.listedCount)
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
                if table.waitsBehindObserver(index) == true {
                    detachCancellingLinks(index, in: &table, home: home, with: error, tokens: &tokens, into: &actions)
                } else {
                    reject(index, in: &table, home: home, with: error, tokens: &tokens, into: &actions)
                }
            }
            index += 1
        }
    }

    /// Abandons the listed members of `table`: their cancel closures and links are released
    /// uncalled; their slots are freed by their promises' settle notifications.
    static func abandonTable(_ table: inout MemberTable, into actions: inout ChainActions) {
        guard table.listedCount > 0 else { return }
        var index = 0
        while index < table.slotCount {
            if table.isListed(index) {
                actions.release(table.take(index))
                table.detach(index)
            }
            index += 1
        }
    }

    /// Detaches the member of slot `index` without rejecting its promise (something upstream
    /// will settle it), cancelling with `error` what it links to and releasing the rest after
    /// the lock. Its slot is freed by its promise's settle notification. Its running-body token
    /// (in `tokens`) is cancelled if its promise is still pending.
    static func detachCancellingLinks(
        _ index: Int, in table: inout MemberTable, home: ObjectIdentifier, with error: any Error,
        tokens: inout BodyTokens?, into actions: inout ChainActions
    ) {
        var taken = table.take(index)
        if tokens?.isEmpty == false {
            cancelToken(
                of: index, home: home, wasPending: taken.target?.isPending ?? true, tokens: &tokens, into: &actions)
        }
        if let link = taken.link {
            taken.link = nil
            actions.follow(link, error: error)
        }
        actions.release(taken)
        table.detach(index)
    }

    /// Rejects the promise of slot `index` under the lock (the one named step that acts under
    /// it: see `ChainActions.reject`); frees the slot if its settle notification was taken care
    /// of there, otherwise leaves it detached for that notification. Its running-body token (in
    /// `tokens`) is cancelled if the rejection took effect; if the promise had settled on its own
    /// first, the token is left for its settle notification (which completes it "not cancelled").
    @inline(__always)
    static func reject(
        _ index: Int, in table: inout MemberTable, home: ObjectIdentifier, with error: any Error,
        tokens: inout BodyTokens?, into actions: inout ChainActions
    ) {
        let notified = actions.reject(table.take(index), home: home, key: UInt32(index), with: error)
        if tokens?.isEmpty == false {
            cancelToken(of: index, home: home, wasPending: notified, tokens: &tokens, into: &actions)
        }
        if notified {
            table.free(index)
        } else {
            table.detach(index)
        }
    }

    /// Whether slot `index` is an observer or follows one that is still listed (in this
    /// cancellation pass); computed for a whole table in linear time by remembering the answer
    /// per slot.
    fileprivate static func markWaitingBehindObserver(_ index: Int, in table: inout MemberTable) {
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

    /// The running-body token of the member of slot `index` in `home`'s table, reached by a
    /// cancellation: cancelled after the lock if its promise was pending (`wasPending`);
    /// otherwise left in `tokens` for the member's settle notification.
    static func cancelToken(
        of index: Int, home: ObjectIdentifier, wasPending: Bool, tokens: inout BodyTokens?,
        into actions: inout ChainActions
    ) {
        guard wasPending else { return }
        if let token = tokens?.removeValue(forKey: BodyTokenKey(storage: home, slot: UInt32(index))) {
            actions.complete(token, cancelled: true)
        }
    }
}
