import Dispatch
import PromiseCore

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

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

// MARK: - Entries

/// One pending promise of a chain. Created before its promise is listed (a `then` body may link
/// a returned promise to it as soon as it runs); its mutable fields are guarded by the lock of
/// the root storage of `home`.
@usableFromInline
final class CancelEntry: PromiseAttachment, @unchecked Sendable {
    // @unchecked: every mutable field is guarded by the lock of `home`'s root storage.

    /// Not listed yet.
    static let unlisted = -1
    /// Settled, cancelled or abandoned: never listed again.
    static let done = -2

    /// The storage of the chain the entry was created in (it may forward to another).
    let home: CancelStorage
    /// Observers (`ensure`, `ensureThen`, `tap`) are not rejected by a cancellation: they pass it
    /// on when their body has run, so the chain settles in order.
    let isObserver: Bool

    /// Index in the listing storage's members, or one of the markers above.
    @exclusivity(unchecked) var index = CancelEntry.unlisted
    /// The promise to reject when the chain is cancelled.
    @exclusivity(unchecked) var target: (any CancelTarget)?
    /// Stops the promise's task; called at most once, only while the promise is pending.
    @exclusivity(unchecked) var cancelBody: (() -> Void)?
    /// Chains this step waits on: cancelled with it.
    @exclusivity(unchecked) var link: CancelLink?
    /// The entry of the step this one follows in the chain, to tell whether it waits behind an
    /// observer that has not run yet.
    @exclusivity(unchecked) var upstream: CancelEntry?
    /// Another attachment of the same promise, told when it settles.
    @exclusivity(unchecked) var earlier: (any PromiseAttachment)?
    /// Set when the entry is cancelled on its own (an `autoCancel` loser).
    @exclusivity(unchecked) var cancelledAlone = false
    /// Scratch for `CancelState.cancel`: whether the entry waits behind an observer.
    @exclusivity(unchecked) var waitsBehindObserver: Bool?

    /// Set as its promise's attachment when the promise was made (a chain step), so listing it
    /// needs no attachment swap.
    @usableFromInline let isAttachedAtCreation: Bool

    @usableFromInline
    init(
        home: CancelStorage, upstream: CancelEntry?, isObserver: Bool, cancel: (() -> Void)?,
        attachedAtCreation: Bool = false
    ) {
        self.home = home
        self.upstream = upstream
        self.isObserver = isObserver
        self.cancelBody = cancel
        self.isAttachedAtCreation = attachedAtCreation
    }

    /// The promise settled: leave the chain, releasing the cancel closure.
    @usableFromInline package func promiseDidSettle() {
        home.remove(self)
    }

    /// Links the chain of `next`, a promise a step body returned, to this step (see
    /// `CancelStorage.link`): a settled promise links nothing. Inlinable, so that the casts
    /// below are decided in the caller's specialization (no run-time metadata lookups for
    /// `CancellablePromise<U.T>` and `Guarantee<U.T>`); the rest is not generic.
    @inlinable
    func link<U: Thenable>(_ next: U) {
        if let cancellable = next as? CancellablePromise<U.T> {
            link(chainOf: cancellable.promise, cancellable.cancelContext)
        } else if !(next is Guarantee<U.T>) {
            link(taskOf: next.asPromise())
        }
    }

    /// `link(_:)` for a returned `CancellablePromise`: its chain, held through `context`.
    @usableFromInline
    func link(chainOf promise: any CancelTarget, _ context: CancelContext) {
        // A promise of this very chain links nothing: the chain cancels it anyway, and a link to
        // its own handle would keep the chain cancellable for ever.
        guard promise.isPendingLocked, !context.storage.isSameChain(as: home) else { return }
        home.link(self, .chain(context))
    }

    /// `link(_:)` for another returned promise: the task its producer attached, if any.
    @usableFromInline
    func link(taskOf promise: any CancelTarget) {
        if let task = promise.attachedCancellation {
            home.link(self, .task(task.cancel))
        }
    }

    /// `result`, or the chain's cancellation if the chain was cancelled: what an observer passes
    /// on once its body has run.
    @usableFromInline
    func passOn<T>(_ result: Result<T>) -> Result<T> {
        if let error = home.cancelledError { return .rejected(error) }
        return result
    }

