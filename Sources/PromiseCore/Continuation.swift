import Dispatch

// How handlers run.
//
// A pending promise keeps the steps waiting for it in a `Handlers` list. A step is an object
// conforming to `Continuation`; for the common operators (`map`, `then`, `done`, …) the step
// *is* the promise it produces, so one link of a chain costs one allocation.
//
// When a promise settles, it hands its handlers back to the caller instead of calling them.
// `drain` runs them in a loop: a step that settles its own promise returns that promise's
// handlers, and the loop goes on with them. Resolving the head of a million-link chain
// therefore uses a constant amount of stack, and no handler ever runs while a lock is held.

/// A step waiting for a promise to settle.
@usableFromInline package protocol Continuation: AnyObject {
    /// Called once, after `source` (the promise this step was attached to) has settled.
    /// Returns the handlers of whatever promise the step settled in turn.
    func resume(from source: AnyObject) -> Unblocked

    /// Removes the last element of `stack` (an instance of this type) and, if that was the last
    /// reference to it, appends the steps waiting for it, so releasing it recurses no further.
    static func popForTeardown(_ stack: inout [any Continuation])

    /// `true` for steps that are promises (they implement `popForTeardown`): releasing one may
    /// release a whole chain.
    static var isPromiseStep: Bool { get }
}

extension Continuation {
    package static func popForTeardown(_ stack: inout [any Continuation]) {
        stack.removeLast()
    }

    package static var isPromiseStep: Bool { false }
}

/// `popForTeardown` for steps that are promises: checks uniqueness on a variable of the
/// concrete type (the check always fails on an existential or `AnyObject` copy).
package func popPromiseStepForTeardown<Step: Continuation>(
    _ type: Step.Type,
    _ stack: inout [any Continuation],
    takeHandlers: (Step) -> Handlers
) {
    var step = stack.removeLast() as! Step
    if isKnownUniquelyReferenced(&step) {
        var released = takeHandlers(step)
        released.moveAll(to: &stack)
    }
}

/// The steps waiting for one promise. The first is stored inline: a promise with a single
/// observer allocates no array.
package struct Handlers {
    package var first: (any Continuation)?
    package var rest: [any Continuation]?

    @inline(__always) package init() {}

    @inline(__always) package var isEmpty: Bool { first == nil }

    @inline(__always)
    package mutating func append(_ continuation: any Continuation) {
        if first == nil {
            first = continuation
        } else if rest == nil {
            rest = [continuation]
        } else {
            rest!.append(continuation)
        }
    }

    /// Whether the first continuation is a promise step (see `Continuation.isPromiseStep`).
    @inline(__always) package var firstIsPromiseStep: Bool {
        guard let first else { return false }
        return type(of: first).isPromiseStep
    }

    /// Visits every continuation in registration order.
    package func forEach(_ body: (any Continuation) -> Void) {
        guard let first else { return }
        body(first)
        rest?.forEach(body)
    }

    /// The number of continuations still waiting: every one but the removed registrations.
    /// Only under the lock of the promise holding the list; `releasedAfterUnlock` receives
    /// objects the caller must release only once that lock is unlocked (see
    /// `PromiseRegistration.liveOwnerLocked`).
    package func waitingCount(releasedAfterUnlock: inout [AnyObject]) -> Int {
        var count = 0
        forEach { continuation in
            if !isRemovedRegistration(continuation, releasedAfterUnlock: &releasedAfterUnlock) { count += 1 }
        }
        return count
    }

    /// How many continuations the list stores, removed registrations included, and the capacity
    /// of its array; used by tests to check that storage stays bounded.
    package var storage: (stored: Int, capacity: Int) {
        guard first != nil else { return (0, 0) }
        return (1 + (rest?.count ?? 0), 1 + (rest?.capacity ?? 0))
    }

    /// Appends a removable registration, first dropping the removed ones when the array is full,
    /// so that a long-lived promise stores only about as many registrations as are still live.
    /// Each sweep visits the array once and happens only when the array would otherwise grow,
    /// which makes appending O(1) amortised. Only under the lock of the promise holding the list;
    /// the dropped registrations go to `releasedAfterUnlock`, for the caller to release once
    /// that lock is unlocked.
    package mutating func append(
        removable registration: PromiseRegistration, releasedAfterUnlock: inout [AnyObject]
    ) {
        let isFull = rest.map { $0.count == $0.capacity } ?? false
        if isFull {
            sweepRemovedRegistrations(releasedAfterUnlock: &releasedAfterUnlock)
        } else if rest == nil, let first, isRemovedRegistration(first, releasedAfterUnlock: &releasedAfterUnlock) {
            releasedAfterUnlock.append(first)
            self.first = nil
        }
        append(registration)
    }

    /// Drops the removed registrations, keeping the order of the others. Then, so that the next
    /// sweep comes only after about as many appends as this one visited, the array grows if it
    /// is more than half full, and gives most of its capacity back if it is less than a quarter
    /// full.
    private mutating func sweepRemovedRegistrations(releasedAfterUnlock: inout [AnyObject]) {
        guard var list = rest else { return }
        rest = nil  // leaves `list` the only reference, so it is changed in place
        let capacity = list.capacity
        var kept = 0
        for index in list.indices {
            let continuation = list[index]
            if isRemovedRegistration(continuation, releasedAfterUnlock: &releasedAfterUnlock) {
                releasedAfterUnlock.append(continuation)
            } else {
                list[kept] = continuation
                kept += 1
            }
        }
        list.removeLast(list.count - kept)
        if let first, isRemovedRegistration(first, releasedAfterUnlock: &releasedAfterUnlock) {
            releasedAfterUnlock.append(first)
            self.first = list.isEmpty ? nil : list.removeFirst()
        }
        guard !list.isEmpty else { return }
        if list.count * 2 > capacity {
            list.reserveCapacity(capacity * 2)
        } else if list.count * 4 < capacity {
            var smaller: [any Continuation] = []
            smaller.reserveCapacity(list.count * 2)
            smaller.append(contentsOf: list)
            list = smaller
        }
        rest = list
    }
}

