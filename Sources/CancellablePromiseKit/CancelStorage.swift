internal import CPromiseLock
import Dispatch
import PromiseCore

// The cancellation graph of cancellable chains.
//
// Objects and what keeps them alive:
// - A *handle* is what must be held to be able to cancel a chain: any `CancellablePromise` of
//   the chain, or a `CancelContext` (made only when asked for, one per chain while it lives).
//   Links, finalizers, bags and `autoCancel` combinators hold a promise of the chain as their
//   handle (`_CancelHandle`).
// - `CancelStorage` is the chain's shared state, behind one lock: a `CancelState` (the state
//   machine) whose `MemberTable` has a slot per pending promise of the chain. Handles count
//   themselves in their storage, atomically (a promise going away takes no lock unless it is
//   the last handle); when the last handle goes away the chain is *abandoned*: its
//   members drop their promises, cancel closures and links (uncalled), so nothing but the work
//   itself (a resolver, an upstream promise) keeps the promises alive, and abandoned work that
//   nothing can settle is freed like any unreferenced promise.
// - A member is a slot, not an object. Its promise has the storage as its attachment, with the
//   slot's index as its attachment key: the promise tells the storage "member k settled" and
//   asks "may member k's body start?". The slot holds the promise, its cancel closure, the chain
//   it waits on (a *link*) and the key of its upstream step; all of that is dropped when the
//   promise settles, is cancelled, or is abandoned, so no cycle outlives the work. What a member
//   is outside the table is an immutable key (`_CancelKey`: slot and generation), held by its
//   `CancellablePromise`, by the steps downstream and by the step's body (`_CancelMember`).
//   A slot is freed only once its promise will never report to it again (its settle
//   notification arrived, or was taken care of when a cancellation rejected it under the lock),
//   so the key a promise carries never names another member; the generation tells every other
//   holder of a key that the slot was reused.
//
// Joins (`cancellize(cancelContext:)` on a cancellable promise) make one storage forward to the
// other's root (union by size of the groups). Members never move: the absorbed storage keeps its
// table, guarded by its root's lock from then on, and the root lists the storages it absorbed,
// so that cancelling or abandoning the chain walks every table of the group (iteratively).
// Forwarding never loops: a join decides with both roots locked, only an active root is ever
// absorbed, and a cancelled root is never absorbed (joining a cancelled chain cancels the
// other one).
//
// Links are not joins: a `then`/`recover` body that returns a cancellable promise links the
// step waiting on it to that promise's chain. Cancelling the waiting chain cancels the linked
// one; the link ends when the step settles.
//
// Lock order: only a join holds two storage locks, those of two roots, taken in address order.
// A storage lock may be held while taking promise locks (to reject the chain's promises, to
// attach the storage to a promise), never the reverse. User code (cancel closures,
// handlers, deinits of captured objects) never runs under a storage lock.

// MARK: - Storage

/// The lock and state of a chain (see the top of this file), and the attachment of its members'
/// promises. Never exposed: users hold `CancelContext` handles.
@usableFromInline
final class CancelStorage: PromiseAttachment, @unchecked Sendable {
    // @unchecked: `state` is only touched with the lock held, `members` with the root's,
    // `handleWord` only atomically.
    // The lock word must remain the first stored property (see PromiseCore's Lock.swift), the
    // handle count the second (`handleCountPointer`).
    private var lockWord = LockWord()
    /// Live handles: `CancellablePromise`s and `CancelContext`s of this storage, and storages
    /// forwarding here that still have handles of their own. Starts with the handle that
    /// creates the storage. Updated atomically through `handleCountPointer`, never read or
    /// written as a Swift property after `init`: a promise going away costs one atomic
    /// decrement, and the lock is taken only by the last handle.
    private var handleWord = 1
    /// Guarded by this storage's own lock (so no dynamic exclusivity check is needed).
    @exclusivity(unchecked) private var state = CancelState()
    /// This storage's members, guarded by its root's lock: its own while it is a root, the lock
    /// of the root it forwards to once a join absorbed it. A variable of its own, not a field of
    /// `state`: the two are guarded by different locks then, and an access to a field is an
    /// access to the whole variable (as ThreadSanitizer sees it).
    @exclusivity(unchecked) private var members = MemberTable()
    /// The context `context()` handed out, while it lives: every promise of the chain made here
    /// returns the same one. Guarded by this storage's own lock.
    @exclusivity(unchecked) private weak var publicContext: CancelContext?

