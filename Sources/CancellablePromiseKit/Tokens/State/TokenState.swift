import Dispatch
import PromiseCore

// The state machine of a `CancellationToken` (see the overview in CancellationToken.swift).
//
// `TokenState` holds all of a token's mutable state. Every event is a `mutating` method that
// the token calls with its lock held; it decides, and returns a `TokenActions` value: entries
// to run, links to remove from operands, references to drop. The token performs the actions
// after releasing its lock (`CancellationToken.handle`), so no user code, no deinitialiser and
// no other token's lock is ever entered under a token's lock.

/// The state of one token, guarded by the token's lock.
struct TokenState {
    enum Phase {
        case pending
        case completed(cancelled: Bool)
    }

    private(set) var phase: Phase
    /// `true` for tokens made by `map`, `flatMap`, `&&` and `||`.
    let isDerived: Bool
    /// In increasing id order. A removed entry stays as a tombstone (`.removed`) until the list
    /// is compacted, so removing costs O(1) amortised in any order (shifting the later entries
    /// made removing oldest first quadratic).
    private var entries: [TokenEntry] = []
    /// Tombstones in `entries`.
    private var removedCount = 0
    private var nextID: UInt64 = 0
    /// Entry count at which the next sweep runs (dead weak registrations, dead links).
    private var sweepAt = 16
    /// Whether the list may hold what a sweep drops (registered objects, links to derived
    /// tokens): a list of handlers only is never swept.
    private var maySweep = false
    /// The last sweep pass that visited this token (a pass visits each token once).
    private var lastSweepPass: UInt64 = 0
    /// Entries that are handlers or registered objects (not links to derived tokens).
    private var ownEntryCount = 0
    /// A derived token's reference to itself while it is pending with entries of its own.
    private var keptAlive: CancellationToken?
    /// A derived token's links on its operands that have not run yet (at most two at a time).
    private var operands = OperandLinks()
    /// `&&` and `||`: how many operands completed without deciding the outcome.
    private var undecidedOperands = 0

    init(phase: Phase, isDerived: Bool) {
        self.phase = phase
        self.isDerived = isDerived
    }

    // MARK: Queries

    /// The outcome, once completed.
    var completedValue: Bool? {
        if case .completed(let cancelled) = phase { return cancelled }
        return nil
    }

    /// Handlers, registered objects and links to derived tokens still listed.
    var liveEntryCount: Int { entries.count - removedCount }

    /// The length of the entry list, tombstones included.
    var storedEntryCount: Int { entries.count }

    // MARK: Events

    /// What `add` decided.
    enum Added {
        /// Listed with this id; `sweep`: the list doubled since the last sweep, start one.
        case listed(id: UInt64, sweep: Bool)
        /// The token completed already: run the entry at once with this outcome.
        case completed(cancelled: Bool)
    }

    /// Lists an entry for `action`, unless the token has completed. `owner` is the token whose
    /// state this is (a derived token keeps itself alive while it has entries of its own).
    mutating func add(_ action: TokenAction, queue: DispatchQueue?, owner: CancellationToken) -> Added {
        if let cancelled = completedValue { return .completed(cancelled: cancelled) }
        let id = nextID
        nextID &+= 1
        entries.append(TokenEntry(id: id, queue: queue, action: action))
        if action.isOwn {
            ownEntryCount += 1
            if isDerived && ownEntryCount == 1 { keptAlive = owner }
        }
        if action.isSweepable { maySweep = true }
        let sweep = maySweep && entries.count >= sweepAt
        if entries.count >= sweepAt {
            sweepAt = max(16, 2 * entries.count)  // no other addition starts a sweep meanwhile
        }
        return .listed(id: id, sweep: sweep)
    }

    /// Removes the entry `id` if the token is still pending. `removed`: whether it was listed
    /// (it will then never run).
    mutating func remove(id: UInt64) -> (removed: Bool, actions: TokenActions) {
        var actions = TokenActions()
        guard case .pending = phase, let index = index(of: id), !entries[index].action.isRemoved else {
            return (false, actions)
        }
        // The handler and what it captured are released after the lock.
        actions.drop.append(entries[index])
        entries[index] = TokenEntry(id: id, queue: nil, action: .removed)
        removedCount += 1
        if let old = compactIfSparse() { actions.dropStorage = old }
        if actions.drop[0].action.isOwn { actions.release = ownEntriesRemoved(1) }
        return (true, actions)
    }

    /// Completes the token (`nil` if it had completed already): its entries run after the lock,
    /// a derived token leaves the operands it was still registered on, and gives up its
    /// reference to itself.
    mutating func complete(cancelled: Bool) -> TokenActions? {
        guard case .pending = phase else { return nil }
        phase = .completed(cancelled: cancelled)
        return takeEverything(cancelled: cancelled)
    }

