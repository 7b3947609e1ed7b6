import Dispatch
import PromiseCore

// The shared state of a cancellable chain.
//
// Every pending `CancellablePromise` of a chain is a *member* of its context. Cancelling the
// context decides, under its lock, that the chain is cancelled, takes the members out and
// rejects their promises; then, outside the lock, it calls the members' cancel closures and
// runs the handlers those rejections released. A member leaves the list as soon as its promise
// settles (its cancel closure is released then), so a settled chain holds nothing.
//
// Chains join when a `then` body returns a `CancellablePromise` of another chain: the two
// contexts become one (union–find: the absorbed context forwards to the other, always from
// the lower to the higher object address, so forwarding never loops). No code ever holds two
// context locks, and a context lock is only ever held while taking promise locks.

/// A member of a cancel context: a pending `CancellablePromise`. Its mutable fields are guarded
/// by the lock of the context that lists it.
protocol CancelMember: AnyObject {
    /// Index in the listing context's `members`; `unlisted` or `settled` otherwise.
    var memberIndex: Int { get set }
    /// The context the member was created in (it may forward to another).
    var cancelContext: CancelContext { get }
    /// Takes the task's cancel closure, if any (called under the context lock).
    func takeCancelBody() -> (() -> Void)?
    /// Rejects the member's promise if still pending (called under the context lock).
    func rejectForCancel(_ error: Error) -> Unblocked
    /// Another wrapper of the member's promise, to tell when the promise settles.
    var earlierWrapper: (any PromiseAttachment)? { get set }
}

let unlisted = -1
let settled = -2

/// `CancellablePromiseError.cancelled`, boxed once: `cancel()` would otherwise allocate an error
/// box on every call.
private let boxedCancellation: any Error & Sendable = CancellablePromiseError.cancelled

/// The cancellation scope of a chain of `CancellablePromise`s.
///
/// Every promise of a chain (`then`, `map`, `done`, `catch`… of a `CancellablePromise`) shares
/// one context; `cancel()` on any of them, or on the context, cancels the whole chain:
/// - every still-pending promise of the chain is rejected (with `CancellablePromiseError
///   .cancelled` unless `cancel(with:)` says otherwise) before `cancel()` returns;
/// - the cancel closure of every pending task is called exactly once, synchronously on the
///   cancelling thread, after those rejections;
/// - the handlers released by the rejections then run (`on: nil` ones synchronously, others on
///   their queues).
///
/// Holding only the context (not the promises) lets settled promises be freed. Thread-safe;
/// cancelling twice, or cancelling a settled chain, does nothing more.
public final class CancelContext: @unchecked Sendable {
    // The lock word must remain the first stored property (see PromiseCore's Lock.swift).
    private var lockWord = makeLockWord()
    private var forward: CancelContext?
    private var error: Error?
    private var members = MemberList()

    /// Creates an empty context. Pass it to `cancellize(cancelContext:)` to start chains that
    /// are cancelled together.
    public init() {}

    deinit {
        lockWordDestroy(lockWordPointer(self))
    }

    // MARK: Public API

    /// Cancels every pending promise and task of the chain (see the type's documentation).
    public func cancel() {
        cancel(with: boxedCancellation)
    }

    /// Cancels the chain, rejecting its pending promises with `error`. Only the first call has
    /// an effect.
    public func cancel(with error: Error) {
        let root = lockRoot()
        guard root.error == nil else {
            root.unlock()
            return
        }
        root.error = error
        let taken = root.members
        root.members = MemberList()
        var actions = CancelActions(rejecting: taken, with: error)
        root.unlock()
        actions.run()
    }

    /// `true` once `cancel()` was called on this context or any promise of its chain.
    public var isCancelled: Bool { cancelledError != nil }

    /// The same as `isCancelled` (PromiseKit 7's name).
    public var cancelAttempted: Bool { isCancelled }

    /// The error the chain was cancelled with, or `nil`.
    public var cancelledError: Error? {
        let root = lockRoot()
        let error = root.error
        root.unlock()
        return error
    }

    // MARK: Members

    /// Lists `member`, or cancels it at once if the chain is already cancelled.
    /// `earlierWrapper` is told when the member's promise settles (at once if it already has).
    func add(_ member: any CancelMember, earlierWrapper: (any PromiseAttachment)? = nil) {
        let root = lockRoot()
        if member.memberIndex == settled {
            root.unlock()
            earlierWrapper?.promiseDidSettle()
            return
        }
        member.earlierWrapper = earlierWrapper
        if let error = root.error {
            var actions = CancelActions(rejecting: MemberList(member), with: error)
            root.unlock()
            actions.run()
            return
        }
        root.members.append(member)
        root.unlock()
    }

    /// Unlists a member whose promise settled, releasing its cancel closure.
    func remove(_ member: any CancelMember) {
        let root = lockRoot()
        root.members.remove(member)
        member.memberIndex = settled
        let body = member.takeCancelBody()
        let earlier = member.earlierWrapper
        member.earlierWrapper = nil
        root.unlock()
        _ = body  // released here, outside the lock
        earlier?.promiseDidSettle()
    }