    /// A step body must not start once the chain was cancelled, or this step cancelled alone.
    @usableFromInline package func errorBeforeBody() -> (any Error)? {
        home.errorBeforeBody(of: self)
    }
}

/// What cancelling a step cancels besides its own promise.
enum CancelLink {
    /// Another chain, held through its handle: cancelling cancels it.
    case chain(CancelContext)
    /// A producer's task.
    case task(() -> Void)
    /// Several of them.
    indirect case both(CancelLink, CancelLink)

    /// Adds `other` to `link`.
    static func adding(_ other: CancelLink, to link: CancelLink?) -> CancelLink {
        guard let link else { return other }
        return .both(link, other)
    }
}

// MARK: - The state machine

/// The state of one storage. Every event is a method that decides under the storage's lock and
/// returns what must be done after the lock is released.
struct CancelState {
    enum Phase {
        /// Listing the chain's pending promises.
        case active
        /// Cancelled with this error, from this call site; lists nothing, never changes again.
        case cancelled(any Error, CancelSite)
        /// No handle left: lists nothing, cancels nothing, never changes again.
        case abandoned
        /// Absorbed by a join: everything happens in `next`'s root. `holding` is the storage
        /// this one counts as a handle of (until its own handles are gone), if any.
        case forwarded(next: CancelStorage, holding: CancelStorage?)
    }

    private(set) var phase = Phase.active
    private(set) var members = MemberList()
    /// Live handles: `CancelContext`s of this storage, and storages forwarding here that still
    /// have handles of their own. Starts with the handle that creates the storage.
    private var handles = 1

    var cancelledError: (any Error)? {
        if case .cancelled(let error, _) = phase { return error }
        return nil
    }

    var cancelSite: CancelSite? {
        if case .cancelled(_, let site) = phase { return site }
        return nil
    }

    var memberCount: Int { members.count }
    var memberCapacity: Int { members.capacity }

    // MARK: Handles

    /// A handle of this storage went away. Decides whether the chain is abandoned now, or, for an
    /// absorbed storage, whether it stops counting as a handle of the one it forwards to.
    mutating func releaseHandle(into actions: inout CancelActions) -> CancelStorage? {
        precondition(handles > 0, "CancelContext: a handle was released twice")
        handles -= 1
        guard handles == 0 else { return nil }
        switch phase {
        case .active:
            phase = .abandoned
            let taken = members
            members = MemberList()
            taken.forEach { actions.abandon($0) }
            return nil
        case .forwarded(let next, let holding):
            phase = .forwarded(next: next, holding: nil)
            return holding
        case .cancelled, .abandoned:
            return nil
        }
    }

    // MARK: Members

    /// Lists `entry`, whose promise is `target`.
    mutating func list(_ entry: CancelEntry, target: any CancelTarget, into actions: inout CancelActions) {
        switch phase {
        case .active:
            if entry.index == CancelEntry.done {
                // Settled between being attached and being listed.
                actions.release(entry.takeAll())
                return
            }
            entry.target = target
            members.append(entry)
        case .cancelled(let error, _):
            entry.target = target
            if entry.isObserver || entry.upstream != nil {
                // A step added to a cancelled chain: its upstream promise passes the
                // cancellation on to it, or, if it fulfilled, the step's body finds the chain
                // cancelled before starting (`PromiseAttachment.errorBeforeBody`) and rejects.
                // A body that already ran has its returned chain cancelled.
                entry.index = CancelEntry.done
                if let link = entry.link {
                    entry.link = nil
                    actions.follow(link, error: error)
                }
                actions.release(entry.takeAll())
            } else {
                actions.reject(entry, with: error)
            }
        case .abandoned:
            entry.index = CancelEntry.done
            actions.release(entry.takeAll())
        case .forwarded:
            preconditionFailure("CancelState.list: a forwarded storage lists nothing (lock the root)")
        }
    }