    /// A storage whose first handle is its creator (a `CancelContext` or the chain's first
    /// `CancellablePromise`).
    @usableFromInline init() {}

    deinit {
        lockWordDestroy(of: self)
    }

    /// The address of the stored lock word as Swift sees it; used by tests to check the offset
    /// `lockWordPointer` assumes.
    func _storedLockWordAddress() -> UnsafeMutableRawPointer {
        withUnsafeMutablePointer(to: &lockWord) { UnsafeMutableRawPointer($0) }
    }

    /// The address of the handle count: the stored property after the lock word.
    @inline(__always) private var handleCountPointer: UnsafeMutablePointer<Int> {
        UnsafeMutableRawPointer(Unmanaged.passUnretained(self).toOpaque())
            .advanced(by: CancelStorage.handleWordOffset)
            .assumingMemoryBound(to: Int.self)
    }

    /// Offset of `handleWord`: after the object header and the lock word, aligned for an `Int`.
    private static let handleWordOffset: Int = {
        let header = 2 * MemoryLayout<UnsafeRawPointer>.size
        let lockAlign = MemoryLayout<LockWord>.alignment
        let lockEnd = (header + lockAlign - 1) / lockAlign * lockAlign + MemoryLayout<LockWord>.size
        let align = MemoryLayout<Int>.alignment
        return (lockEnd + align - 1) / align * align
    }()

    /// The addresses of the stored handle count as Swift sees it and as `handleCountPointer`
    /// computes it; for the test of the offset.
    func _handleWordAddresses() -> (stored: UnsafeMutableRawPointer, computed: UnsafeMutableRawPointer) {
        let stored = withUnsafeMutablePointer(to: &handleWord) { UnsafeMutableRawPointer($0) }
        return (stored, UnsafeMutableRawPointer(handleCountPointer))
    }

    @inline(__always) private func lock() { lockWordLock(of: self) }
    @inline(__always) private func unlock() { lockWordUnlock(of: self) }

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