/// Whether `continuation` is a registration that was removed or whose owner is gone. The owner
/// of a live one goes to `releasedAfterUnlock`: checking it takes a strong reference, which
/// must not be the last one released while the lock is held.
@inline(__always)
private func isRemovedRegistration(
    _ continuation: any Continuation, releasedAfterUnlock: inout [AnyObject]
) -> Bool {
    guard let registration = continuation as? PromiseRegistration else { return false }
    guard let owner = registration.liveOwnerLocked else { return true }
    releasedAfterUnlock.append(owner)
    return false
}

/// Handlers released by settling `source`, and the attachment to notify; they must be run
/// with `drain`.
@usableFromInline package struct Unblocked {
    package var source: AnyObject?
    package var handlers: Handlers
    package var attachment: (any PromiseAttachment)?

    @inline(__always)
    package init(source: AnyObject?, handlers: Handlers, attachment: (any PromiseAttachment)? = nil) {
        self.source = source
        self.handlers = handlers
        self.attachment = attachment
    }

    @inline(__always) package static var none: Unblocked { Unblocked(source: nil, handlers: Handlers()) }
}

/// An object attached to a promise by library code (a producer's task, a cancellable wrapper),
/// told once, outside every lock, that the promise settled.
@usableFromInline package protocol PromiseAttachment: AnyObject {
    func promiseDidSettle()

    /// Asked, outside every lock, just before a step body (not an observer's) starts: an error
    /// here means the body must not run and the step rejects with it instead (a cancelled
    /// chain). The default allows every body.
    func errorBeforeBody() -> (any Error)?
}

extension PromiseAttachment {
    @inlinable package func errorBeforeBody() -> (any Error)? { nil }
}

/// Whether a step's body may start (see `Promise.bodyStart`).
@usableFromInline package enum BodyStart {
    /// Pending, and its attachment allows it.
    case start
    /// Settled already (rejected by a cancellation): the body must not start.
    case settled
    /// The attachment forbids it: settle with this error instead.
    case reject(any Error)
}

/// Runs released handlers, and the handlers they release, iteratively and depth first, in the
/// order a recursive implementation would use (registration order at each promise).
@usableFromInline package func drain(_ start: Unblocked) {
    start.attachment?.promiseDidSettle()
    guard var current = start.handlers.first, var source = start.source else { return }
    var deferred: [(AnyObject, any Continuation)] = []
    if let rest = start.handlers.rest {
        for continuation in rest.reversed() { deferred.append((source, continuation)) }
    }
    while true {
        let next = current.resume(from: source)
        next.attachment?.promiseDidSettle()
        if let first = next.handlers.first, let nextSource = next.source {
            if let rest = next.handlers.rest {
                for continuation in rest.reversed() { deferred.append((nextSource, continuation)) }
            }
            current = first
            source = nextSource
        } else if let (s, c) = deferred.popLast() {
            current = c
            source = s
        } else {
            return
        }
    }
}

/// Releases a list of pending steps without recursing through nested `deinit`s: every step we
/// hold the last reference to gives up its own handlers before it is released.
package func teardown(_ handlers: inout Handlers) {
    guard !handlers.isEmpty else { return }
    // No binding to the first handler may outlive the test: `popForTeardown` checks that the
    // stack holds the only reference.
    if handlers.rest == nil, !handlers.firstIsPromiseStep {
        // A single observer that is not a step (an aggregate's input, a closure) is released as
        // popping it from the stack would, without allocating the stack.
        handlers = Handlers()
        return
    }
    var stack: [any Continuation] = []
    handlers.moveAll(to: &stack)
    while !stack.isEmpty {
        // Only the stack may reference the element while its type pops it.
        let kind = type(of: stack[stack.count - 1])
        kind.popForTeardown(&stack)
    }
}