    /// Lists `entry` if that is all there is to do (an active chain, the entry not settled yet):
    /// the common case of `list`, decided without recording actions. `false` leaves everything
    /// as it was, for `list`.
    mutating func listIfActive(_ entry: CancelEntry, target: any CancelTarget) -> Bool {
        guard case .active = phase, entry.index != CancelEntry.done else { return false }
        entry.target = target
        members.append(entry)
        return true
    }

    /// The entry's promise settled: unlist it. Returns what it held, to release after the lock,
    /// and the earlier attachment of its promise, to notify after the lock.
    mutating func unlist(_ entry: CancelEntry) -> (CancelEntry.Released, (any PromiseAttachment)?) {
        if entry.index >= 0 { members.remove(entry) }
        entry.index = CancelEntry.done
        let earlier = entry.earlier
        entry.earlier = nil
        return (entry.takeAll(), earlier)
    }

    /// Records a link of a step whose body returned a pending cancellable promise.
    mutating func link(_ entry: CancelEntry, _ link: CancelLink, into actions: inout CancelActions) {
        guard entry.index == CancelEntry.done else {
            if case .abandoned = phase { return actions.release(link) }
            entry.link = CancelLink.adding(link, to: entry.link)
            return
        }
        // The step was cancelled while its body ran: the body's result is discarded, and its
        // work is cancelled with it.
        if entry.cancelledAlone {
            actions.follow(link, error: boxedCancellation)
        } else if let error = cancelledError {
            actions.follow(link, error: error)
        } else {
            actions.release(link)
        }
    }

    // MARK: Cancelling

    /// Cancels the chain: rejects every pending promise that does not wait behind an observer,
    /// takes the cancel closures and links to run after the lock. `false` if it was cancelled,
    /// or abandoned, already.
    mutating func cancel(with error: any Error, at site: CancelSite, into actions: inout CancelActions) -> Bool {
        guard case .active = phase else {
            if case .forwarded = phase {
                preconditionFailure("CancelState.cancel: a forwarded storage lists nothing (lock the root)")
            }
            return false
        }
        phase = .cancelled(error, site)
        let taken = members
        members = MemberList()
        Self.cancelMembers(taken, with: error, into: &actions)
        return true
    }

    /// Settles the members of a chain being cancelled with `error` (still carrying their
    /// indexes): rejects every pending promise that does not wait behind an observer; the others
    /// settle when the observer ahead of them passes the cancellation on.
    private static func cancelMembers(_ taken: MemberList, with error: any Error, into actions: inout CancelActions) {
        actions.reserveRejections(taken.count)
        taken.forEach { markWaitingBehindObserver($0) }
        taken.forEach { entry in
            if entry.waitsBehindObserver == true {
                // Settles when the observer ahead of it passes the cancellation on.
                entry.index = CancelEntry.done
                actions.release(entry.takeAll())
            } else {
                actions.reject(entry, with: error)
            }
        }
    }

    /// Cancels one listed entry, not its chain (an `autoCancel` loser that shares its chain with
    /// the winner). `false` if it is not listed.
    mutating func cancelAlone(_ entry: CancelEntry, with error: any Error, into actions: inout CancelActions) -> Bool {
        guard case .active = phase, entry.index >= 0 else { return false }
        members.remove(entry)
        entry.cancelledAlone = true
        actions.reject(entry, with: error)
        return true
    }

    /// Whether `entry` is an observer or follows one that is still listed (in this cancellation
    /// pass); computed for a whole chain in linear time by remembering the answer per entry.
    private static func markWaitingBehindObserver(_ entry: CancelEntry) {
        // Common case without allocating: the entry is decided by itself or by its upstream,
        // already marked (members are listed in creation order, upstream first).
        if entry.waitsBehindObserver != nil { return }
        if entry.isObserver {
            entry.waitsBehindObserver = true
            return
        }
        guard let upstream = entry.upstream, upstream.index >= 0 else {
            entry.waitsBehindObserver = false
            return
        }
        if let known = upstream.waitsBehindObserver {
            entry.waitsBehindObserver = known
            return
        }
        var path: [CancelEntry] = []
        var current = entry
        var answer: Bool
        while true {
            if let known = current.waitsBehindObserver {
                answer = known
                break
            }
            if current.isObserver {
                answer = true
                current.waitsBehindObserver = true
                break
            }
            guard let upstream = current.upstream, upstream.index >= 0 else {
                answer = false
                current.waitsBehindObserver = false
                break
            }
            path.append(current)
            current = upstream
        }
        for waiting in path { waiting.waitsBehindObserver = answer }
    }

