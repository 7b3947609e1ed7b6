import PromiseCore

// The members of a chain: a table of slots in each storage, and the keys that name them
// outside it (see the overview in CancelStorage.swift).

// MARK: - Member keys

/// A member's place in its home storage's table: its slot and the generation of the
/// reservation, so that a key kept after the member left (by its `CancellablePromise`, or by a
/// step downstream as its upstream) is recognised as stale once the slot is reused. The member's
/// promise itself carries only the slot (`index`), as its attachment key: a slot is freed only
/// once its promise will never report to it again, so that key cannot go stale.
@usableFromInline
struct _CancelKey: Equatable, Sendable {
    @usableFromInline let index: UInt32
    @usableFromInline let generation: UInt32

    @usableFromInline init(index: UInt32, generation: UInt32) {
        self.index = index
        self.generation = generation
    }

    /// The key of a promise that never was a member (made settled): names no slot.
    @inlinable static var none: _CancelKey { _CancelKey(index: .max, generation: 0) }
}

/// What a member held, released outside the lock (closures may own objects whose `deinit` runs
/// user code).
struct MemberContents {
    /// Stops the promise's task; called at most once, only while the promise is pending.
    var cancelBody: (() -> Void)?
    /// Chains this step waits on: cancelled with it.
    var link: CancelLink?
    /// The promise to reject when the chain is cancelled.
    var target: (any CancelTarget)?

    var isEmpty: Bool { cancelBody == nil && link == nil && target == nil }
}

/// Another attachment of a member's promise (the one it had before it was listed), told when
/// the promise settles, with the key it knows the promise by.
struct EarlierAttachment {
    let attachment: any PromiseAttachment
    let key: UInt32
}

// MARK: - Member table

/// The members of one storage: a slot per pending promise of the chain listed here, reused
/// through a free list. The first slot is stored inline, so a chain with one member allocates no
/// array; the array is released once every slot is free, so a settled chain holds no storage.
/// Guarded by the lock of the storage's root.
struct MemberTable {
    struct Slot {
        enum State {
            /// Unused (listed in `freeSlots`, unless it is at the end of the table).
            case free
            /// Reserved for a promise being made or attached, and listed before the lock it was
            /// reserved under is released: its promise cannot report to it meanwhile (a step is
            /// connected to its source only once listed).
            case reserved
            /// Listed: its promise is pending and a cancellation rejects it.
            case listed
            /// Cancelled, abandoned, or left by a cancellation while its promise had settled on
            /// its own: holds nothing, and is freed by its promise's settle notification.
            case detached
        }

        // 80 bytes. A 64-byte layout (the one-byte fields after the link's tag, the upstream key
        // not optional) saved about 20 instructions per chain link but made the median of the
        // 64,000-step promise loop row 20 % slower (its fastest iterations were unchanged), so
        // it was not kept.
        var state: State
        var generation: UInt32 = 0
        /// Observers (`ensure`, `ensureThen`, `tap`) are not rejected by a cancellation: they
        /// pass it on when their body has run, so the chain settles in order.
        var isObserver = false
        /// Scratch for a cancellation: whether the member waits behind an observer.
        var waitsBehindObserver: Bool?
        /// The step this one follows in the chain (in the same table).
        var upstream: _CancelKey?
        var contents = MemberContents()

        static var empty: Slot { Slot(state: .free) }
    }

    private var first = Slot.empty
    private var rest: [Slot] = []
    /// Slots in use or on the free list (`first` counts when this is at least 1).
    private var slotCount = 0
    /// Free slots to reuse, most recently freed last. An entry may be stale (its slot was
    /// dropped from the end of the table, or reused through another entry): `reserve` skips
    /// those, and `compactFreeSlots` drops them once they could be half of the list.
    private var freeSlots: [Int32] = []
    private var nextGeneration: UInt32 = 0
    /// Slots in use by observers: a cancellation of a table without any skips working out which
    /// members wait behind one. (32 bits, beside `nextGeneration`: the table stays as large.)
    private var observersInUse: UInt32 = 0
    /// Earlier attachments, by slot: rare (a promise listed with an attachment other than a
    /// producer's task).
    private var earlier: [Int: EarlierAttachment] = [:]
    /// Listed members.
    private(set) var listedCount = 0
    /// Whether this (absorbed) storage is in its root's `absorbed` list: dropped from it while
    /// its table is empty (`CancelState.pruneAbsorbed`), listed again when it reserves a slot.
    var isInRootsList = false
    /// Slots not free.
    private(set) var inUse = 0

    init() {}

    /// Slots allocated beyond the inline one (for tests).
    var capacity: Int { rest.capacity }

    // Slots are reached through these two helpers rather than a subscript with `_read` and
    // `_modify` accessors: those are coroutines, and one not inlined allocates its frame on
    // every access.

