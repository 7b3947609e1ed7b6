import Dispatch
import PromiseCore

// The cancellation graph of cancellable chains.
//
// Objects and what keeps them alive:
// - A *handle* is what must be held to be able to cancel a chain: any `CancellablePromise` of
//   the chain, or a `CancelContext` (made only when asked for, one per chain while it lives).
//   Links, finalizers, bags and `autoCancel` combinators hold a promise of the chain as their
//   handle (`_CancelHandle`).
// - `CancelStorage` is the chain's shared state, behind one lock: a `ChainState` (the state
//   machine, ChainState.swift) whose `MemberTable` (MemberTable.swift) has a slot per pending
//   promise of the chain. The storage decides nothing: it finds and locks the chain's root
//   (`withRoot` and its two lighter forms), calls one event of the root's state machine,
//   unlocks, and runs what the event recorded (`ChainActions`, ChainActions.swift). Nothing
//   else takes a chain's lock. Handles count themselves in their storage, atomically
//   (CancelHandle.swift: a promise going away takes no lock unless it is the last handle);
//   when the last handle goes away the chain is *abandoned*: its
//   members drop their promises, cancel closures and links (uncalled), so nothing but the work
//   itself (a resolver, an upstream promise) keeps the promises alive, and abandoned work that
//   nothing can settle is freed like any unreferenced promise.
// - A member is a slot, not an object. Its promise has the storage as its attachment, with the
//   slot's index as its attachment key: the promise tells the storage "member k settled" and
//   asks "may member k's body start?". The slot holds the promise, its cancel closure, the chain
//   it waits on (a *link*) and the key of its upstream step; all of that is dropped when the
//   promise settles, is cancelled, or is abandoned, so no cycle outlives the work. What a member
//   is outside the table is an immutable key (`SlotKey`: slot and generation), held by its
//   `CancellablePromise`, by the steps downstream and by the step's body (`_ChainMember`).
//   A slot is freed only once its promise will never report to it again (its settle
//   notification arrived, or was taken care of when a cancellation rejected it under the lock),
//   so the key a promise carries never names another member; the generation tells every other
//   holder of a key that the slot was reused.
//
// Joins (`cancellize(cancelContext:)` on a cancellable promise) make one storage forward to the
// other's root (union by size of the groups). Members never move: their promises keep their
// storage and slot, and the absorbed storage's table moves into the root's state machine, which
// finds it by the storage's identity (`ChainState.absorbed`), so that cancelling or abandoning
// the chain walks every table of the group (iteratively) and the machine refers to no storage.
// Where a storage forwards (`Forwarding`) is guarded by its own lock; the machine by its root's.
// An absorbed storage counts as one handle of the storage that absorbed it while it has handles
// of its own: the machine records which do (`handlesGone` decides), the storage keeps the
// reference to release (`Forwarding.forwarded(holding:)`).
// Forwarding never loops: a join decides with both roots locked, only an active root is ever
// absorbed, and a cancelled root is never absorbed (joining a cancelled chain cancels the
// other one).
//
// Links are not joins: a `then`/`recover` body that returns a cancellable promise links the
// step waiting on it to that promise's chain. Cancelling the waiting chain cancels the linked
// one; the link ends when the step settles.
//
// A running body's token (`CancellationToken.current`): while a member's body runs, PromiseCore
// marks the storage and the member's slot as the thread's running body; a body that reads
// `current` asks the storage, whose machine makes the member's token once and keeps it by
// (storage identity, slot) in `ChainState.bodyTokens` until the member leaves (completed "not
// cancelled") or a cancellation that finds the member pending cancels it.
//
// Lock order: only a join holds two storage locks, those of two roots, taken in address order.
// A storage lock may be held while taking promise locks (to reject the chain's promises, to
// attach the storage to a promise), never the reverse. User code (cancel closures,
// handlers, deinits of captured objects) never runs under a storage lock.

// MARK: - Storage

/// The lock and state of a chain (see the top of this file), and the attachment of its members'
/// promises. Never exposed: users hold `CancelContext` handles.
///
/// A `ManagedBuffer`, as swift-nio's lock storage is: its header is the storage's own fields
/// with its lock (`own`), its one element the chain's state machine (`chain`, guarded by the
/// root's lock). Both are reached through the buffer's pointers, so the handle count has a
/// stable address, and the fields guarded by different locks are different memory, never
/// accessed as one variable. The header is the buffer's first stored property and the lock word
/// the header's first field, so the lock is an inline lock word by PromiseCore's rule
/// (Lock.swift), taken with `lockWordLock(of:)` as every other one (`LockWordLayoutTests`
/// checks its address).
@usableFromInline
final class CancelStorage: ManagedBuffer<OwnFields, ChainState>, PromiseAttachment {
    // Not `Sendable` (a `ManagedBuffer` cannot be): its holders share it between threads
    // unchecked (`nonisolated(unsafe)`, `@unchecked Sendable`), safe because `own`'s fields are
    // only touched with this storage's lock held (the handle count only atomically), `chain`
    // with its root's.