    // MARK: Joining

    enum JoinOutcome {
        /// Joined, or nothing to join: run the actions.
        case done
        /// One of the two was absorbed elsewhere meanwhile: find the roots again.
        case retry
    }

    /// Joins the chains of two roots, both locked by the caller. A cancelled root absorbs the
    /// other (it never changes again), which is cancelled with it; otherwise the root with fewer
    /// members is absorbed by the other and forwards to it, counting as one of its handles while
    /// it has handles of its own.
    static func join(
        _ a: inout CancelState, b: inout CancelState, aStorage: CancelStorage, bStorage: CancelStorage,
        into actions: inout CancelActions
    ) -> JoinOutcome {
        if case .forwarded = a.phase { return .retry }
        if case .forwarded = b.phase { return .retry }
        if case .abandoned = a.phase { return .done }
        if case .abandoned = b.phase { return .done }
        let aCancelled = a.cancelledError != nil
        let bCancelled = b.cancelledError != nil
        if aCancelled, bCancelled { return .done }
        if bCancelled || (!aCancelled && a.members.count <= b.members.count) {
            b.absorb(&a, into: bStorage, actions: &actions)
        } else {
            a.absorb(&b, into: aStorage, actions: &actions)
        }
        return .done
    }

    /// Absorbs `absorbed` (an active root) into this root, `storage`: its members are listed
    /// here, or cancelled (as by `cancel`) if this chain was cancelled.
    private mutating func absorb(
        _ absorbed: inout CancelState, into storage: CancelStorage, actions: inout CancelActions
    ) {
        let holding: CancelStorage?
        if case .active = phase {
            handles += 1
            holding = storage
        } else {
            holding = nil
        }
        absorbed.phase = .forwarded(next: storage, holding: holding)
        let moved = absorbed.members
        absorbed.members = MemberList()
        switch phase {
        case .active:
            moved.forEach { members.append($0) }
        case .cancelled(let error, _):
            // Joining a cancelled chain cancels this one, in chain order as `cancel` does.
            Self.cancelMembers(moved, with: error, into: &actions)
        case .abandoned, .forwarded:
            preconditionFailure("CancelState.absorb: only an active or cancelled root absorbs")
        }
    }

    /// Re-points a forwarded storage at the root found past `next` (path compression).
    mutating func compress(to root: CancelStorage) {
        if case .forwarded(let next, let holding) = phase, next !== root {
            phase = .forwarded(next: root, holding: holding)
        }
    }
}

extension CancelEntry {
    /// Empties the entry (under its storage's lock); the result is released after the lock.
    func takeAll() -> Released {
        let released = Released(cancelBody: cancelBody, link: link, target: target)
        cancelBody = nil
        link = nil
        target = nil
        upstream = nil
        return released
    }

    /// What an entry held, released outside the lock (closures may own objects whose `deinit`
    /// runs user code).
    struct Released {
        var cancelBody: (() -> Void)?
        var link: CancelLink?
        var target: (any CancelTarget)?
    }
}

// MARK: - Actions

/// What a cancellation, a settle or an abandonment does after the storage lock is released:
/// follow links to the chains they reach, call cancel closures, run the handlers released by
/// the rejections, and release whatever entries held.
///
/// Rejections happen under the lock (when the actions are recorded), so nothing a cancel closure
/// causes can change an outcome already decided.
struct CancelActions {
    private var calls: [() -> Void] = []
    private var singleCall: (() -> Void)?
    private var released: [ReleasedHandlers] = []
    /// The first rejection's released handlers, kept inline (`.none` until there is one).
    private var single: ReleasedHandlers = .none
    private var links: [CancelLink] = []
    private var dropped: [CancelEntry.Released] = []
    /// The first thing to release, kept inline: settling one promise releases one entry's
    /// contents without allocating an array.
    private var firstDropped: CancelEntry.Released?
    private var notified: [any PromiseAttachment] = []
    /// The error linked chains are cancelled with.
    private(set) var linkError: (any Error)?
    /// Where the cancellation that reaches linked chains was asked for.
    var linkSite: CancelSite?
    /// A chain that links must not reach (the winner's, when `autoCancel` cancels losers).
    var excludedRoot: CancelStorage?