    /// Runs `body` on slot `index`, in place.
    @inline(__always)
    private mutating func withSlot<R>(_ index: Int, _ body: (inout Slot) -> R) -> R {
        if index == 0 { return body(&first) }
        return body(&rest[index - 1])
    }

    /// Reads slot `index`.
    @inline(__always)
    private func readSlot<R>(_ index: Int, _ body: (borrowing Slot) -> R) -> R {
        if index == 0 { return body(first) }
        return rest.withUnsafeBufferPointer { body($0[index - 1]) }
    }

    private func state(_ index: Int) -> Slot.State { readSlot(index) { $0.state } }
    private func generation(_ index: Int) -> UInt32 { readSlot(index) { $0.generation } }
    private func isObserver(_ index: Int) -> Bool { readSlot(index) { $0.isObserver } }
    private func upstream(_ index: Int) -> _CancelKey? { readSlot(index) { $0.upstream } }
    private func waitsBehindObserver(_ index: Int) -> Bool? { readSlot(index) { $0.waitsBehindObserver } }

    /// The slot of `key` if it is still the reservation `key` names.
    func index(of key: _CancelKey) -> Int? {
        let index = Int(key.index)
        guard index < slotCount, generation(index) == key.generation else { return nil }
        if case .free = state(index) { return nil }
        return index
    }

    /// The slot of `key` if it is listed.
    func listedIndex(of key: _CancelKey) -> Int? {
        guard let index = index(of: key), case .listed = state(index) else { return nil }
        return index
    }

    func isListed(_ key: _CancelKey) -> Bool { listedIndex(of: key) != nil }

    // MARK: Reserving and freeing

    /// Reserves a slot for a new member.
    mutating func reserve(upstream: _CancelKey?, isObserver: Bool, cancelBody: (() -> Void)?) -> _CancelKey {
        let generation = nextGeneration
        nextGeneration &+= 1
        let index: Int
        if let reused = popFreeSlot() {
            index = reused
        } else if slotCount == 0 {
            index = 0
            slotCount = 1
        } else {
            index = slotCount
            rest.append(.empty)
            slotCount += 1
        }
        // Filled in place: a free slot is empty, so nothing is copied or released.
        withSlot(index) { slot in
            slot.state = .reserved
            slot.generation = generation
            slot.isObserver = isObserver
            slot.upstream = upstream
            slot.contents.cancelBody = cancelBody
        }
        inUse += 1
        if isObserver { observersInUse += 1 }
        return _CancelKey(index: UInt32(index), generation: generation)
    }

    /// A free slot to reuse, if the free list has one that is still free and in the table.
    private mutating func popFreeSlot() -> Int? {
        while let candidate = freeSlots.popLast() {
            let index = Int(candidate)
            if index < slotCount, case .free = state(index) { return index }
        }
        return nil
    }

    /// Frees a slot whose contents were taken. The array is released once every slot is free;
    /// free slots at the end of the table are dropped from it (a long-lived chain whose newer
    /// members settled gives their storage back); others go on the free list.
    private mutating func free(_ index: Int) {
        if isObserver(index) { observersInUse -= 1 }
        withSlot(index) { $0 = .empty }
        inUse -= 1
        if inUse == 0 {
            first = .empty
            rest = []
            slotCount = 0
            freeSlots = []
            return
        }
        if index == slotCount - 1 {
            dropFreeSlotsAtTheEnd()
        } else {
            freeSlots.append(Int32(index))
            if freeSlots.count > 2 * (slotCount - inUse) + 16 { compactFreeSlots() }
        }
    }

    /// Drops the free slots at the end of the table (each slot is dropped at most once per time
    /// it was added: O(1) amortised), and gives back the array's storage once it is less than a
    /// quarter used (a new buffer of twice the count: O(1) amortised per slot dropped). Their
    /// entries on the free list become stale.
    private mutating func dropFreeSlotsAtTheEnd() {
        while slotCount > 1, case .free = state(slotCount - 1) {
            rest.removeLast()
            slotCount -= 1
        }
        if rest.capacity > 64, rest.count < rest.capacity / 4 {
            var smaller: [Slot] = []
            smaller.reserveCapacity(2 * rest.count)
            smaller.append(contentsOf: rest)
            rest = smaller
        }
        if freeSlots.count > 2 * (slotCount - inUse) + 16 { compactFreeSlots() }
    }

    /// Rebuilds the free list without stale or repeated entries. Runs once the list could be
    /// more than half stale, so it costs O(1) amortised per entry added.
    private mutating func compactFreeSlots() {
        var seen = Set<Int32>()
        var kept: [Int32] = []
        kept.reserveCapacity(slotCount - inUse)
        for candidate in freeSlots {
            let index = Int(candidate)
            guard index < slotCount, case .free = state(index), seen.insert(candidate).inserted else { continue }
            kept.append(candidate)
        }
        freeSlots = kept
    }

