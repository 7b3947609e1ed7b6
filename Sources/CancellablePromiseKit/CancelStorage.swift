import Dispatch
import PromiseCore

// The cancellation graph of cancellable chains.
//
// Objects and what keeps them alive:
// - `CancelContext` is a *handle*: what users (and wrappers, finalizers, tokens, combinators)
//   hold to be able to cancel a chain. Every `CancellablePromise` of a chain holds the same one.
// - `CancelStorage` is the chain's shared state, behind one lock: a `CancelState` (the state
//   machine below) listing a `CancelEntry` per pending promise of the chain. Handles count
//   themselves in their storage; when the last handle goes away the chain is *abandoned*: its
//   entries drop their promises, cancel closures and links (uncalled), so nothing but the work
//   itself (a resolver, an upstream promise) keeps the promises alive, and abandoned work that
//   nothing can settle is freed like any unreferenced promise.
// - `CancelEntry` is one pending promise of a chain. The promise holds its entry (as its
//   attachment, told when the promise settles), the entry holds the promise, its cancel closure,
//   the chain it waits on (a *link*) and the entry of its upstream step; all of that is dropped
//   when the promise settles, is cancelled, or is abandoned, so no cycle outlives the work.
//
// Joins (`cancellize(cancelContext:)` on a cancellable promise) merge the smaller storage into
// the larger (union by size): the absorbed storage forwards to the other and lists nothing.
// Forwarding never loops: a join decides with both roots locked, only an active root is ever
// absorbed, and a cancelled root is never absorbed (joining a cancelled chain cancels the
// other one).
//
// Links are not joins: a `then`/`recover` body that returns a cancellable promise links the
// step waiting on it to that promise's chain. Cancelling the waiting chain cancels the linked
// one; the link ends when the step settles.
//
// Lock order: only a join holds two storage locks, those of two roots, taken in address order.
// A storage lock may be held while taking promise locks (to reject the chain's promises), never
// the reverse. User code (cancel closures,
// handlers, deinits of captured objects) never runs under a storage lock.

// MARK: - Storage

/// The lock and state of a chain (see the top of this file). Never exposed: users hold
/// `CancelContext` handles.
@usableFromInline
final class CancelStorage: @unchecked Sendable {
    // @unchecked: `state` is only touched with the lock held.
    // The lock word must remain the first stored property (see PromiseCore's Lock.swift).
    private var lockWord = makeLockWord()
    /// Guarded by the lock (so no dynamic exclusivity check is needed).
    @exclusivity(unchecked) private var state = CancelState()

    init() {}

    deinit {
        lockWordDestroy(lockWordPointer(self))
    }

    /// The address of the stored lock word as Swift sees it; used by tests to check the offset
    /// `lockWordPointer` assumes.
    func _storedLockWordAddress() -> UnsafeMutableRawPointer {
        withUnsafeMutablePointer(to: &lockWord) { UnsafeMutableRawPointer($0) }
    }

    @inline(__always) private func lock() { lockWordLock(lockWordPointer(self)) }
    @inline(__always) private func unlock() { lockWordUnlock(lockWordPointer(self)) }

    /// Locks and returns the root this storage forwards to (itself unless absorbed by a join),
    /// shortening the path for the next caller.
    @inline(__always)
    private func lockRoot() -> CancelStorage {
        // The common case, a storage no join absorbed, inlined: no reference taken or dropped.
        lock()
        guard case .forwarded = state.phase else { return self }
        unlock()
        return lockForwardedRoot()
    }

    /// `lockRoot` for a storage absorbed by a join.
    @inline(never)
    private func lockForwardedRoot() -> CancelStorage {
        var storage = self
        var hops = 0
        while true {
            storage.lock()
            guard case .forwarded(let next, _) = storage.state.phase else { break }
            storage.unlock()
            storage = next
            hops += 1
        }
        if hops > 1 {
            let root = storage
            root.unlock()
            lock()
            state.compress(to: root)
            unlock()
            return root.lockRoot()
        }
        return storage
    }