    /// The token is being freed while pending: nobody can complete it any more. Its entries
    /// run as "not cancelled" (so no continuation waits for ever), and a derived token leaves
    /// its operands.
    mutating func tearDown() -> TokenActions {
        guard case .pending = phase else { return TokenActions() }
        return takeEverything(cancelled: false)
    }

    private mutating func takeEverything(cancelled: Bool) -> TokenActions {
        var actions = TokenActions()
        actions.run = entries
        actions.cancelled = cancelled
        entries = []
        removedCount = 0
        ownEntryCount = 0
        actions.leave = operands
        operands = OperandLinks()
        actions.release = keptAlive
        keptAlive = nil
        return actions
    }

    /// A sweep pass reached this token: drops `register(_:)` entries whose object is gone and
    /// links whose derived token is gone. Returns the derived tokens still linked, for the pass
    /// to visit, and what to drop after the lock; `nil` if the token completed or this pass
    /// visited it already.
    mutating func sweep(pass: UInt64) -> (derived: [CancellationToken], actions: TokenActions)? {
        guard case .pending = phase, lastSweepPass != pass else { return nil }
        lastSweepPass = pass
        var actions = TokenActions()
        var derived: [CancellationToken] = []
        var kept: [TokenEntry] = []
        kept.reserveCapacity(entries.count - removedCount)
        var deadOwn = 0
        var keepsSweepable = false
        for entry in entries {
            switch entry.action {
            case .cancel(let weak) where weak.isReleased:
                actions.drop.append(entry)
                deadOwn += 1
            case .cancel:
                kept.append(entry)
                keepsSweepable = true
            case .derived(let link):
                if let target = link.target {
                    derived.append(target)
                    kept.append(entry)
                    keepsSweepable = true
                } else {
                    actions.drop.append(entry)
                }
            case .removed:
                break
            case .onCancel, .onComplete:
                kept.append(entry)
            }
        }
        entries = kept
        removedCount = 0
        maySweep = keepsSweepable
        #if DEBUG
        CancellationToken.entriesMoved.withLock { $0 += kept.count }
        #endif
        if deadOwn > 0 { actions.release = ownEntriesRemoved(deadOwn) }
        return (derived, actions)
    }

    /// The sweep pass is done with the tokens below this one, which keep `below` entries: the
    /// next sweep waits until the list has doubled. Returns the entries kept here and below.
    mutating func sweepFinished(below: Int) -> Int {
        let own = liveEntryCount
        sweepAt = max(16, 2 * own + below)
        return own + below
    }

    /// A derived token records its link on an operand. `false` if the token completed or the
    /// link ran meanwhile: the caller then removes the link from the operand at once.
    mutating func recordLink(_ record: OperandLink) -> Bool {
        guard case .pending = phase, !record.link.hasRun else { return false }
        operands.insert(record)
        return true
    }

    /// The operand of `link` completed and is running it: forget that operand (released after
    /// the lock).
    mutating func linkDidRun(_ link: DerivedLink) -> TokenActions {
        link.hasRun = true
        var actions = TokenActions()
        actions.forgotten = operands.remove(link)
        return actions
    }

    /// `&&`, `||`: an operand completed without deciding; `true` if it was the second.
    mutating func undecidedOperandCompleted() -> Bool {
        undecidedOperands += 1
        return undecidedOperands == 2
    }

    // MARK: Bookkeeping

    /// `count` entries of the token's own are gone. Returns the token's reference to itself
    /// once none is left, to be dropped after unlocking.
    private mutating func ownEntriesRemoved(_ count: Int) -> CancellationToken? {
        ownEntryCount -= count
        guard ownEntryCount == 0, let kept = keptAlive else { return nil }
        keptAlive = nil
        return kept
    }

    /// Drops the tombstones once they are at least half of the list (and at least 16, unless
    /// the list holds nothing else), so the list stays within twice its live entries plus 16 and
    /// each compaction is paid for by the removals since the last one. Returns the old storage,
    /// to be released after unlocking.
    private mutating func compactIfSparse() -> [TokenEntry]? {
        guard removedCount >= 16 || removedCount == entries.count, 2 * removedCount >= entries.count else {
            return nil
        }
        let old = entries
        if removedCount == entries.count {
            entries = []
        } else {
            var kept: [TokenEntry] = []
            kept.reserveCapacity(entries.count - removedCount)
            for entry in old where !entry.action.isRemoved { kept.append(entry) }
            entries = kept
            #if DEBUG
            CancellationToken.entriesMoved.withLock { $0 += kept.count }
            #endif
        }
        removedCount = 0
        return old
    }

    /// Binary search: entries are kept in increasing id order (tombstones keep their id).
    private func index(of id: UInt64) -> Int? {
        var low = 0
        var high = entries.count
        while low < high {
            let mid = (low + high) / 2
            if entries[mid].id < id {
                low = mid + 1
            } else {
                high = mid
            }
        }
        return low < entries.count && entries[low].id == id ? low : nil
    }
}