    /// Where a storage's events are decided: in itself while it is a root, in the root it
    /// forwards to once a join absorbed it.
    enum Forwarding {
        case root
        /// Absorbed by a join: `next` leads to the root. `holding` is the storage this one
        /// counts as a handle of (until its own handles are gone), if any.
        case forwarded(next: CancelStorage, holding: CancelStorage?)
    }

    /// A storage whose first handle is its creator (a `CancelContext` or the chain's first
    /// `CancellablePromise`).
    @usableFromInline static func make() -> CancelStorage {
        let buffer = CancelStorage.create(minimumCapacity: 1) { _ in OwnFields() }
        buffer.withUnsafeMutablePointerToElements { $0.initialize(to: ChainState()) }
        return unsafeDowncast(buffer, to: CancelStorage.self)
    }

    deinit {
        _ = withUnsafeMutablePointerToElements { $0.deinitialize(count: 1) }
        lockWordDestroy(of: self)
    }

    /// The chain's state machine if this storage is a root; unused once a join absorbed it (its
    /// table moved into the root's machine). Guarded by the lock of the root.
    var chain: ChainState {
        @inline(__always) unsafeAddress { UnsafePointer(withUnsafeMutablePointerToElements { $0 }) }
        @inline(__always) unsafeMutableAddress { withUnsafeMutablePointerToElements { $0 } }
    }

    /// This storage's own fields and lock.
    @inline(__always) var own: UnsafeMutablePointer<OwnFields> {
        withUnsafeMutablePointerToHeader { $0 }
    }

    @inline(__always) func lock() { lockWordLock(of: self) }
    @inline(__always) func unlock() { lockWordUnlock(of: self) }

    /// Guarded by this storage's own lock.
    var forwarding: Forwarding {
        @inline(__always) get { own.pointee.forwarding }
        @inline(__always) set { own.pointee.forwarding = newValue }
    }

    // MARK: The critical section

    /// Locks and returns the root this storage forwards to (itself unless absorbed by a join),
    /// shortening the path for the next caller.
    @inline(__always)
    func lockRoot() -> CancelStorage {
        // The common case, a storage no join absorbed, inlined: no reference taken or dropped.
        lock()
        guard case .forwarded = own.pointee.forwarding else { return self }
        return lockForwardedRoot()
    }

    /// `lockRoot` for a storage absorbed by a join, called with this storage locked (its
    /// forwarding read there, once): unlocks it and follows the path to the root.
    @inline(never)
    func lockForwardedRoot() -> CancelStorage {
        guard case .forwarded(let first, _) = forwarding else {
            preconditionFailure("CancelStorage.lockForwardedRoot: the storage is a root")
        }
        unlock()
        var storage = first
        var hops = 1
        while true {
            storage.lock()
            guard case .forwarded(let next, _) = storage.forwarding else { break }
            storage.unlock()
            storage = next
            hops += 1
        }
        if hops > 1 {
            // Path compression: point straight at the root found.
            let root = storage
            root.unlock()
            lock()
            if case .forwarded(let next, let holding) = forwarding, next !== root {
                forwarding = .forwarded(next: root, holding: holding)
            }
            unlock()
            return root.lockRoot()
        }
        return storage
    }

    /// Locks the root this storage forwards to (itself unless absorbed by a join) and returns
    /// it unretained: `lockRoot()` returns it retained, a reference taken and dropped around
    /// every event (about 40 instructions). Safe while its lock is held: the root cannot be
    /// absorbed meanwhile, so this storage's path of strong `forwarding` references leads to it
    /// and keeps it alive. Used through `_withUnsafeGuaranteedRef`, which takes no reference.
    @inline(__always)
    private func lockedRoot() -> Unmanaged<CancelStorage> {
        lock()
        guard case .forwarded = own.pointee.forwarding else { return Unmanaged.passUnretained(self) }
        return Unmanaged.passUnretained(lockForwardedRoot())
    }