    /// Runs `event` on the root's state with its lock held, then the actions it recorded.
    @inline(__always)
    private func withRoot<R>(_ event: (inout CancelState, inout CancelActions) -> R) -> R {
        var actions = CancelActions()
        let root = lockRoot()
        let result = event(&root.state, &actions)
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
        return result
    }

    /// Follows the links recorded in `actions` (cancelling the chains they reach, each under its
    /// own lock, iteratively), then runs the actions.
    private static func finish(_ actions: inout CancelActions) {
        while let link = actions.nextLink() {
            switch link {
            case .chain(let context):
                let error = actions.linkError ?? boxedCancellation
                let root = context.storage.lockRoot()
                if root === actions.excludedRoot {
                    root.unlock()
                    continue
                }
                _ = root.state.cancel(with: error, at: actions.linkSite ?? .library, into: &actions)
                root.unlock()
            case .task(let body):
                actions.call(body)
            case .both(let first, let second):
                actions.follow(second)
                actions.follow(first)
            }
        }
        actions.run()
    }

    // MARK: Events

    /// Reads the root's state with its lock held.
    @inline(__always)
    private func readRoot<R>(_ body: (borrowing CancelState) -> R) -> R {
        let root = lockRoot()
        defer { root.unlock() }
        return body(root.state)
    }

    @usableFromInline var cancelledError: (any Error)? {
        readRoot { $0.cancelledError }
    }

    /// The error `entry`'s step must reject with instead of starting its body: its chain's
    /// cancellation, or its own (an `autoCancel` loser), if any.
    func errorBeforeBody(of entry: CancelEntry) -> (any Error)? {
        readRoot { entry.cancelledAlone ? boxedCancellation : $0.cancelledError }
    }

    var memberCount: Int { readRoot { $0.memberCount } }

    /// Whether `entry` is listed (its promise pending and not cancelled).
    func isListed(_ entry: CancelEntry) -> Bool {
        readRoot { _ in entry.index >= 0 }
    }

    var memberCapacity: Int { readRoot { $0.memberCapacity } }

    func isSameChain(as other: CancelStorage) -> Bool {
        root === other.root
    }

    /// The root this storage forwards to now (itself unless absorbed by a join).
    var root: CancelStorage {
        let root = lockRoot()
        root.unlock()
        return root
    }

    func cancel(with error: any Error, at site: CancelSite, excluding excluded: CancelStorage? = nil) {
        withRoot { state, actions in
            actions.linkSite = site
            actions.excludedRoot = excluded
            _ = state.cancel(with: error, at: site, into: &actions)
        }
    }

    /// The state, for `debugDescription`: the cancellation (error and call site) if any, and
    /// the number of pending promises listed.
    var debugState: (error: (any Error)?, site: CancelSite?, pending: Int) {
        readRoot { ($0.cancelledError, $0.cancelSite, $0.memberCount) }
    }

    /// Cancels the chain if `entry` is still listed (its promise pending): one lock for the
    /// check and the cancellation (what a `CancelBag` does for a stored promise, and
    /// `autoCancel` for a loser); links followed never reach `excluded`.
    func cancel(ifListed entry: CancelEntry, excluding excluded: CancelStorage? = nil) {
        withRoot { state, actions in
            guard entry.index >= 0 else { return }
            actions.linkSite = .library
            actions.excludedRoot = excluded
            _ = state.cancel(with: boxedCancellation, at: .library, into: &actions)
        }
    }

