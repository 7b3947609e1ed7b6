import PromiseCore

/// What an event of `ChainState` leaves to do after the storage's lock is released, beyond
/// releasing one member's contents (see `ChainOutcome`): the cancel closures to call, the links
/// to follow to the chains they reach, the handlers that rejecting pending promises released, the
/// running bodies' tokens to complete, whatever members held to release, and a handle to release.
///
/// Built by one event under the lock and returned in its `ChainOutcome`; run once by the storage
/// (`CancelStorage.perform`) after unlocking. Nothing is decided while it runs: which promise was
/// pending, what its rejection released and whose token is cancelled were decided by the event
/// (`ChainState.cancelMember`).
///
/// Not copyable: an event's effects have one owner, moved from the event to the storage and
/// consumed by `run`, so that returning them copies no reference (a copyable value was retained,
/// copied and released at each step, about 500 instructions a cancel, measured with callgrind; an
/// object per effect costs an allocation, about 900). The first call and the first rejection are
/// kept inline: cancelling a chain of one member allocates nothing. Everything else goes to
/// `more`, made on first use.
struct ChainEffects: ~Copyable {
    private var singleCall: (() -> Void)?
    /// The first rejection's released handlers (`.none` until there is one).
    private var single: ReleasedHandlers = .none
    private var more: MoreEffects?
    /// Whether an absorbed storage stops counting as a handle of the storage that absorbed it
    /// (see `ChainState.handlesGone`): that storage loses the handle.
    private(set) var releasesHold = false

    init() {}

    /// Whether there is nothing to do.
    var isEmpty: Bool { singleCall == nil && !hasSingle && more == nil && !releasesHold }

    private var hasSingle: Bool {
        if case .none = single { return false }
        return true
    }

    private mutating func makeMore() -> MoreEffects {
        if let more { return more }
        let made = MoreEffects()
        more = made
        return made
    }

    // MARK: Adding

    /// Runs `handlers`, what rejecting a pending promise under the lock released (its handlers,
    /// and the attachment to tell), after the cancel closures.
    mutating func runHandlers(_ handlers: consuming ReleasedHandlers) {
        if !hasSingle { single = consume handlers } else { makeMore().released.append(consume handlers) }
    }

    /// Releases what a member that left held; its running body's token, if any, is completed
    /// "not cancelled".
    mutating func release(_ taken: consuming MemberContents) {
        if let token = taken.token.take() { complete(token, cancelled: false) }
        if !taken.isEmpty { makeMore().dropped.append(taken) }
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
        #if DEBUG
        if !more.released.isEmpty { ChainEffects.rejectionListGrowths.withLock { $0 += 1 } }
        #endif
        more.released.reserveCapacity(max(needed, 2 * more.released.capacity))
    }

    /// Cancels the chains `link` reaches with `error`.
    mutating func follow(_ link: CancelLink, error: any Error) {
        makeMore().links.append((link, error))
    }

    /// Completes `token`, a running body's token (see `ChainState.runningBodyToken`): its
    /// `onCancel` handlers run right after the cancel closures if `cancelled`.
    mutating func complete(_ token: CancellationToken, cancelled: Bool) {
        makeMore().tokens.append((token, cancelled))
    }

    /// Calls `body`, a cancel closure.
    mutating func call(_ body: @escaping () -> Void) {
        if case .none = singleCall { singleCall = body } else { makeMore().calls.append(body) }
    }

    /// Releases the handle an absorbed storage counted as (see `releasesHold`).
    mutating func releaseHold() {
        releasesHold = true
    }

    /// Adds `other`, the effects of another decision (the cancel of a chain a link reached), to
    /// run with these: its links are followed from here too, and each phase of `run` runs these
    /// effects' part and then `other`'s.
    mutating func adopt(_ other: consuming ChainEffects) {
        if let body = other.singleCall { call(body) }
        if other.hasSingle {
            var first = ReleasedHandlers.none
            swap(&first, &other.single)
            runHandlers(first)
        }
        releasesHold = releasesHold || other.releasesHold
        guard let theirs = other.more else { return }
        let mine = makeMore()
        mine.calls += theirs.calls
        #if DEBUG
        let capacity = mine.released.capacity
        defer {
            if capacity > 0, mine.released.capacity != capacity {
                ChainEffects.rejectionListGrowths.withLock { $0 += 1 }
            }
        }
        #endif
        mine.released += theirs.released
        mine.links += theirs.links
        mine.dropped += theirs.dropped
        mine.tokens += theirs.tokens
    }

    // MARK: Running

    /// Takes the next link to follow.
    mutating func nextLink() -> (link: CancelLink, error: any Error)? {
        more?.links.popLast()
    }

    /// Calls the cancel closures, completes the tokens, then runs the released handlers, then
    /// releases the rest. The links were followed first (see `CancelStorage.perform`).
    consuming func run() {
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
        guard let more else { return }
        if !more.released.isEmpty {
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
        if !more.dropped.isEmpty {
            var links: [CancelLink] = []
            for index in more.dropped.indices {
                if let link = more.dropped[index].link {
                    links.append(link)
                    more.dropped[index].link = nil
                }
            }
            more.dropped = []
            if !links.isEmpty { LinkRelease.release(&links) }
        }
    }

    // MARK: Reading

    /// What these effects hold, by kind, added to `summary` (see `ChainOutcome.Summary`).
    func addSummary(to summary: inout ChainOutcome.Summary) {
        summary.calls += singleCall == nil ? 0 : 1
        summary.rejected += hasSingle ? 1 : 0
        summary.releasesHold = summary.releasesHold || releasesHold
        guard let more else { return }
        summary.calls += more.calls.count
        summary.rejected += more.released.count
        summary.follows += more.links.map { .init(link: .init($0.link), error: String(describing: $0.error)) }
        summary.released += more.dropped.map(ChainOutcome.Held.init)
        summary.tokens += more.tokens.map(\.cancelled)
    }

    #if DEBUG
    /// How many times a list of rejections that held some grew (made room for more, or took
    /// another chain's in `adopt`), in this process (debug builds only): tests count the work a
    /// cancel does instead of timing it.
    package static let rejectionListGrowths = Locked(0)
    #endif
}

/// What `ChainEffects` holds beyond the first of each kind: made on first use, by the cancel of a
/// chain of several members, a link, a token.
private final class MoreEffects {
    // No dynamic exclusivity checks (they cost about 100 instructions per member of a cancelled
    // chain): the object belongs to one `ChainEffects` value, used by one thread at a time.
    @exclusivity(unchecked) var calls: [() -> Void] = []
    @exclusivity(unchecked) var released: [ReleasedHandlers] = []
    /// Links to follow, each with the error the chains it reaches are cancelled with.
    @exclusivity(unchecked) var links: [(link: CancelLink, error: any Error)] = []
    @exclusivity(unchecked) var dropped: [MemberContents] = []
    /// Running bodies' tokens to complete, cancelled or not.
    @exclusivity(unchecked) var tokens: [(token: CancellationToken, cancelled: Bool)] = []
}