    /// Runs `body` with the root locked (see `lockedRoot()`), and unlocks it.
    @inline(__always)
    func withLockedRoot<R>(_ body: (_ root: CancelStorage) -> R) -> R {
        lockedRoot()._withUnsafeGuaranteedRef { root in
            let result = body(root)
            root.unlock()
            return result
        }
    }

    /// The critical section of an event that records what to do after the lock (`withRootOnly`
    /// and `withRoot(common:general:)` are the lighter forms, for events that record nothing or
    /// only outside their common case): locks the root, runs `event` with the root and this
    /// storage as the member's home (the state machine's event is called there), unlocks, and
    /// runs what the event recorded. Links followed are cancelled at `site`, and never reach the
    /// chain whose root is `excluded`.
    @inline(__always) @discardableResult
    private func withRoot<R>(
        site: CancelSite = .library, excluding excluded: CancelStorage? = nil,
        _ event: (_ root: CancelStorage, _ home: MemberHome, _ actions: inout ChainActions) -> R
    ) -> R {
        var actions = ChainActions()
        let root = lockRoot()
        let result = event(root, home(under: root), &actions)
        root.unlock()
        if !actions.isEmpty { CancelStorage.finish(&actions, site: site, excluding: excluded) }
        return result
    }

    /// The critical section of an event that leaves nothing to do after the lock, or hands back
    /// what to release (`event`'s result).
    @inline(__always)
    private func withRootOnly<R>(_ event: (_ root: CancelStorage, _ home: MemberHome) -> R) -> R {
        withLockedRoot { root in event(root, home(under: root)) }
    }

    /// The critical section of an event with a common case that leaves nothing to do after the
    /// lock: `common` is the state machine's event for it, which returns `false` (having changed
    /// nothing) when the case is not the common one; `general` then decides in the same locked
    /// section, recording into actions run after it. (Making and dropping an empty
    /// `ChainActions` for every step would cost about 50 instructions per chain link.)
    @inline(__always)
    private func withRoot(
        common: (_ root: CancelStorage, _ home: MemberHome) -> Bool,
        general: (_ root: CancelStorage, _ home: MemberHome, _ actions: inout ChainActions) -> Void
    ) {
        lockedRoot()._withUnsafeGuaranteedRef { root in
            let home = home(under: root)
            if common(root, home) {
                root.unlock()
                return
            }
            var actions = ChainActions()
            general(root, home, &actions)
            root.unlock()
            // `root` is not used once unlocked (a join may absorb it and its last reference go).
            if !actions.isEmpty { CancelStorage.finish(&actions, site: .library, excluding: nil) }
        }
    }

    /// Where this storage's members are in the machine of `root`, the root it forwards to.
    @inline(__always)
    func home(under root: CancelStorage) -> MemberHome {
        MemberHome(storage: ObjectIdentifier(self), isRoot: self === root)
    }

    /// Reads the root's state with its lock held.
    @inline(__always)
    private func readRoot<R>(_ body: (_ root: CancelStorage) -> R) -> R {
        withLockedRoot(body)
    }

    /// Follows the links recorded in `actions` (cancelling the chains they reach, each in its
    /// own critical section, iteratively: the same value collects what those cancels record),
    /// then runs the actions.
    private static func finish(_ actions: inout ChainActions, site: CancelSite, excluding excluded: CancelStorage?) {
        while let (link, error) = actions.nextLink() {
            switch link {
            case .chain(let handle):
                let root = handle._handleStorage.lockRoot()
                root.chain.linkedCancel(
                    with: error, at: site, root: ObjectIdentifier(root), excluding: excluded.map(ObjectIdentifier.init),
                    into: &actions)
                root.unlock()
            case .task(let body):
                actions.call(body)
            case .both(let first, let second):
                actions.follow(second, error: error)
                actions.follow(first, error: error)
            }
        }
        actions.run()
    }

    // MARK: Reading

    @usableFromInline var cancelledError: (any Error)? {
        readRoot { $0.chain.cancelledError }
    }

    /// What an observer of this chain passes on instead of its source's result once its body
    /// has run (see `ChainState.errorPassedOnByObservers`).
    var errorPassedOnByObservers: (any Error)? {
        readRoot { $0.chain.errorPassedOnByObservers }
    }

    /// A step body must not start once the chain was cancelled. (A member cancelled alone has
    /// its promise rejected at once: its step never asks.)
    @usableFromInline package func errorBeforeBody(key: UInt32) -> (any Error)? {
        readRoot { $0.chain.cancelledError }
    }

