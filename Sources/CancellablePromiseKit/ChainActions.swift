import PromiseCore

// MARK: - Actions

/// What an event of `ChainState` leaves to do after the storage lock is released: follow links
/// to the chains they reach, call cancel closures, run the handlers released by the rejections,
/// tell earlier attachments, and release whatever members held.
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
/// Rejecting is the one step that acts under the lock (`reject`): it is what makes every pending
/// promise of the chain rejected before `cancel()` returns, so nothing a cancel closure causes
/// later can change an outcome already decided.
struct ChainActions {
    /// `nil` until something is recorded: an event with nothing to do after the lock (listing
    /// a member of an active chain, the common case) makes, checks and drops one word, not a
    /// value of about 230 bytes whose every field must be released.
    private var pending: RecordedActions?

    init() {}

    /// Whether nothing was recorded. (A pattern, not `== nil`, which would copy the value.)
    var isEmpty: Bool {
        if case .none = pending { return true }
        return false
    }

    @inline(__always)
    private mutating func record<R>(_ body: (inout RecordedActions) -> R) -> R {
        if isEmpty { pending = RecordedActions() }
        return body(&pending!)
    }

    /// Rejects a member's promise (`taken.target`, known to its attachment `home` by `key`)
    /// with `error`, and takes its cancel closure and links (to call and follow if the promise
    /// was still pending, to release otherwise). Runs under the lock: this is what makes every
    /// pending promise of the chain rejected before `cancel()` returns, whatever its cancel
    /// closure does later. Returns whether the member's settle notification was taken care of
    /// here (its slot can be freed); `false` when the promise had settled on its own first, so
    /// that its own notification is still to come.
    mutating func reject(
        _ taken: consuming MemberContents, home: CancelStorage, key: UInt32, earlier: EarlierAttachment?,
        with error: any Error
    ) -> Bool {
        if isEmpty { pending = RecordedActions() }
        return pending!.reject(taken, home: home, key: key, earlier: earlier, with: error)
    }

    /// Releases what a member held, after the lock.
    mutating func release(_ taken: MemberContents) {
        guard !taken.isEmpty else { return }
        record { $0.release(taken) }
    }

    /// Releases `link` after the lock.
    mutating func release(_ link: CancelLink) {
        record { $0.release(link) }
    }

    /// Makes room for `count` more rejections at once (see `RecordedActions.reserveRejections`).
    mutating func reserveRejections(_ count: Int) {
        guard count > 1 else { return }
        record { $0.reserveRejections(count) }
    }

    /// Tells `attachment` (a member's earlier attachment) that its promise settled.
    mutating func notify(_ attachment: EarlierAttachment?) {
        guard let attachment else { return }
        record { $0.notify(attachment) }
    }

    /// Cancels the chains `link` reaches with `error`.
    mutating func follow(_ link: CancelLink, error: any Error) {
        record { $0.follow(link, error: error) }
    }

    /// Takes the next link to follow.
    mutating func nextLink() -> (link: CancelLink, error: any Error)? {
        if isEmpty { return nil }
        return pending!.nextLink()
    }

    /// Releases `storages` (that left a chain's group) after the lock.
    mutating func releaseStorages(_ storages: [CancelStorage]) {
        guard !storages.isEmpty else { return }
        record { $0.releaseStorages(storages) }
    }

    /// Calls `body` (a cancel closure) after the lock.
    mutating func call(_ body: @escaping () -> Void) {
        record { $0.call(body) }
    }

    /// Calls the cancel closures, then runs the released handlers, then releases the rest.
    mutating func run() {
        if isEmpty { return }
        pending!.run()
        pending = nil
    }

    #if DEBUG
    /// How many times `reserveRejections` grew a list, in this process (debug builds only): tests
    /// count the work a cancel does instead of timing it.
    package static let rejectionListGrowths = Locked(0)
    #endif
}

/// What was recorded (see `ChainActions`).
private struct RecordedActions {
    private var calls: [() -> Void] = []
    private var singleCall: (() -> Void)?
    private var released: [ReleasedHandlers] = []
    /// The first rejection's released handlers, kept inline (`.none` until there is one).
    private var single: ReleasedHandlers = .none
    private var hasSingle: Bool {
        if case .none = single { return false }
        return true
    }
    /// Links to follow, each with the error the chains it reaches are cancelled with.
    private var links: [(link: CancelLink, error: any Error)] = []
    private var dropped: [MemberContents] = []
    /// The first thing to release, kept inline: settling one promise releases one member's
    /// contents without allocating an array.
    private var firstDropped: MemberContents?
    private var notified: [EarlierAttachment] = []
    /// Storages that left a chain's group (released after the lock).
    private var releasedStorages: [CancelStorage] = []

    init() {}