    init() {}

    var isEmpty: Bool {
        calls.isEmpty && singleCall == nil && released.isEmpty && !single.didSettle && links.isEmpty
            && dropped.isEmpty && firstDropped == nil && notified.isEmpty
    }

    /// Rejects `entry`'s promise with `error`, and takes its cancel closure and links (to call
    /// and follow if the promise was still pending, to release otherwise).
    mutating func reject(_ entry: CancelEntry, with error: any Error) {
        entry.index = CancelEntry.done
        let body = entry.cancelBody
        let link = entry.link
        let target = entry.target
        entry.cancelBody = nil
        entry.link = nil
        entry.target = nil
        entry.upstream = nil
        guard let target else {
            drop(.init(cancelBody: body, link: link, target: nil))
            return
        }
        let rejected = target.rejectForCancel(error)
        let unblocked: ReleasedHandlers
        // Consumed, so that the payload moves into what is kept instead of being copied.
        switch consume rejected {
        case .none:
            // Settled on its own first: the closure is not called, a settled promise links
            // nothing; its own settle notification finishes the entry.
            drop(.init(cancelBody: body, link: link, target: target))
            return
        case .settled:
            // Nothing to run. The promise goes with the actions, released after the lock (its
            // step may hold a body whose captures run user code as they go).
            unblocked = .settled
            drop(.init(cancelBody: nil, link: nil, target: target))
        case .released(let source, let handlers, let attachment):
            if let attachment, attachment === entry {
                // Left the chain here, under the lock: `drain` notifies the earlier attachment
                // in the entry's place instead of taking the lock again.
                unblocked = .released(source: source, handlers: handlers, attachment: entry.earlier)
                entry.earlier = nil
            } else {
                unblocked = .released(source: source, handlers: handlers, attachment: attachment)
            }
        }
        if let body { call(body) }
        if let link { follow(link, error: error) }
        if !single.didSettle { single = consume unblocked } else { released.append(consume unblocked) }
    }

    /// Abandons `entry`: its cancel closure and links are released uncalled.
    mutating func abandon(_ entry: CancelEntry) {
        entry.index = CancelEntry.done
        drop(entry.takeAll())
    }

    mutating func release(_ taken: CancelEntry.Released) {
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
        CancelActions.rejectionListGrowths.withLock { $0 += 1 }
        #endif
    }

    #if DEBUG
    /// How many times `reserveRejections` grew a list, in this process (debug builds only): tests
    /// count the work a cancel does instead of timing it.
    package static let rejectionListGrowths = Locked(0)
    #endif

    private mutating func drop(_ released: CancelEntry.Released) {
        if firstDropped == nil { firstDropped = released } else { dropped.append(released) }
    }

    mutating func notify(_ attachment: (any PromiseAttachment)?) {
        if let attachment { notified.append(attachment) }
    }

    /// Cancels the chains `link` reaches (with `error`, or the error of this cancellation).
    mutating func follow(_ link: CancelLink, error: (any Error)? = nil) {
        if let error, linkError == nil { linkError = error }
        links.append(link)
    }

    /// Takes the next link to follow.
    mutating func nextLink() -> CancelLink? {
        links.popLast()
    }

    mutating func call(_ body: @escaping () -> Void) {
        if singleCall == nil { singleCall = body } else { calls.append(body) }
    }

