import PromiseCore

// MARK: - Actions

/// What an event of `ChainState` leaves to do after the storage lock is released: follow links
/// to the chains they reach, call cancel closures, run the handlers released by the rejections,
/// and release whatever members held.
///
/// The package's one way to decide under a lock and act after it: a state machine's event
/// decides with the lock held and hands back what to do; the object that owns the lock runs it
/// after unlocking (`SharedWork`, the token and retry machines return a small value per event).
/// A chain's events record into the one `ChainActions` value of the storage's locked section
/// instead of returning one each: one section may cover several tables (a joined group) and a
/// cancel then follows links into other chains, adding to the same value; returning a value
/// from each event moved this value through every call and cost 9-12 % of a single `cancel()`
/// (measured with callgrind). Only what must be done is recorded here: the inputs of an event
/// (its error, call site, a chain links must not reach) are its parameters.
///
/// Two events have a common case with nothing to record, decided without a `ChainActions` at all
/// (`ChainState.listIfActive`, `linkIfWaiting`), and a member that settled is handed back as a
/// `LeftMember` to release: they are the events of every chain link, and making and dropping an
/// empty value for each cost about 50 instructions a link.
///
/// Rejecting is the one step that acts under the lock (`reject`): it is what makes every pending
/// promise of the chain rejected before `cancel()` returns, so nothing a cancel closure causes
/// later can change an outcome already decided.
struct ChainActions {
    // The first of each kind is kept inline: listing or settling one member, and cancelling a
    // chain of one member (the common cases), record without allocating. Everything else goes
    // to `more`, made on first use. Recording happens in place: a value held by an optional
    // would be copied on every access.
    private var singleCall: (() -> Void)?
    /// The first rejection's released handlers (`.none` until there is one).
    private var single: ReleasedHandlers = .none
    /// The first member contents to release.
    private var firstDropped: MemberContents?
    private var more: MoreActions?
    /// Whether anything was recorded.
    private(set) var isEmpty = true
    #if DEBUG
    /// What each record call added, in order (debug builds only): what an event decided, for
    /// tests to compare.
    private(set) var recorded: [ChainAction] = []
    #endif

    init() {}

    private var hasSingle: Bool {
        if case .none = single { return false }
        return true
    }

    private mutating func makeMore() -> MoreActions {
        if let more { return more }
        let made = MoreActions()
        more = made
        return made
    }

    /// Rejects a member's promise (`taken.target`, known to its attachment `home` by `key`)
    /// with `error`, and takes its cancel closure and links (to call and follow if the promise
    /// was still pending, to release otherwise). Runs under the lock: this is what makes every
    /// pending promise of the chain rejected before `cancel()` returns, whatever its cancel
    /// closure does later. Returns whether the member's settle notification was taken care of
    /// here (its slot can be freed); `false` when the promise had settled on its own first, so
    /// that its own notification is still to come.
    @inline(__always)
    mutating func reject(
        _ taken: consuming MemberContents, home: ObjectIdentifier, key: UInt32, with error: any Error
    ) -> Bool {
        isEmpty = false
        let body = taken.cancelBody
        let link = taken.link
        guard let target = taken.target else {
            preconditionFailure("ChainActions.reject: a listed member has its promise")
        }
        let rejected = target.settle(rejected: error)
        #if DEBUG
        if case .none = rejected {
            recorded += [.reject(slot: key, wasPending: false), .release(.init(taken))]
        } else {
            recorded.append(.reject(slot: key, wasPending: true))
        }
        #endif
        let unblocked: ReleasedHandlers
        // Consumed, so that the payload moves into what is kept instead of being copied.
        switch consume rejected {
        case .none:
            // Settled on its own first: the closure is not called, a settled promise links
            // nothing; its own settle notification finishes the member.
            drop(.init(cancelBody: body, link: link, target: target))
            return false
        case .settled:
            // Nothing to run. The promise goes with the actions, released after the lock (its
            // step may hold a body whose captures run user code as they go).
            unblocked = .settled
            drop(.init(cancelBody: nil, link: nil, target: target))
        case .released(let source, let handlers, let attachment, let releasedKey):
            if let attachment, ObjectIdentifier(attachment) == home, releasedKey == key {
                // Left the chain here, under the lock: `drain` does not tell the chain again
                // (it would take the lock again).
                unblocked = .released(source: source, handlers: handlers, attachment: nil, key: 0)
            } else {
                unblocked = .released(source: source, handlers: handlers, attachment: attachment, key: releasedKey)
            }
        }
        if let body { call(body) }
        if let link { follow(link, error: error) }
        if !hasSingle { single = consume unblocked } else { makeMore().released.append(consume unblocked) }
        return true
    }

    /// Releases what a member held, after the lock.
    mutating func release(_ taken: MemberContents) {
        #if DEBUG
        if !taken.isEmpty { recorded.append(.release(.init(taken))) }
        #endif
        if !taken.isEmpty { drop(taken) }
    }

