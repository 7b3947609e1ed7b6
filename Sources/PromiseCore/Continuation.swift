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
package protocol PromiseAttachment: AnyObject {
    func promiseDidSettle()
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
