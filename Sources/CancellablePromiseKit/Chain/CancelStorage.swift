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
//   promise of the chain. The machine decides, the storage acts: the storage locks the chain's
//   root, calls one event of the root's machine, unlocks, and runs the `ChainOutcome` the event
//   returned (`perform`, the one way outcomes are run: ChainOutcome.swift, ChainEffects.swift).
//   There are three ways into a storage's lock: `withRoot` (every event and read of the
//   machine), `join` (two roots at once) and `withOwnFields` (the storage's own fields, never the
//   machine). Handles count themselves in their storage, atomically
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
// finds it by the storage's identity (`ChainState.Group`), so that cancelling or abandoning
// the chain walks every table of the group (iteratively) and the machine refers to no storage.
// Where a storage forwards (`Forwarding`) is guarded by its own lock; the machine by its root's.
// An absorbed storage counts as one handle of the storage that absorbed it while it has handles
// of its own: the machine records which do (`handlesGone` decides, returning `releaseHold`), the
// storage keeps the reference to release (`Forwarding.forwarded(holding:)`). Path compression
// (`lockForwardedRoot`) and the join's retry are the storage's own: they are about which
// storage is the root, which the machine, referring to no storage, does not know.
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
// `current` asks the storage, whose machine makes the member's token once and keeps it in the
// member's slot (`MemberContents.token`) until the member leaves (completed "not cancelled") or
// a cancellation that finds the member pending cancels it.
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

    /// The context `context()` handed out, while it lives. Guarded by this storage's own lock.
    var publicContext: CancelContext? {
        get { own.pointee.publicContext }
        set { own.pointee.publicContext = newValue }
    }

    // MARK: The three ways into the lock

    /// The way to the chain's machine, for every event and every read: locks the root this
    /// storage forwards to (itself unless absorbed by a join), runs `body` with the root and this
    /// storage as the member's home (an event or a query of `root.chain` is called there), and
    /// unlocks. An event's `ChainOutcome` is returned for the caller to `perform` after the lock.
    @inline(__always)
    func withRoot<R: ~Copyable>(_ body: (_ root: CancelStorage, _ home: MemberHome) -> R) -> R {
        lock()
        guard case .forwarded = own.pointee.forwarding else {
            // A root (the common case): the caller's reference to this storage keeps it alive.
            let result = body(self, MemberHome(storage: ObjectIdentifier(self), isRoot: true))
            unlock()
            return result
        }
        return withForwardedRoot(body)
    }

    /// `withRoot` for a storage a join absorbed, called with it locked (the path to the root is
    /// followed out of line, in `lockForwardedRoot`).
    @inline(__always)
    private func withForwardedRoot<R: ~Copyable>(_ body: (_ root: CancelStorage, _ home: MemberHome) -> R) -> R {
        let root = lockForwardedRoot()
        let result = body(root, MemberHome(storage: ObjectIdentifier(self), isRoot: false))
        root.unlock()
        return result
    }

    /// The way to this storage's own fields (`forwarding`, `publicContext`), never to the
    /// machine: locks this storage alone and runs `body`, which reads and writes them through
    /// their accessors. Each accessor touches its own field: the lock word and the handle count
    /// sit in the same header and are only ever accessed atomically.
    @inline(__always)
    func withOwnFields<R>(_ body: () -> R) -> R {
        lock()
        defer { unlock() }
        return body()
    }

    // The third way is `join`, the one place that holds two locks (below).

    /// Called by `withRoot` with this storage locked, once a join absorbed it (its forwarding
    /// read there): unlocks it, follows the path to the root, and returns the root locked,
    /// pointing this storage straight at it (path compression) if the path was longer.
    @inline(never)
    private func lockForwardedRoot() -> CancelStorage {
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
        guard hops > 1 else { return storage }
        let root = storage
        root.unlock()
        withOwnFields {
            if case .forwarded(let next, let holding) = forwarding, next !== root {
                forwarding = .forwarded(next: root, holding: holding)
            }
        }
        // The root may have been absorbed since it was unlocked: start again from it.
        root.lock()
        guard case .forwarded = root.forwarding else { return root }
        return root.lockForwardedRoot()
    }

    /// Runs what an event decided (`outcome`), after the lock: what a member held is released
    /// (its link through `LinkRelease`, without recursing); the effects' links are followed
    /// first, each cancelling the chain it reaches in that chain's own event (at `site`, never
    /// reaching the chain whose root is `excluded`), what those return adopted by the same
    /// effects, so that every promise reached is rejected before any closure runs; then the
    /// closures, tokens, handlers and releases run (`ChainEffects.run`), and a handle this
    /// storage counted as is released. Iterative: a long path of links uses no stack.
    @inline(__always)
    func perform(
        _ outcome: consuming ChainOutcome, site: CancelSite = .library, excluding excluded: CancelStorage? = nil
    ) {
        switch consume outcome {
        case .none:
            return
        case .release(let contents):
            if contents.link != nil || contents.token != nil { contents.release() }
        case .run(let effects):
            run(effects, site: site, excluding: excluded)
        }
    }

    @inline(never)
    private func run(_ effects: consuming ChainEffects, site: CancelSite, excluding excluded: CancelStorage?) {
        let excludedRoot = excluded.map(ObjectIdentifier.init)
        while let (link, error) = effects.nextLink() {
            switch link {
            case .chain(let handle):
                let reached = handle._handleStorage.withRoot { root, _ in
                    root.chain.linkedCancel(
                        with: error, at: site, root: ObjectIdentifier(root), excluding: excludedRoot)
                }
                switch consume reached {
                case .none: break
                case .release(let contents): effects.release(contents)
                case .run(let other): effects.adopt(other)
                }
            case .task(let body):
                effects.call(body)
            case .both(let first, let second):
                effects.follow(second, error: error)
                effects.follow(first, error: error)
            }
        }
        let releasesHold = effects.releasesHold
        effects.run()
        if releasesHold, let held = takeHolding() { held.releaseHandle() }
    }

    // MARK: Reading

    @usableFromInline var cancelledError: (any Error)? {
        withRoot { root, _ in root.chain.cancelledError }
    }

    /// What an observer of this chain passes on instead of its source's result once its body
    /// has run (see `ChainState.errorPassedOnByObservers`).
    var errorPassedOnByObservers: (any Error)? {
        withRoot { root, _ in root.chain.errorPassedOnByObservers }
    }

    /// A step body must not start once the chain was cancelled. (A member cancelled alone has
    /// its promise rejected at once: its step never asks.)
    @usableFromInline package func errorBeforeBody(key: UInt32) -> (any Error)? {
        withRoot { root, _ in root.chain.cancelledError }
    }

    /// The token of the running body of this storage's member of slot `slot`, whose promise is
    /// `step` (see `ChainState.runningBodyToken`): what `CancellationToken.current` returns.
    func runningBodyToken(slot: UInt32, step: AnyObject?) -> CancellationToken {
        let answer = withRoot { root, home in
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
    /// is added (see `ChainState.attach`).
    @inlinable func _runFirstBody(_ body: () throws -> Void) rethrows {
        try _runAsRunningBody(owner: self, key: UInt32.max, body)
    }

    /// The listed members of the chain (of every table of its group).
    var memberCount: Int {
        withRoot { root, _ in root.chain.listedCount }
    }

    /// The storages the chain's root lists in its group (for tests of its bound).
    var absorbedCount: Int {
        withRoot { root, _ in root.chain.absorbedCount }
    }

    /// Slots allocated beyond the inline one in this storage's table (for tests).
    var memberCapacity: Int {
        withRoot { root, home in root.chain.capacity(of: home) }
    }

    /// The running bodies' tokens the chain keeps (for tests).
    var bodyTokenCount: Int {
        withRoot { root, _ in root.chain.bodyTokenCount }
    }

    /// The root this storage forwards to now (itself unless absorbed by a join).
    var root: CancelStorage {
        withRoot { root, _ in root }
    }

    #if DEBUG
    /// How many forwarding steps lead from this storage to its root now, each read under its
    /// storage's lock (for tests of path compression: `withRoot` leaves at most one).
    var forwardingHops: Int {
        var storage = self
        var hops = 0
        while case .forwarded(let next, _) = storage.withOwnFields({ storage.forwarding }) {
            storage = next
            hops += 1
        }
        return hops
    }
    #endif

    /// The state, for `debugDescription`: the cancellation (error and call site) if any, and
    /// the number of pending promises listed.
    var debugState: (error: (any Error)?, site: CancelSite?, pending: Int) {
        withRoot { root, _ in (root.chain.cancelledError, root.chain.cancelSite, root.chain.listedCount) }
    }

    // MARK: Events

    /// Cancels the chain (see `ChainState.cancel`); links followed never reach `excluded`.
    func cancel(with error: any Error, at site: CancelSite, excluding excluded: CancelStorage? = nil) {
        perform(
            withRoot { root, _ in root.chain.cancel(with: error, at: site, root: ObjectIdentifier(root)) },
            site: site, excluding: excluded)
    }

    /// Cancels the chain if the member `key` of this storage is still listed (see
    /// `ChainState.cancelIfListed`): one lock for the check and the cancellation.
    func cancel(ifListed key: SlotKey) {
        perform(withRoot { root, home in root.chain.cancelIfListed(key, in: home, root: ObjectIdentifier(root)) })
    }

    /// Cancels the chain if `promise` is still pending (see `ChainState.cancelIfPending`): one
    /// lock for the check and the cancellation.
    func cancel(ifPending promise: any CancelTarget) {
        perform(withRoot { root, _ in root.chain.cancelIfPending(promise, root: ObjectIdentifier(root)) })
    }

    /// Cancels the input `key` of this storage of an `autoCancel` combinator that the member
    /// `winnerKey` of `winner` settled, under one lock (see `ChainState.cancelLoser`: the machine
    /// decides whether it is the winner itself, or shares the winner's chain). Links followed
    /// never reach the winner's chain (a loser may wait on the winner).
    func cancelLoser(_ key: SlotKey, winner: CancelStorage, winnerKey: SlotKey) {
        let outcome = withRoot { root, home in
            root.chain.cancelLoser(
                key, in: home, winner: (ObjectIdentifier(winner), winnerKey), root: ObjectIdentifier(root))
        }
        perform(outcome, excluding: winner)
    }

    /// Reserves the slot of a step that follows `upstream` (see `ChainState.reserve`), and
    /// counts the step's `CancellablePromise` as a new handle. The caller makes the step with
    /// the key (no lock held: it only allocates) and lists it with `_listStep`; nothing can
    /// settle the step meanwhile (it is connected to its source only once listed), and a
    /// cancellation meanwhile is decided when it is listed. Not inlinable: the lock is taken
    /// and released in this module.
    @usableFromInline func _reserveStep(upstream: SlotKey, isObserver: Bool) -> SlotKey {
        let key = withRoot { root, home in
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
        let outcome = withRoot { root, home in
            key = root.chain.reserve(in: home, upstream: upstream, isObserver: false, cancelBody: nil)
            step.setAttachmentKeyUnshared(key.slot)
            return root.chain.list(key, target: step, in: home)
        }
        perform(outcome)
        addHandle()
        return key
    }

    /// Lists the step `target` reserved as `key` by `_reserveStep` (see `ChainState.list`).
    @usableFromInline func _listStep(_ key: SlotKey, target: any CancelTarget) {
        perform(withRoot { root, home in root.chain.list(key, target: target, in: home) })
    }

    /// Makes `promise` a member (attaching this storage to it, with the member's slot as key),
    /// following `upstream`, with `cancel` to stop its task (see `ChainState.attach`). One lock:
    /// the promise's lock is taken under it to attach. The attachment the promise had (a
    /// producer's task, which `cancel` stands for) is released after the lock.
    /// `addingHandle`: the new member's `CancellablePromise` is a new handle of this storage
    /// (not its creator, which the storage counts from the start).
    @usableFromInline func _add(
        _ promise: any CancelTarget, upstream: SlotKey?, cancel: (() -> Void)?, addingHandle: Bool
    ) -> SlotKey {
        if addingHandle { addHandle() }
        var key = SlotKey.none
        var replaced: AnyObject?
        let outcome = withRoot { root, home in
            key = root.chain.reserve(in: home, upstream: upstream, isObserver: false, cancelBody: cancel)
            let attaching = promise.replaceAttachment(with: self, key: key.slot)
            replaced = attaching.replaced
            return root.chain.attach(key, target: promise, attached: attaching.attached, in: home)
        }
        // A producer's task, released here, outside the lock.
        withExtendedLifetime(replaced) {}
        perform(outcome)
        return key
    }

    /// A member's promise settled (see `ChainState.memberSettled`): what the member held is
    /// released after the lock.
    @usableFromInline package func promiseDidSettle(key: UInt64) {
        perform(withRoot { root, home in root.chain.memberSettled(Int(key), in: home) })
    }

    /// Records a link of the member `key` of this storage (see `ChainState.link`); `reaching`
    /// is the storage of the chain a `.chain` link reaches (a link into this very chain links
    /// nothing: the machine decides it under this chain's lock).
    func link(_ key: SlotKey, _ link: CancelLink, whileBodyRuns: Bool, reaching: ObjectIdentifier? = nil) {
        let outcome = withRoot { root, home in
            root.chain.link(
                key, link, whileBodyRuns: whileBodyRuns, in: home, reaching: reaching, root: ObjectIdentifier(root))
        }
        perform(outcome)
    }

    /// Makes this chain and `other`'s one (see `ChainState.join`): afterwards cancelling either
    /// cancels both.
    ///
    /// The third way into the lock, and the only place that holds two storage locks: both roots,
    /// taken in address order (so two joins cannot deadlock), so that the direction is decided
    /// while neither can change; the absorbed root's forwarding is set under both.
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
            let joined = ChainState.join(&a.chain, ObjectIdentifier(a), &b.chain, ObjectIdentifier(b))
            if let absorption = joined.absorption {
                let (absorbed, root) = absorption.absorbed == ObjectIdentifier(a) ? (a, b) : (b, a)
                absorbed.forwarding = .forwarded(next: root, holding: absorption.countsAsHandle ? root : nil)
                if absorption.countsAsHandle { root.addHandle() }
            }
            second.unlock()
            first.unlock()
            perform(joined.outcome)
            return
        }
    }
}