    /// Makes this context and `other` one: afterwards cancelling either cancels both chains.
    /// If either was cancelled already, the joined chain is cancelled.
    func join(_ other: CancelContext) {
        while true {
            let a = root, b = other.root
            if a === b { return }
            let (from, to) = ObjectIdentifier(a) < ObjectIdentifier(b) ? (a, b) : (b, a)
            from.lock()
            guard from.forward == nil else {
                from.unlock()
                continue  // joined elsewhere meanwhile: retry with the new roots
            }
            from.forward = to
            var moved = MemberList()
            from.members.forEach { moved.appendUnindexed($0) }
            from.members = MemberList()
            let fromError = from.error
            from.unlock()

            // A member that settled while between the two lists marked itself `settled`.
            var pending = MemberList()
            let target = to.lockRoot()
            moved.forEach { if $0.memberIndex != settled { pending.appendUnindexed($0) } }
            if let error = target.error {
                var actions = CancelActions(rejecting: pending, with: error)
                target.unlock()
                actions.run()
            } else {
                pending.forEach { target.members.append($0) }
                target.unlock()
                if let fromError { target.cancel(with: fromError) }
            }
            return
        }
    }

    // MARK: Locking

    @inline(__always) private func lock() { lockWordLock(lockWordPointer(self)) }
    @inline(__always) private func unlock() { lockWordUnlock(lockWordPointer(self)) }

    /// Locks and returns the context this one forwards to, at the end of the chain of joins.
    private func lockRoot() -> CancelContext {
        var context = self
        while true {
            context.lock()
            guard let next = context.forward else { return context }
            context.unlock()
            context = next
        }
    }

    private var root: CancelContext {
        let root = lockRoot()
        root.unlock()
        return root
    }
}

extension CancelContext: Hashable {
    /// Contexts are equal when they are the same object.
    public static func == (lhs: CancelContext, rhs: CancelContext) -> Bool { lhs === rhs }
    /// Hashes the object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// What a cancellation does once the lock is released: call the cancel closures, then run the
/// handlers released by rejecting the members. Built under the lock (which rejects the
/// promises), so nothing a cancel closure causes can change an outcome already decided.
///
/// A member whose promise settled on its own but has not left the list yet (it settles under
/// its promise's lock, then leaves the context) lost the race: its cancel closure is not called,
/// only released, outside the lock.
private struct CancelActions {
    private var bodies: [() -> Void] = []
    private var singleBody: (() -> Void)?
    private var released: [Unblocked] = []
    private var single: Unblocked?
    private var discarded: [() -> Void] = []

    init(rejecting members: MemberList, with error: Error) {
        if members.count == 1 {
            members.forEach { single = reject($0, with: error) }
            return
        }
        released.reserveCapacity(members.count)
        members.forEach { released.append(reject($0, with: error)) }
    }

    private mutating func reject(_ member: any CancelMember, with error: Error) -> Unblocked {
        member.memberIndex = unlisted
        var unblocked = member.rejectForCancel(error)
        if unblocked.source != nil, let attached = unblocked.attachment, attached === member {
            // The member's own promise settled here, under the context lock: leave the context
            // now (what `remove` does once notified) instead of taking the lock again per
            // member, and let `drain` notify the earlier wrapper, outside the lock, in its place.
            member.memberIndex = settled
            unblocked.attachment = member.earlierWrapper
            member.earlierWrapper = nil
        }
        if let body = member.takeCancelBody() {
            if unblocked.source == nil {
                discarded.append(body)  // settled already: not called, released after the lock
            } else if singleBody == nil {
                singleBody = body
            } else {
                bodies.append(body)
            }
        }
        return unblocked
    }

    mutating func run() {
        singleBody?()
        for body in bodies { body() }
        if let single { drain(single) }
        guard !released.isEmpty else { return }
        // Moved out in order rather than iterated: iterating copies every `Unblocked` (through
        // the runtime's value witnesses of its optional fields).
        released.reverse()
        while let unblocked = released.popLast() { drain(unblocked) }
    }
}

/// The pending members of a context. The first is stored inline (index 0), so a context with
/// one task allocates no array; the others are at `index - 1` in `rest`. Guarded by the
/// context's lock, like the members' `memberIndex`.
struct MemberList {
    private var first: (any CancelMember)?
    private var rest: [any CancelMember] = []

    init() {}

    init(_ member: any CancelMember) {
        first = member
    }

    var count: Int { (first == nil ? 0 : 1) + rest.count }

    /// Lists `member`, recording its index in it.
    mutating func append(_ member: any CancelMember) {
        if first == nil {
            member.memberIndex = 0
            first = member
        } else {
            member.memberIndex = rest.count + 1
            rest.append(member)
        }
    }

    /// Lists `member` without touching its index (a temporary list).
    mutating func appendUnindexed(_ member: any CancelMember) {
        if first == nil { first = member } else { rest.append(member) }
    }

    /// Unlists `member` if it is listed here; the last member takes its place.
    mutating func remove(_ member: any CancelMember) {
        let index = member.memberIndex
        if index == 0 {
            if let first, first === member { self.first = nil }
            return
        }
        let position = index - 1
        guard position >= 0, position < rest.count, rest[position] === member else { return }
        let last = rest.removeLast()
        if position < rest.count {
            rest[position] = last
            last.memberIndex = index
        }
    }

    func forEach(_ body: (any CancelMember) -> Void) {
        if let first { body(first) }
        for member in rest { body(member) }
    }
}