    /// Cancels a loser of an `autoCancel` combinator, `entry` (listed in this storage's chain),
    /// under one lock: alone (see `CancelState.cancelAlone`) if its chain is the winner's, whose
    /// root is `winnerRoot`, so that chain is not marked cancelled; with its chain otherwise.
    /// Nothing if the loser is no longer listed (settled). Links followed never reach the
    /// winner's chain (a loser may wait on the winner).
    func cancelLoser(_ entry: CancelEntry, winnerRoot: CancelStorage) {
        var actions = CancelActions()
        actions.linkSite = .library
        actions.excludedRoot = winnerRoot
        let root = lockRoot()
        if root === winnerRoot {
            _ = root.state.cancelAlone(entry, with: boxedCancellation, into: &actions)
        } else if entry.index >= 0 {
            _ = root.state.cancel(with: boxedCancellation, at: .library, into: &actions)
        }
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    /// Lists `entry` for `promise` (attaching it to the promise), or settles the matter at once
    /// if the promise has settled or the chain was cancelled.
    @usableFromInline func add(_ entry: CancelEntry, for promise: any CancelTarget) {
        // A step made with its entry as attachment is attached already; any other promise gets
        // the entry as attachment now, keeping the one it had (not a producer's task, which the
        // entry's cancel closure stands for) to tell when it settles.
        var earlier: (any PromiseAttachment)?
        if !entry.isAttachedAtCreation {
            let (attached, previous) = promise.replaceAttachment(with: entry)
            guard attached else {
                // Settled already: nothing to cancel; the closure is released uncalled.
                withRoot { _, actions in
                    entry.index = CancelEntry.done
                    actions.release(entry.takeAll())
                }
                return
            }
            if !(previous is PromiseCancellation), previous !== entry { earlier = previous }
        }
        let root = lockRoot()
        if let earlier { entry.earlier = earlier }
        if root.state.listIfActive(entry, target: promise) {
            root.unlock()
            return
        }
        // Settled meanwhile (the entry was told, and is done: `list` releases it), or the chain
        // is cancelled or abandoned.
        var actions = CancelActions()
        if entry.index == CancelEntry.done {
            // Settled between being attached and being listed: the earlier attachment is told
            // here, as the entry will not be.
            actions.notify(entry.earlier)
            entry.earlier = nil
        }
        root.state.list(entry, target: promise, into: &actions)
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    /// `entry`'s promise settled (see `CancelState.unlist`): one lock, no recorded actions.
    func remove(_ entry: CancelEntry) {
        let root = lockRoot()
        var (released, earlier) = root.state.unlist(entry)
        root.unlock()
        earlier?.promiseDidSettle()
        if let link = released.link {
            // Released like every other link: without recursing (see `LinkRelease`).
            released.link = nil
            var links = [link]
            LinkRelease.release(&links)
        }
        withExtendedLifetime(released) {}
    }

    func link(_ entry: CancelEntry, _ link: CancelLink) {
        withRoot { state, actions in
            state.link(entry, link, into: &actions)
        }
    }

    /// A handle of this storage went away (see `CancelState.releaseHandle`).
    func releaseHandle() {
        var storage: CancelStorage? = self
        while let current = storage {
            var actions = CancelActions()
            current.lock()
            storage = current.state.releaseHandle(into: &actions)
            current.unlock()
            if !actions.isEmpty { actions.run() }
        }
    }

    /// Makes this chain and `other`'s one: afterwards cancelling either cancels both. If either
    /// was cancelled already, the joined chain is cancelled.
    ///
    /// The only place that holds two storage locks: both roots, taken in address order (so two
    /// joins cannot deadlock), so that the direction is decided while neither can change.
    func join(_ other: CancelStorage) {
        while true {
            let a = root, b = other.root
            if a === b { return }
            let (first, second) = ObjectIdentifier(a) < ObjectIdentifier(b) ? (a, b) : (b, a)
            first.lock()
            second.lock()
            var actions = CancelActions()
            let outcome = CancelState.join(&a.state, b: &b.state, aStorage: a, bStorage: b, into: &actions)
            second.unlock()
            first.unlock()
            guard case .done = outcome else { continue }
            CancelStorage.finish(&actions)
            return
        }
    }
}

/// `CancellablePromiseError.cancelled`, boxed once: `cancel()` would otherwise allocate an error
/// box on every call.
let boxedCancellation: any Error & Sendable = CancellablePromiseError.cancelled