    /// Follows the links recorded in `actions` (cancelling the chains they reach, each under its
    /// own lock, iteratively), then runs the actions.
    private static func finish(_ actions: inout CancelActions) {
        while let link = actions.nextLink() {
            switch link {
            case .chain(let handle):
                let error = actions.linkError ?? boxedCancellation
                let root = handle._handleStorage.lockRoot()
                if root === actions.excludedRoot {
                    root.unlock()
                    continue
                }
                root.cancelGroup(with: error, at: actions.linkSite ?? .library, into: &actions)
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

    /// Cancels the chain of this root (locked by the caller): marks it cancelled and cancels
    /// the members of its table and of every table it absorbed. `false` if it was cancelled, or
    /// abandoned, already.
    @discardableResult
    private func cancelGroup(with error: any Error, at site: CancelSite, into actions: inout CancelActions) -> Bool {
        guard let group = state.cancel(with: error, at: site) else { return false }
        members.cancelMembers(with: error, home: self, into: &actions)
        // A chain that no join absorbed into (the common case) has no group to go through.
        guard !group.isEmpty else { return true }
        for storage in group { storage.members.cancelMembers(with: error, home: storage, into: &actions) }
        actions.releasedStorages.append(contentsOf: group)
        return true
    }

    // MARK: Events

    /// Counts this storage's table in its root's `CancelState.noteAbsorbedTableEmptied` if it
    /// is an absorbed one and empty now (after an event that may have freed its last slot); the
    /// root is locked by the caller.
    @inline(__always)
    private func noteIfEmptied(under root: CancelStorage) {
        if root !== self, members.inUse == 0 { root.state.noteAbsorbedTableEmptied() }
    }

    /// Lists this absorbed storage in its active root's list again if `pruneAbsorbed` dropped
    /// it while its table was empty, now that it has a slot (the root is locked by the caller).
    @inline(__always)
    private func relistIfPruned(under root: CancelStorage) {
        if root !== self, !members.isInRootsList, root.state.isActive {
            root.state.relist(self)
            members.isInRootsList = true
        }
    }

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

    /// A step body must not start once the chain was cancelled. (A member cancelled alone has
    /// its promise rejected at once: its step never asks.)
    @usableFromInline package func errorBeforeBody(key: UInt32) -> (any Error)? {
        readRoot { $0.cancelledError }
    }

    /// The listed members of the chain (of every table of its group).
    var memberCount: Int {
        let root = lockRoot()
        defer { root.unlock() }
        var count = root.members.listedCount
        for storage in root.state.absorbed { count += storage.members.listedCount }
        return count
    }

    /// The storages the chain's root lists as absorbed by joins (for tests of its bound).
    var absorbedCount: Int {
        let root = lockRoot()
        defer { root.unlock() }
        return root.state.absorbed.count
    }

    /// Slots allocated beyond the inline one in this storage's table (for tests).
    var memberCapacity: Int {
        let root = lockRoot()
        defer { root.unlock() }
        return members.capacity
    }

    /// Whether the member `key` of this storage is listed (its promise pending and not cancelled).
    func isListed(_ key: _CancelKey) -> Bool {
        let root = lockRoot()
        defer { root.unlock() }
        return members.isListed(key)
    }

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
        var actions = CancelActions()
        actions.linkSite = site
        actions.excludedRoot = excluded
        let root = lockRoot()
        root.cancelGroup(with: error, at: site, into: &actions)
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    /// The state, for `debugDescription`: the cancellation (error and call site) if any, and
    /// the number of pending promises listed.
    var debugState: (error: (any Error)?, site: CancelSite?, pending: Int) {
        let pending = memberCount
        return readRoot { ($0.cancelledError, $0.cancelSite, pending) }
    }

    /// Cancels the chain if the member `key` of this storage is still listed (its promise
    /// pending): one lock for the check and the cancellation (what a `CancelBag` does for a
    /// stored promise, and `autoCancel` for a loser); links followed never reach `excluded`.
    func cancel(ifListed key: _CancelKey, excluding excluded: CancelStorage? = nil) {
        var actions = CancelActions()
        actions.linkSite = .library
        actions.excludedRoot = excluded
        let root = lockRoot()
        if members.isListed(key) {
            root.cancelGroup(with: boxedCancellation, at: .library, into: &actions)
        }
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    /// Cancels a loser of an `autoCancel` combinator, the member `key` of this storage, under
    /// one lock: alone (see `MemberTable.cancelAlone`) if its chain is the winner's, whose root
    /// is `winnerRoot`, so that chain is not marked cancelled; with its chain otherwise. Nothing
    /// if the loser is no longer listed (settled). Links followed never reach the winner's chain
    /// (a loser may wait on the winner).
    func cancelLoser(_ key: _CancelKey, winnerRoot: CancelStorage) {
        var actions = CancelActions()
        actions.linkSite = .library
        actions.excludedRoot = winnerRoot
        let root = lockRoot()
        if root === winnerRoot {
            _ = members.cancelAlone(key, home: self, with: boxedCancellation, into: &actions)
            noteIfEmptied(under: root)
        } else if members.isListed(key) {
            root.cancelGroup(with: boxedCancellation, at: .library, into: &actions)
        }
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    /// Adds a step that follows `upstream`, in one locked section: reserves its slot (see
    /// `MemberTable.reserve`), makes the step with `make` (given the slot's key: it only
    /// allocates and initialises, no user code runs under the lock), lists it, and counts the
    /// step's `CancellablePromise` as a new handle. The step is not connected to its source yet:
    /// nothing can run its body or settle it but this chain's cancellation, so listing it before
    /// it is connected decides everything a settle could race with. The caller connects it.
    @inlinable
    func _addStep<U>(
        upstream: _CancelKey, isObserver: Bool, _ make: (_CancelKey) -> _UnconnectedStep<U>
    ) -> (step: _UnconnectedStep<U>, key: _CancelKey) {
        let (root, key) = _lockRootAndReserve(upstream: upstream, isObserver: isObserver)
        let step = make(key)
        _listAndUnlock(key, target: step.promise, root: root)
        return (step, key)
    }

    /// The first half of `_addStep`: locks the root and reserves a slot; returns with the lock
    /// held.
    @usableFromInline func _lockRootAndReserve(upstream: _CancelKey, isObserver: Bool) -> (CancelStorage, _CancelKey) {
        let root = lockRoot()
        let key = members.reserve(upstream: upstream, isObserver: isObserver, cancelBody: nil)
        relistIfPruned(under: root)
        return (root, key)
    }

    /// The second half of `_addStep`: lists the step `target` reserved as `key`, or settles the
    /// matter at once if the chain was cancelled or abandoned, unlocks `root`, counts the
    /// step's `CancellablePromise` as a handle and runs what listing decided.
    @usableFromInline func _listAndUnlock(_ key: _CancelKey, target: any CancelTarget, root: CancelStorage) {
        if root.state.isActive {
            // The common case: nothing to do after the lock.
            members.listActive(key, target: target)
            root.unlock()
            addHandle()
            return
        }
        var actions = CancelActions()
        members.list(key, target: target, phase: root.state.phase, home: self, into: &actions)
        noteIfEmptied(under: root)
        root.unlock()
        addHandle()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    // MARK: Handles

    /// Counts a new handle of this storage, made from an existing one (so the count is not zero:
    /// a chain whose last handle went away never gets one again).
    @inline(__always)
    func addHandle() {
        let count = cpk_counter_add(handleCountPointer, 1)
        precondition(count > 1, "CancelStorage.addHandle: the chain has no handle left to make one from")
    }

    /// Makes `context`, this new storage's creator, the context its promises return.
    func adopt(_ context: CancelContext) {
        lock()
        publicContext = context
        unlock()
    }

    /// The chain's public context: the one handed out before if it is still alive, so that
    /// every promise of the chain returns the same, or a new one (a new handle).
    func context() -> CancelContext {
        lock()
        defer { unlock() }
        if let context = publicContext { return context }
        addHandle()
        let context = CancelContext(counted: self)
        publicContext = context
        return context
    }

    /// Makes `promise` a member (attaching this storage to it, with the member's slot as key),
    /// following `upstream`, with `cancel` to stop its task; or settles the matter at once if
    /// the promise has settled or the chain was cancelled or abandoned. One lock: the promise's
    /// lock is taken under it to attach.
    /// `addingHandle`: the new member's `CancellablePromise` is a new handle of this storage
    /// (not its creator, which the storage counts from the start).
    @usableFromInline func _add(
        _ promise: any CancelTarget, upstream: _CancelKey?, cancel: (() -> Void)?, addingHandle: Bool
    ) -> _CancelKey {
        if addingHandle { addHandle() }
        let root = lockRoot()
        let key = members.reserve(upstream: upstream, isObserver: false, cancelBody: cancel)
        relistIfPruned(under: root)
        let (attached, previous, previousKey) = promise.replaceAttachment(with: self, key: key.index)
        if attached, let previous, !(previous is PromiseCancellation) {
            // Keeps the attachment it had (not a producer's task, which the cancel closure
            // stands for), to tell when it settles.
            members.setEarlier(EarlierAttachment(attachment: previous, key: previousKey), for: key)
        }
        if attached, root.state.isActive {
            // The common case: nothing to do after the lock but release a producer's task.
            members.listActive(key, target: promise)
            root.unlock()
            withExtendedLifetime(previous) {}
            return key
        }
        var actions = CancelActions()
        if attached {
            members.list(key, target: promise, phase: root.state.phase, home: self, into: &actions)
        } else {
            // Settled already: nothing to cancel; the closure is released uncalled.
            actions.release(members.unreserve(key))
        }
        noteIfEmptied(under: root)
        root.unlock()
        // A producer's task, released here, outside the lock.
        withExtendedLifetime(previous) {}
        if !actions.isEmpty { CancelStorage.finish(&actions) }
        return key
    }

    /// A member's promise settled (see `MemberTable.memberSettled`): one lock, no recorded
    /// actions.
    @usableFromInline package func promiseDidSettle(key: UInt32) {
        let root = lockRoot()
        var (released, earlier) = members.memberSettled(Int(key))
        noteIfEmptied(under: root)
        root.unlock()
        if let earlier { earlier.attachment.promiseDidSettle(key: earlier.key) }
        if let link = released.link {
            // Released like every other link: without recursing (see `LinkRelease`).
            released.link = nil
            var links = [link]
            LinkRelease.release(&links)
        }
        withExtendedLifetime(released) {}
    }

    /// Records a link of the member `key` of this storage (see `MemberTable.link`).
    func link(_ key: _CancelKey, _ link: CancelLink, whileBodyRuns: Bool) {
        var actions = CancelActions()
        let root = lockRoot()
        members.link(key, link, phase: root.state.phase, whileBodyRuns: whileBodyRuns, into: &actions)
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions) }
    }

    /// A handle of this storage went away: one atomic decrement, and for the last handle the
    /// decision of `CancelState.lastHandleReleased` under the lock.
    @usableFromInline func releaseHandle() {
        var storage: CancelStorage? = self
        while let current = storage {
            storage = nil
            let remaining = cpk_counter_add(current.handleCountPointer, -1)
            precondition(remaining >= 0, "CancelStorage.releaseHandle: a handle was released twice")
            guard remaining == 0 else { return }
            var actions = CancelActions()
            current.lock()
            switch current.state.lastHandleReleased() {
            case .none:
                break
            case .abandoned(let group):
                // An abandoned root: every table of its group is guarded by its lock.
                current.members.abandonMembers(into: &actions)
                for absorbed in group { absorbed.members.abandonMembers(into: &actions) }
                actions.releasedStorages = group
            case .release(let holding):
                storage = holding
            }
            current.unlock()
            if !actions.isEmpty { actions.run() }
        }
    }

    /// Makes this chain and `other`'s one: afterwards cancelling either cancels both. If either
    /// was cancelled already, the joined chain is cancelled.
    ///
    /// The only place that holds two storage locks: both roots, taken in address order (so two
    /// joins cannot deadlock), so that the direction is decided while neither can change.
    @usableFromInline func join(_ other: CancelStorage) {
        while true {
            let a = root, b = other.root
            if a === b { return }
            let (first, second) = ObjectIdentifier(a) < ObjectIdentifier(b) ? (a, b) : (b, a)
            first.lock()
            second.lock()
            var actions = CancelActions()
            let outcome = CancelState.join(
                &a.state, b: &b.state, aStorage: a, bStorage: b, aIsEmpty: a.members.inUse == 0,
                bIsEmpty: b.members.inUse == 0)
            switch outcome {
            case .joined:
                let (root, absorbed) = a.state.isActive ? (a, b) : (b, a)
                // The absorbed storage counts as a handle of its root while it has handles.
                root.addHandle()
                absorbed.members.isInRootsList = true
                actions.releasedStorages = root.state.pruneAbsorbed { storage in
                    guard storage.members.inUse == 0 else { return false }
                    storage.members.isInRootsList = false
                    return true
                }
            case .cancelled(let group, let error):
                // Absorbed by a cancelled root: the absorbed group's tables are cancelled, in
                // chain order as `cancel` does; their roots' locks are both held.
                for storage in group { storage.members.cancelMembers(with: error, home: storage, into: &actions) }
                actions.releasedStorages = group
            case .done, .retry:
                break
            }
            second.unlock()
            first.unlock()
            if case .retry = outcome { continue }
            CancelStorage.finish(&actions)
            return
        }
    }
}
/// `CancellablePromiseError.cancelled`, boxed once: `cancel()` would otherwise allocate an error
/// box on every call.
let boxedCancellation: any Error & Sendable = CancellablePromiseError.cancelled