    /// Releases `link` after the lock.
    mutating func release(_ link: CancelLink) {
        #if DEBUG
        recorded.append(.release(.link))
        #endif
        drop(.init(cancelBody: nil, link: link, target: nil))
    }

    private mutating func drop(_ released: MemberContents) {
        isEmpty = false
        if case .none = firstDropped { firstDropped = released } else { makeMore().dropped.append(released) }
    }

    /// Makes room for `count` more rejections at once (a chain's worth), instead of growing the
    /// list one reallocation at a time. Growth stays geometric: a cancel that follows many links
    /// calls this once per linked chain, and reserving exactly what each one needs would copy
    /// the whole growing list every time (quadratic in the chains reached).
    mutating func reserveRejections(_ count: Int) {
        guard count > 1 else { return }
        let more = makeMore()
        let needed = more.released.count + count
        guard needed > more.released.capacity else { return }
        more.released.reserveCapacity(max(needed, 2 * more.released.capacity))
        #if DEBUG
        ChainActions.rejectionListGrowths.withLock { $0 += 1 }
        #endif
    }

    /// Cancels the chains `link` reaches with `error`.
    mutating func follow(_ link: CancelLink, error: any Error) {
        #if DEBUG
        recorded.append(.follow(.init(link), error: String(describing: error)))
        #endif
        isEmpty = false
        makeMore().links.append((link, error))
    }

    /// Takes the next link to follow.
    mutating func nextLink() -> (link: CancelLink, error: any Error)? {
        more?.links.popLast()
    }

    /// Completes `token`, a running body's token (see `ChainState.runningBodyToken`), after the
    /// lock: its `onCancel` handlers run right after the cancel closures if `cancelled`.
    mutating func complete(_ token: CancellationToken, cancelled: Bool) {
        #if DEBUG
        recorded.append(.completeToken(cancelled: cancelled))
        #endif
        isEmpty = false
        makeMore().tokens.append((token, cancelled))
    }

    /// Calls `body` (a cancel closure) after the lock.
    mutating func call(_ body: @escaping () -> Void) {
        #if DEBUG
        recorded.append(.call)
        #endif
        isEmpty = false
        if case .none = singleCall { singleCall = body } else { makeMore().calls.append(body) }
    }

    /// Calls the cancel closures, then runs the released handlers, then releases the rest.
    mutating func run() {
        singleCall?()
        singleCall = nil
        if let more {
            for body in more.calls { body() }
            more.calls = []
            if !more.tokens.isEmpty {
                var tokens: [(token: CancellationToken, cancelled: Bool)] = []
                swap(&tokens, &more.tokens)
                for (token, cancelled) in tokens { token.complete(cancelled: cancelled) }
            }
        }
        if hasSingle {
            var first = ReleasedHandlers.none
            swap(&first, &single)
            drain(consuming: first)
        }
        if let more, !more.released.isEmpty {
            // Each value is swapped out, in order, and handed over: iterating or popping would
            // copy every `ReleasedHandlers` (a retain and a release per reference in it).
            var list: [ReleasedHandlers] = []
            swap(&list, &more.released)
            for index in list.indices {
                var unblocked = ReleasedHandlers.none
                swap(&unblocked, &list[index])
                drain(consuming: unblocked)
            }
        }
        // Links are released through `LinkRelease` (without recursing), the rest as it goes.
        var links: [CancelLink] = []
        if let link = firstDropped?.link {
            firstDropped?.link = nil
            links.append(link)
        }
        firstDropped = nil
        if let more, !more.dropped.isEmpty {
            for index in more.dropped.indices {
                if let link = more.dropped[index].link {
                    links.append(link)
                    more.dropped[index].link = nil
                }
            }
            more.dropped = []
        }
        if !links.isEmpty { LinkRelease.release(&links) }
    }

    #if DEBUG
    /// How many times `reserveRejections` grew a list, in this process (debug builds only): tests
    /// count the work a cancel does instead of timing it.
    package static let rejectionListGrowths = Locked(0)
    #endif
}

/// What `ChainActions` records beyond the first of each kind: made on first use, by the cancel of
/// a chain of several members, a link.
private final class MoreActions {
    // No dynamic exclusivity checks (they cost about 100 instructions per member of a cancelled
    // chain): the object belongs to one `ChainActions` value, used by one thread at a time.
    @exclusivity(unchecked) var calls: [() -> Void] = []
    @exclusivity(unchecked) var released: [ReleasedHandlers] = []
    /// Links to follow, each with the error the chains it reaches are cancelled with.
    @exclusivity(unchecked) var links: [(link: CancelLink, error: any Error)] = []
    @exclusivity(unchecked) var dropped: [MemberContents] = []
    /// Running bodies' tokens to complete, cancelled or not.
    @exclusivity(unchecked) var tokens: [(token: CancellationToken, cancelled: Bool)] = []
}