    private mutating func take(_ index: Int) -> MemberContents {
        var taken = MemberContents()
        withSlot(index) { swap(&taken, &$0.contents) }
        return taken
    }

    private mutating func takeEarlier(_ index: Int) -> EarlierAttachment? {
        earlier.isEmpty ? nil : earlier.removeValue(forKey: index)
    }

    /// Records the earlier attachment of the promise reserved in `key`'s slot.
    mutating func setEarlier(_ attachment: EarlierAttachment, for key: _CancelKey) {
        earlier[Int(key.index)] = attachment
    }

    /// Frees a slot reserved for a promise that could not be attached (it had settled): it will
    /// never report to this table. Returns what the slot held.
    mutating func unreserve(_ key: _CancelKey) -> MemberContents {
        let index = Int(key.index)
        let taken = take(index)
        free(index)
        return taken
    }

    // MARK: Events

    /// Lists the member reserved as `key`, whose promise is `target`, in an active chain: the
    /// common case of `list`, with nothing to do after the lock.
    mutating func listActive(_ key: _CancelKey, target: any CancelTarget) {
        let index = Int(key.index)
        guard case .reserved = state(index) else { preconditionFailure("MemberTable.list: the slot is not reserved") }
        withSlot(index) { slot in
            slot.contents.target = target
            slot.state = .listed
        }
        listedCount += 1
    }

    /// Lists the member reserved as `key`, whose promise is `target`, in a chain whose root is
    /// in `phase`; `home` is this table's storage.
    mutating func list(
        _ key: _CancelKey, target: any CancelTarget, phase: borrowing CancelState.Phase, home: CancelStorage,
        into actions: inout CancelActions
    ) {
        let index = Int(key.index)
        switch state(index) {
        case .reserved:
            break
        case .free, .listed, .detached:
            preconditionFailure("MemberTable.list: the slot is not reserved")
        }
        switch phase {
        case .active:
            listActive(key, target: target)
        case .cancelled(let error, _):
            if isObserver(index) || upstream(index) != nil {
                // A step added to a cancelled chain: its upstream promise passes the
                // cancellation on to it, or, if it fulfilled, the step's body finds the chain
                // cancelled before starting (`PromiseAttachment.errorBeforeBody`) and rejects.
                // A body that already ran has its returned chain cancelled.
                detachCancellingLinks(index, with: error, into: &actions)
            } else {
                withSlot(index) { $0.contents.target = target }
                reject(index, home: home, with: error, into: &actions)
            }
        case .abandoned:
            actions.release(take(index))
            withSlot(index) { $0.state = .detached }
        case .forwarded:
            preconditionFailure("MemberTable.list: a forwarded storage lists nothing (lock the root)")
        }
    }

    /// The promise of slot `index` settled (its attachment was told). Returns what the member
    /// held, to release after the lock, and its earlier attachment, to notify after the lock.
    mutating func memberSettled(_ index: Int) -> (MemberContents, EarlierAttachment?) {
        guard index < slotCount else { return (MemberContents(), nil) }
        switch state(index) {
        case .listed:
            listedCount -= 1
            let taken = take(index)
            let earlier = takeEarlier(index)
            free(index)
            return (taken, earlier)
        case .reserved:
            preconditionFailure("MemberTable.memberSettled: a member reports only once listed")
        case .detached:
            let earlier = takeEarlier(index)
            free(index)
            return (MemberContents(), earlier)
        case .free:
            return (MemberContents(), nil)
        }
    }

    /// Records a link for the member `key` (a step whose body returned a pending cancellable
    /// promise, or a wrapper's returned promise), in a chain whose root is in `phase`.
    /// `whileBodyRuns`: the link comes from the member's own step body, which is running.
    mutating func link(
        _ key: _CancelKey, _ link: CancelLink, phase: CancelState.Phase, whileBodyRuns: Bool,
        into actions: inout CancelActions
    ) {
        if let index = index(of: key) {
            switch state(index) {
            case .reserved, .listed:
                if case .abandoned = phase { return actions.release(link) }
                withSlot(index) { $0.contents.link = CancelLink.adding(link, to: $0.contents.link) }
                return
            case .free, .detached:
                break
            }
        }
        // The member left the chain: the body's result is discarded, and its work is cancelled
        // with the chain. A step whose body is still running leaves an active chain only when
        // it is cancelled alone (an `autoCancel` loser): its work is cancelled too.
        switch phase {
        case .cancelled(let error, _):
            actions.follow(link, error: error)
        case .active where whileBodyRuns:
            actions.follow(link, error: boxedCancellation)
        default:
            actions.release(link)
        }
    }