extension Handlers {
    /// Appends every continuation to `stack` and empties the list.
    package mutating func moveAll(to stack: inout [any Continuation]) {
        if let first { stack.append(first) }
        if let rest { stack.append(contentsOf: rest) }
        self = Handlers()
    }
}

/// A continuation that calls a closure; used by `pipe(to:)` and by less frequent operators.
package final class ClosureContinuation<T>: Continuation, @unchecked Sendable {
    private var body: ((Result<T>) -> Unblocked)?

    package init(_ body: @escaping (Result<T>) -> Unblocked) {
        self.body = body
    }

    package func resume(from source: AnyObject) -> Unblocked {
        let result = unsafeDowncast(source, to: Promise<T>.self).settledResult
        let body = self.body
        self.body = nil
        return body?(result) ?? .none
    }
}

/// A handler that can be taken off the pending promise it waits for (see
/// `Promise.register(owner:_:)`), so that a long-lived promise does not keep what it no longer
/// needs to notify.
///
/// It runs its action once, synchronously on the thread that settles the promise, unless it was
/// removed first or its owner, held weakly, is gone. Removing it releases the action at once; the
/// promise drops the spent entry the next time a registration finds its list full.
package final class PromiseRegistration: Continuation, @unchecked Sendable {
    /// The promise registered on: its lock guards `action` and `owner`.
    private weak var source: AnyObject?
    private weak var owner: AnyObject?
    private var action: ((_ owner: AnyObject, _ source: AnyObject) -> Unblocked)?

    init(source: AnyObject, owner: AnyObject, action: @escaping (AnyObject, AnyObject) -> Unblocked) {
        self.source = source
        self.owner = owner
        self.action = action
    }

    /// The owner, if the registration can still run; only under the source's lock. The caller
    /// must release the reference returned only once that lock is unlocked: it may be the last.
    var liveOwnerLocked: AnyObject? {
        guard action != nil else { return nil }
        return owner
    }

    package func resume(from source: AnyObject) -> Unblocked {
        let lock = lockWordPointer(source)
        lockWordLock(lock)
        let action = self.action
        self.action = nil
        let owner = self.owner
        self.owner = nil
        lockWordUnlock(lock)
        guard let action, let owner else { return .none }
        return action(owner, source)
    }

    /// Takes the registration off its promise: the action will not run, and it is released
    /// before `remove()` returns (outside every lock). Safe from any thread, any number of times.
    /// Once the promise is gone nothing can run the action: it goes with the registration.
    package func remove() {
        guard let source else { return }
        let lock = lockWordPointer(source)
        lockWordLock(lock)
        let action = self.action
        self.action = nil
        owner = nil
        lockWordUnlock(lock)
        withExtendedLifetime(action) {}
    }
}

/// Where a step's body runs.
package enum HopRule {
    /// Never: the result passes straight through (a rejected `map`, for instance).
    case never
    /// For every result (`ensure`, `tap`, `finally`).
    case always
    /// Only for a fulfilment (`map`, `then`, `done`, `get`…).
    case fulfilled
    /// Only for a rejection the policy lets through (`catch`, `recover`).
    case rejected(CatchPolicy)

    @inline(__always)
    package func runsBody<T>(for result: Result<T>) -> Bool {
        switch (self, result) {
        case (.always, _), (.fulfilled, .fulfilled): return true
        case (.rejected(let policy), .rejected(let error)):
            return policy == .allErrors || !error.isCancelled
        default: return false
        }
    }
}

/// Runs `work` on `queue` (or synchronously when `queue` is nil) and drains what it releases.
@inline(__always)
package func dispatchStep(
    on queue: DispatchQueue?,
    flags: DispatchWorkItemFlags?,
    _ work: @escaping () -> Unblocked
) -> Unblocked {
    guard let queue else { return work() }
    // The work was prepared on this thread and runs once on `queue`: hand it over unchecked.
    let box = UncheckedSendable(work)
    if let flags {
        queue.async(flags: flags) { drain(box.value()) }
    } else {
        queue.async { drain(box.value()) }
    }
    return .none
}

/// A continuation that settles `target` as its source settled; used by `follow(_:)`.
final class Follower<T>: Continuation, @unchecked Sendable {
    private var target: Promise<T>?

    init(_ target: Promise<T>) {
        self.target = target
    }

    func resume(from source: AnyObject) -> Unblocked {
        guard let target else { return .none }
        self.target = nil
        return target.settle(as: unsafeDowncast(source, to: Promise<T>.self))
    }
}