    /// Calls the cancel closures, then runs the released handlers, then releases the rest.
    mutating func run() {
        for attachment in notified { attachment.promiseDidSettle() }
        notified = []
        singleCall?()
        singleCall = nil
        for body in calls { body() }
        calls = []
        if single.didSettle {
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

// MARK: - Releasing links

/// Releases links without recursing. Releasing a link can release the last handle of the chain
/// it reaches, which abandons that chain and releases its own links: a chain of a hundred
/// thousand `then` bodies each waiting on the next would otherwise release them in nested
/// `deinit`s. The first release on a thread releases, in a loop, whatever the releases it causes
/// hand over.
enum LinkRelease {
    private final class Queue {
        var pending: [CancelLink] = []
        var isReleasing = false
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            #if canImport(Darwin)
            Unmanaged<Queue>.fromOpaque(pointer).release()
            #else
            if let pointer { Unmanaged<Queue>.fromOpaque(pointer).release() }
            #endif
        }
        precondition(status == 0, "LinkRelease: pthread_key_create failed (\(status))")
        return key
    }()

    /// This thread's queue (created on first use, released when the thread exits).
    private static var queue: Queue {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<Queue>.fromOpaque(pointer).takeUnretainedValue()
        }
        let queue = Queue()
        pthread_setspecific(key, Unmanaged.passRetained(queue).toOpaque())
        return queue
    }

    /// Releases `links` (moved out: the caller keeps no reference that could be the last one).
    static func release(_ links: inout [CancelLink]) {
        let queue = self.queue
        queue.pending.append(contentsOf: links)
        links = []
        guard !queue.isReleasing else { return }
        queue.isReleasing = true
        while let link = queue.pending.popLast() {
            if case .both(let first, let second) = link {
                queue.pending.append(first)
                queue.pending.append(second)
            }
            _ = link
        }
        queue.isReleasing = false
    }
}

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

// MARK: - The public handle

/// The cancellation scope of a chain of `CancellablePromise`s.
///
/// Every promise of a chain (`then`, `map`, `done`, `catch`… of a `CancellablePromise`) shares
/// one context; `cancel()` on any of them, or on the context, cancels the whole chain:
/// - every still-pending promise of the chain is rejected (with `CancellablePromiseError
///   .cancelled` unless `cancel(with:)` says otherwise) before `cancel()` returns, except that
///   a promise waiting behind an observer (`ensure`, `ensureThen`, `tap`) that has not run yet
///   settles when that observer passes the cancellation on, so the chain settles in order;
/// - the cancel closure of every pending task is called exactly once, synchronously on the
///   cancelling thread, after those rejections;
/// - the chains that pending steps wait on (promises their `then`/`recover` bodies returned) are
///   cancelled too;
/// - the handlers released by the rejections then run (`on: nil` ones synchronously, others on
///   their queues).
///
/// A context is a *cancel handle*: while it (or any promise of its chain) is alive, the chain
/// can be cancelled and its cancel closures are kept. When the last handle goes away, the cancel
/// closures are released uncalled and the work settles the chain normally; with nothing able to
/// settle it either, the whole chain is freed. Holding only the context (not the promises) lets
/// settled promises be freed.
///
/// Thread-safe; cancelling twice, or cancelling a settled chain, does nothing more.
public final class CancelContext: Sendable {
    @usableFromInline let storage: CancelStorage

    /// Creates an empty context. Pass it to `cancellize(cancelContext:)` to start chains that
    /// are cancelled together.
    public init() {
        storage = CancelStorage()
    }

    deinit {
        storage.releaseHandle()
    }

    /// Cancels every pending promise and task of the chain (see the type's documentation).
    /// `file` and `line` record where the chain was cancelled, for `debugDescription`.
    public func cancel(file: StaticString = #fileID, line: UInt = #line) {
        storage.cancel(with: boxedCancellation, at: CancelSite(file: file, line: line))
    }

    /// Cancels the chain, rejecting its pending promises with `error`. Only the first call has
    /// an effect. `file` and `line` record where the chain was cancelled.
    public func cancel(with error: Error, file: StaticString = #fileID, line: UInt = #line) {
        storage.cancel(with: error, at: CancelSite(file: file, line: line))
    }

    /// ``cancel(with:file:line:)`` without a call site, for code that names the method
    /// exactly (a protocol requirement, a function reference).
    @_disfavoredOverload
    public func cancel(with error: Error) {
        storage.cancel(with: error, at: .library)
    }

    /// ``cancel(file:line:)`` without a call site: the `Cancellable` requirement.
    @_disfavoredOverload
    public func cancel() {
        storage.cancel(with: boxedCancellation, at: .library)
    }