    /// The token of the running body of this storage's member of slot `slot`, whose promise is
    /// `step` (see `ChainState.runningBodyToken`): what `CancellationToken.current` returns.
    func runningBodyToken(slot: UInt32, step: AnyObject?) -> CancellationToken {
        let answer = withRootOnly { root, home in
            root.chain.runningBodyToken(slot: slot, step: step.map(ObjectIdentifier.init), in: home)
        }
        switch answer {
        case .token(let token): return token
        case .cancelled: return .cancelledAlready
        case .none: return .none
        }
    }

    /// Runs `body`, the body of a cancellable promise's initialiser, before the promise it makes
    /// is this new storage's first member: as the running body of that member-to-be, whose
    /// token (if `body` reads `CancellationToken.current`) becomes the member's when the promise
    /// is added (see `ChainState.adoptFirstBodyToken`).
    @inlinable func _runFirstBody(_ body: () throws -> Void) rethrows {
        try _runAsRunningBody(owner: self, key: UInt32.max, body)
    }

    /// The listed members of the chain (of every table of its group).
    var memberCount: Int {
        readRoot { $0.chain.listedCount }
    }

    /// The storages the chain's root lists in its group (for tests of its bound).
    var absorbedCount: Int {
        readRoot { $0.chain.absorbed.count }
    }

    /// Slots allocated beyond the inline one in this storage's table (for tests).
    var memberCapacity: Int {
        readRoot { root in root.chain.readTable(home(under: root)) { $0.capacity } }
    }

    /// The root this storage forwards to now (itself unless absorbed by a join).
    var root: CancelStorage {
        readRoot { $0 }
    }

    #if DEBUG
    /// How many forwarding steps lead from this storage to its root now, each read under its
    /// storage's lock (for tests of path compression: `lockRoot` leaves at most one).
    var forwardingHops: Int {
        var storage = self
        var hops = 0
        while true {
            storage.lock()
            guard case .forwarded(let next, _) = storage.forwarding else {
                storage.unlock()
                return hops
            }
            storage.unlock()
            storage = next
            hops += 1
        }
    }
    #endif

    /// The state, for `debugDescription`: the cancellation (error and call site) if any, and
    /// the number of pending promises listed.
    var debugState: (error: (any Error)?, site: CancelSite?, pending: Int) {
        readRoot { ($0.chain.cancelledError, $0.chain.cancelSite, $0.chain.listedCount) }
    }

    // MARK: Events

    /// Cancels the chain (see `ChainState.cancel`); links followed never reach `excluded`.
    func cancel(with error: any Error, at site: CancelSite, excluding excluded: CancelStorage? = nil) {
        withRoot(site: site, excluding: excluded) { root, _, actions in
            root.chain.cancel(with: error, at: site, root: ObjectIdentifier(root), into: &actions)
        }
    }

    /// Cancels the chain if the member `key` of this storage is still listed (see
    /// `ChainState.cancelIfListed`): one lock for the check and the cancellation.
    func cancel(ifListed key: SlotKey) {
        withRoot { root, home, actions in
            root.chain.cancelIfListed(key, in: home, root: ObjectIdentifier(root), into: &actions)
        }
    }

    /// Cancels the input `key` of this storage of an `autoCancel` combinator that the member
    /// `winnerKey` of `winner` settled, under one lock (see `ChainState.cancelLoser`: the machine
    /// decides whether it is the winner itself, or shares the winner's chain). Links followed
    /// never reach the winner's chain (a loser may wait on the winner).
    func cancelLoser(_ key: SlotKey, winner: CancelStorage, winnerKey: SlotKey) {
        withRoot(excluding: winner) { root, home, actions in
            root.chain.cancelLoser(
                key, in: home, winner: (ObjectIdentifier(winner), winnerKey), root: ObjectIdentifier(root),
                into: &actions)
        }
    }

    /// Reserves the slot of a step that follows `upstream` (see `ChainState.reserve`), and
    /// counts the step's `CancellablePromise` as a new handle. The caller makes the step with
    /// the key (no lock held: it only allocates) and lists it with `_listStep`; nothing can
    /// settle the step meanwhile (it is connected to its source only once listed), and a
    /// cancellation meanwhile is decided when it is listed. Not inlinable: the lock is taken
    /// and released in this module.
    @usableFromInline func _reserveStep(upstream: SlotKey, isObserver: Bool) -> SlotKey {
        let key = withRootOnly { root, home in
            root.chain.reserve(in: home, upstream: upstream, isObserver: isObserver, cancelBody: nil)
        }
        addHandle()
        return key
    }