    /// Rejects a member's promise (`taken.target`, known to its attachment `home` by `key`)
    /// with `error`, and takes its cancel closure and links (to call and follow if the promise
    /// was still pending, to release otherwise). Runs under the lock: this is what makes every
    /// pending promise of the chain rejected before `cancel()` returns, whatever its cancel
    /// closure does later. Returns whether the member's settle notification was taken care of
    /// here (its slot can be freed); `false` when the promise had settled on its own first, so
    /// that its own notification is still to come.
    mutating func reject(
        _ taken: consuming MemberContents, home: CancelStorage, key: UInt32, earlier: EarlierAttachment?,
        with error: any Error
    ) -> Bool {
        let body = taken.cancelBody
        let link = taken.link
        guard let target = taken.target else {
            drop(.init(cancelBody: body, link: link, target: nil))
            return true
        }
        let rejected = target.settle(rejected: error)
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
            if let attachment, attachment === home, releasedKey == key {
                // Left the chain here, under the lock: `drain` notifies the earlier attachment
                // in the member's place instead of taking the lock again.
                unblocked = .released(
                    source: source, handlers: handlers, attachment: earlier?.attachment, key: earlier?.key ?? 0)
            } else {
                unblocked = .released(source: source, handlers: handlers, attachment: attachment, key: releasedKey)
            }
        }
        if let body { call(body) }
        if let link { follow(link, error: error) }
        if !hasSingle { single = consume unblocked } else { released.append(consume unblocked) }
        return true
    }

    mutating func release(_ taken: MemberContents) {
        if taken.cancelBody != nil || taken.link != nil || taken.target != nil { drop(taken) }
    }

    mutating func release(_ link: CancelLink) {
        drop(.init(cancelBody: nil, link: link, target: nil))
    }

    /// Makes room for `count` more rejections at once (a chain's worth), instead of growing the
    /// list one reallocation at a time. Growth stays geometric: a cancel that follows many links
    /// calls this once per linked chain, and reserving exactly what each one needs would copy
    /// the whole growing list every time (quadratic in the chains reached).
    mutating func reserveRejections(_ count: Int) {
        guard count > 1 else { return }
        let needed = released.count + count
        guard needed > released.capacity else { return }
        released.reserveCapacity(max(needed, 2 * released.capacity))
        #if DEBUG
        ChainActions.rejectionListGrowths.withLock { $0 += 1 }
        #endif
    }


    private mutating func drop(_ released: MemberContents) {
        if case .none = firstDropped { firstDropped = released } else { dropped.append(released) }
    }

    mutating func notify(_ attachment: EarlierAttachment) {
        notified.append(attachment)
    }

    /// Cancels the chains `link` reaches with `error`.
    mutating func follow(_ link: CancelLink, error: any Error) {
        links.append((link, error))
    }

    /// Takes the next link to follow.
    mutating func nextLink() -> (link: CancelLink, error: any Error)? {
        links.popLast()
    }

    /// Releases `storages` (that left a chain's group) after the lock.
    mutating func releaseStorages(_ storages: [CancelStorage]) {
        guard !storages.isEmpty else { return }
        if releasedStorages.isEmpty {
            releasedStorages = storages
        } else {
            releasedStorages.append(contentsOf: storages)
        }
    }

    mutating func call(_ body: @escaping () -> Void) {
        if case .none = singleCall { singleCall = body } else { calls.append(body) }
    }

    /// Calls the cancel closures, then runs the released handlers, then releases the rest.
    mutating func run() {
        for earlier in notified { earlier.attachment.promiseDidSettle(key: earlier.key) }
        notified = []
        singleCall?()
        singleCall = nil
        for body in calls { body() }
        calls = []
        if hasSingle {
            var first = ReleasedHandlers.none
            swap(&first, &single)
            drain(consuming: first)
        }
        if !released.isEmpty {
            // Each value is swapped out, in order, and handed over: iterating or popping would
            // copy every `ReleasedHandlers` (a retain and a release per reference in it).
            var list: [ReleasedHandlers] = []
            swap(&list, &released)
            for index in list.indices {
                var unblocked = ReleasedHandlers.none
                swap(&unblocked, &list[index])
                drain(consuming: unblocked)
            }
        }
        if let link = firstDropped?.link {
            // Links are released through `LinkRelease`, with the others below.
            firstDropped?.link = nil
            dropped.append(.init(cancelBody: nil, link: link, target: nil))
        }
        firstDropped = nil
        guard !dropped.isEmpty else { return }
        var links: [CancelLink] = []
        for index in dropped.indices {
            if let link = dropped[index].link {
                links.append(link)
                dropped[index].link = nil
            }
        }
        dropped = []
        if !links.isEmpty { LinkRelease.release(&links) }
    }
}