    /// `true` once `cancel()` was called on this context or any promise of its chain. Never
    /// goes back to `false`.
    public var isCancelled: Bool { storage.cancelledError != nil }

    /// The same as `isCancelled` (PromiseKit 7's name).
    public var cancelAttempted: Bool { isCancelled }

    /// The error the chain was cancelled with, or `nil`.
    public var cancelledError: Error? { storage.cancelledError }

    /// Makes this context and `other` one chain: afterwards cancelling either cancels both. If
    /// either was cancelled already, the joined chain is cancelled. Costs O(1) amortised: the
    /// chain with fewer pending promises is merged into the other.
    @usableFromInline func join(_ other: CancelContext) {
        storage.join(other.storage)
    }
}

extension CancelContext: CustomDebugStringConvertible {
    /// The chain's state: `CancelContext(pending: 2)` while it can be cancelled, or
    /// `CancelContext(cancelled at Feed.swift:42 with CancellablePromiseError.cancelled,
    /// pending: 0)` once cancelled, naming where `cancel()` was called.
    public var debugDescription: String {
        "CancelContext(\(CancelSite.describe(storage.debugState)))"
    }
}

/// Where a chain was cancelled: the call site of `cancel()`.
struct CancelSite: Sendable, CustomStringConvertible {
    let file: StaticString
    let line: UInt

    /// A cancellation the library asked for on its own (a link, a join, `autoCancel`, a bag).
    static let library = CancelSite(file: "CancellablePromiseKit", line: 0)

    var description: String { line == 0 ? "\(file)" : "\(file):\(line)" }

    /// `cancelled at <site> with <error>, pending: <n>`, or `pending: <n>`.
    static func describe(_ state: (error: (any Error)?, site: CancelSite?, pending: Int)) -> String {
        guard let error = state.error else { return "pending: \(state.pending)" }
        let site = state.site.map { " at \($0)" } ?? ""
        return "cancelled\(site) with \(type(of: error)).\(error), pending: \(state.pending)"
    }
}

extension CancelContext: Hashable {
    /// Contexts are equal when they are the same object.
    public static func == (lhs: CancelContext, rhs: CancelContext) -> Bool { lhs === rhs }
    /// Hashes the object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

// MARK: - Member list

/// The pending members of a storage. The first is stored inline (index 0), so a chain with one
/// pending promise allocates no array; the others are at `index - 1` in `rest`. Guarded by the
/// storage's lock, like the members' `index`. The array is released or shrunk as members leave,
/// so a long-lived chain holds storage for what is pending, not for what it ever listed.
struct MemberList {
    private var first: CancelEntry?
    private var rest: [CancelEntry] = []

    init() {}

    var count: Int { (first == nil ? 0 : 1) + rest.count }

    /// Slots allocated beyond the inline one (for tests).
    var capacity: Int { rest.capacity }

    /// Lists `entry`, recording its index in it.
    mutating func append(_ entry: CancelEntry) {
        if first == nil {
            entry.index = 0
            first = entry
        } else {
            entry.index = rest.count + 1
            rest.append(entry)
        }
    }

    /// Unlists `entry`; the last member takes its place.
    mutating func remove(_ entry: CancelEntry) {
        let index = entry.index
        if index == 0 {
            if let first, first === entry { self.first = nil }
            return
        }
        let position = index - 1
        guard position >= 0, position < rest.count, rest[position] === entry else { return }
        let last = rest.removeLast()
        if position < rest.count {
            rest[position] = last
            last.index = index
        }
        if rest.isEmpty {
            rest = []
        } else if rest.capacity > 64, rest.count < rest.capacity / 4 {
            // A new buffer of twice the count (`Array(rest)` would share the old one and keep
            // its capacity): the next shrink comes after half the members left again, so
            // shrinking costs O(1) amortised per removal.
            var smaller: [CancelEntry] = []
            smaller.reserveCapacity(2 * rest.count)
            smaller.append(contentsOf: rest)
            rest = smaller
        }
    }

    func forEach(_ body: (CancelEntry) -> Void) {
        if let first { body(first) }
        for entry in rest { body(entry) }
    }
}