    /// Makes `step` a member following `upstream` in one locked section: reserves its slot (see
    /// `ChainState.reserve`), sets the slot as the step's attachment key, and lists it (see
    /// `ChainState.list`); counts the step's `CancellablePromise` as a new handle. `step` was
    /// made with this storage as its attachment and is not yet connected to its source, so no
    /// other thread can see it before it is listed, and nothing settles it meanwhile. For a
    /// step whose body needs no key of its own (`map`, `done`…): `_reserveStep` and `_listStep`
    /// take the lock twice, the key known before the step is made. Not inlinable: the lock is
    /// taken and released in this module.
    @usableFromInline func _addStep(_ step: any CancelTarget, upstream: SlotKey) -> SlotKey {
        var key = SlotKey.none
        withRoot(
            common: { root, home in
                key = root.chain.reserve(in: home, upstream: upstream, isObserver: false, cancelBody: nil)
                step.setAttachmentKeyUnshared(key.slot)
                return root.chain.listIfActive(key, target: step, in: home)
            },
            general: { root, home, actions in root.chain.list(key, target: step, in: home, into: &actions) })
        addHandle()
        return key
    }

    /// Lists the step `target` reserved as `key` by `_reserveStep` (see `ChainState.list`).
    @usableFromInline func _listStep(_ key: SlotKey, target: any CancelTarget) {
        withRoot(
            common: { root, home in root.chain.listIfActive(key, target: target, in: home) },
            general: { root, home, actions in root.chain.list(key, target: target, in: home, into: &actions) })
    }

    /// Makes `promise` a member (attaching this storage to it, with the member's slot as key),
    /// following `upstream`, with `cancel` to stop its task (see `ChainState.attach`). One lock:
    /// the promise's lock is taken under it to attach.
    /// `addingHandle`: the new member's `CancellablePromise` is a new handle of this storage
    /// (not its creator, which the storage counts from the start).
    @usableFromInline func _add(
        _ promise: any CancelTarget, upstream: SlotKey?, cancel: (() -> Void)?, addingHandle: Bool
    ) -> SlotKey {
        if addingHandle { addHandle() }
        var replaced: AnyObject?
        let key = withRoot { root, home, actions in
            let key = root.chain.reserve(in: home, upstream: upstream, isObserver: false, cancelBody: cancel)
            let outcome = promise.replaceAttachment(with: self, key: key.slot)
            replaced = outcome.replaced
            root.chain.attach(key, target: promise, attached: outcome.attached, in: home, into: &actions)
            return key
        }
        // A producer's task, released here, outside the lock.
        withExtendedLifetime(replaced) {}
        return key
    }

    /// A member's promise settled (see `ChainState.memberSettled`): what the member held is
    /// released after the lock.
    @usableFromInline package func promiseDidSettle(key: UInt64) {
        var left = withRootOnly { root, home in root.chain.memberSettled(Int(key), in: home) }
        left.release()
    }

    /// Records a link of the member `key` of this storage (see `ChainState.link`); `reaching`
    /// is the storage of the chain a `.chain` link reaches (a link into this very chain links
    /// nothing: the machine decides it under this chain's lock).
    func link(_ key: SlotKey, _ link: CancelLink, whileBodyRuns: Bool, reaching: ObjectIdentifier? = nil) {
        withRoot(
            common: { root, home in
                root.chain.linkIfWaiting(key, link, in: home, reaching: reaching, root: ObjectIdentifier(root))
            },
            general: { root, home, actions in
                root.chain.link(
                    key, link, whileBodyRuns: whileBodyRuns, in: home, reaching: reaching, root: ObjectIdentifier(root),
                    into: &actions)
            })
    }

    /// Makes this chain and `other`'s one (see `ChainState.join`): afterwards cancelling either
    /// cancels both.
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
            guard case .root = a.forwarding, case .root = b.forwarding else {
                // One of the two was absorbed elsewhere meanwhile: find the roots again.
                second.unlock()
                first.unlock()
                continue
            }
            var actions = ChainActions()
            if let absorption = ChainState.join(
                &a.chain, ObjectIdentifier(a), &b.chain, ObjectIdentifier(b), into: &actions)
            {
                let (absorbed, root) = absorption.absorbed == ObjectIdentifier(a) ? (a, b) : (b, a)
                absorbed.forwarding = .forwarded(next: root, holding: absorption.countsAsHandle ? root : nil)
                if absorption.countsAsHandle { root.addHandle() }
            }
            second.unlock()
            first.unlock()
            if !actions.isEmpty { CancelStorage.finish(&actions, site: .library, excluding: nil) }
            return
        }
    }
}