    // MARK: Cancelling

    /// Cancels this table's members with `error` (its root was just cancelled, or absorbed by
    /// a cancelled root): rejects every listed promise that does not wait behind an observer;
    /// the others settle when the observer ahead of them passes the cancellation on. Reserved
    /// members are settled when they are listed.
    mutating func cancelMembers(with error: any Error, home: CancelStorage, into actions: inout CancelActions) {
        guard listedCount > 0 else { return }
        actions.reserveRejections(listedCount)
        var index = 0
        if observersInUse > 0 {
            while index < slotCount {
                if case .listed = state(index) { markWaitingBehindObserver(index) }
                index += 1
            }
            index = 0
        }
        // `free` may release the array once the last slot is freed: `slotCount` is read again.
        while index < slotCount {
            if case .listed = state(index) {
                listedCount -= 1
                if waitsBehindObserver(index) == true {
                    // Settles when the observer ahead of it passes the cancellation on; what it
                    // is linked to (a task tied with `appendCancellable`) is cancelled now.
                    detachCancellingLinks(index, with: error, into: &actions)
                } else {
                    reject(index, home: home, with: error, into: &actions)
                }
            }
            index += 1
        }
    }

    /// Cancels the listed member `key` alone, not its chain (an `autoCancel` loser that shares
    /// its chain with the winner). `false` if it is not listed.
    mutating func cancelAlone(
        _ key: _CancelKey, home: CancelStorage, with error: any Error, into actions: inout CancelActions
    ) -> Bool {
        guard let index = listedIndex(of: key) else { return false }
        listedCount -= 1
        reject(index, home: home, with: error, into: &actions)
        return true
    }

    /// Abandons the listed members: their cancel closures and links are released uncalled.
    mutating func abandonMembers(into actions: inout CancelActions) {
        guard listedCount > 0 else { return }
        var index = 0
        while index < slotCount {
            if case .listed = state(index) {
                actions.release(take(index))
                withSlot(index) { $0.state = .detached }
            }
            index += 1
        }
        listedCount = 0
    }

    /// Detaches the member of slot `index` without rejecting its promise (something upstream
    /// will settle it), cancelling with `error` what it links to and releasing the rest after the
    /// lock. Its slot is freed by its promise's settle notification.
    private mutating func detachCancellingLinks(_ index: Int, with error: any Error, into actions: inout CancelActions)
    {
        var taken = take(index)
        if let link = taken.link {
            taken.link = nil
            actions.follow(link, error: error)
        }
        actions.release(taken)
        withSlot(index) { $0.state = .detached }
    }

    /// Rejects the promise of slot `index` (no longer counted as listed) under the lock, a
    /// named step of a cancellation (see `CancelActions.reject`); frees the slot if its settle
    /// notification was taken care of here, otherwise leaves it detached for that notification.
    private mutating func reject(
        _ index: Int, home: CancelStorage, with error: any Error, into actions: inout CancelActions
    ) {
        let earlier = takeEarlier(index)
        let notified = actions.reject(take(index), home: home, key: UInt32(index), earlier: earlier, with: error)
        if notified {
            free(index)
        } else {
            withSlot(index) { $0.state = .detached }
            if let earlier { self.earlier[index] = earlier }
        }
    }

    /// Whether slot `index` is an observer or follows one that is still listed (in this
    /// cancellation pass); computed for a whole table in linear time by remembering the answer
    /// per slot.
    private mutating func markWaitingBehindObserver(_ index: Int) {
        // Common case without allocating: the slot is decided by itself or by its upstream,
        // already marked.
        if waitsBehindObserver(index) != nil { return }
        if isObserver(index) {
            withSlot(index) { $0.waitsBehindObserver = true }
            return
        }
        guard let upstreamKey = upstream(index), let upstreamIndex = listedIndex(of: upstreamKey) else {
            withSlot(index) { $0.waitsBehindObserver = false }
            return
        }
        if let known = waitsBehindObserver(upstreamIndex) {
            withSlot(index) { $0.waitsBehindObserver = known }
            return
        }
        var path: [Int] = []
        var current = index
        var answer: Bool
        while true {
            if let known = waitsBehindObserver(current) {
                answer = known
                break
            }
            if isObserver(current) {
                answer = true
                withSlot(current) { $0.waitsBehindObserver = true }
                break
            }
            guard let key = upstream(current), let next = listedIndex(of: key) else {
                answer = false
                withSlot(current) { $0.waitsBehindObserver = false }
                break
            }
            path.append(current)
            current = next
        }
        for waiting in path { withSlot(waiting) { $0.waitsBehindObserver = answer } }
    }
}
