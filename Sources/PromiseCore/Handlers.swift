// Handlers: what waits for a promise to settle, and how the waiting ones run.
//
// A pending promise keeps its handlers in a `Handlers` list. A handler is an object conforming
// to `PromiseHandler`: a chain step (for the common operators, `map`, `then`, `done`…, the step
// *is* the promise it produces, so one link of a chain costs one allocation; see Steps.swift),
// an aggregate (`when`, `race`: the handler of each of its inputs), a closure, a relay, or a
// settle listener (SettleListener.swift).
//
// When a promise settles, it hands its handlers back to the caller instead of running them, as
// `ReleasedHandlers`. `drain` runs them in a loop: a handler that settles a promise in turn
// returns that promise's handlers, and the loop goes on with them. Resolving the head of a
// million-link chain therefore uses a constant amount of stack, and no handler ever runs while
// a lock is held. Releasing a pending chain is iterative too (`teardown`).

/// An object waiting for a promise to settle.
@usableFromInline protocol PromiseHandler: AnyObject {
    /// Called once per time this handler was added to `source`, after `source` has settled (an
    /// aggregate is added to each of its inputs, and is called once per input).
    /// Returns the handlers released by whatever promise this handler settled in turn.
    func handle(settled source: AnyObject) -> ReleasedHandlers

    /// Removes the last element of `stack` (an instance of this type) and, if that was the last
    /// reference to it, appends the handlers waiting for it, so releasing it recurses no further.
    static func popForTeardown(_ stack: inout [any PromiseHandler])

    /// `true` for handlers that are promises (`PromiseStep`s): releasing one may release a
    /// whole chain.
    static var isPromiseStep: Bool { get }
}

extension PromiseHandler {
    @usableFromInline static func popForTeardown(_ stack: inout [any PromiseHandler]) {
        stack.removeLast()
    }

    @usableFromInline static var isPromiseStep: Bool { false }
}

// MARK: - The list of a pending promise

/// The handlers waiting for one promise. The first is stored inline: a promise with a single
/// handler allocates no array. Only touched under the lock of the promise holding it.
@usableFromInline package struct Handlers {
    var first: (any PromiseHandler)?
    var rest: [any PromiseHandler]?

    @inline(__always) init() {}

    @inline(__always) var isEmpty: Bool { first == nil }

    @inline(__always)
    mutating func append(_ handler: any PromiseHandler) {
        if first == nil {
            first = handler
        } else if rest == nil {
            rest = [handler]
        } else {
            rest!.append(handler)
        }
    }

    /// Whether the first handler is a promise step (see `PromiseHandler.isPromiseStep`).
    @inline(__always) var firstIsPromiseStep: Bool {
        guard let first else { return false }
        return type(of: first).isPromiseStep
    }

    /// Visits every handler in the order they were added.
    func forEach(_ body: (any PromiseHandler) -> Void) {
        guard let first else { return }
        body(first)
        rest?.forEach(body)
    }

    /// Appends every handler to `stack` and empties the list.
    mutating func moveAll(to stack: inout [any PromiseHandler]) {
        if let first { stack.append(first) }
        if let rest { stack.append(contentsOf: rest) }
        self = Handlers()
    }

    /// The number of handlers still waiting: every one but the listeners whose owner is gone.
    /// Only under the lock of the promise holding the list; `releasedAfterUnlock` receives
    /// objects the caller must release only once that lock is unlocked (see
    /// `SettleListener.liveOwner`).
    func waitingCount(releasedAfterUnlock: inout [AnyObject]) -> Int {
        var count = 0
        forEach { handler in
            if !isSpentListener(handler, releasedAfterUnlock: &releasedAfterUnlock) { count += 1 }
        }
        return count
    }

    /// How many handlers the list stores, spent listeners included, and the capacity
    /// of its array; used by tests to check that storage stays bounded.
    var storage: (stored: Int, capacity: Int) {
        guard first != nil else { return (0, 0) }
        return (1 + (rest?.count ?? 0), 1 + (rest?.capacity ?? 0))
    }

    /// Appends a settle listener, first dropping the spent ones (whose owner is gone) when the
    /// array is full, so that a long-lived promise stores only about as many listeners as have
    /// a live owner.
    /// Each sweep visits the array once and happens only when the array would otherwise grow,
    /// which makes appending O(1) amortised. Only under the lock of the promise holding the list;
    /// the dropped listeners go to `releasedAfterUnlock`, for the caller to release once
    /// that lock is unlocked.
    mutating func append(listener: SettleListener, releasedAfterUnlock: inout [AnyObject]) {
        let isFull = rest.map { $0.count == $0.capacity } ?? false
        if isFull {
            sweepSpentListeners(releasedAfterUnlock: &releasedAfterUnlock)
        } else if rest == nil, let first, isSpentListener(first, releasedAfterUnlock: &releasedAfterUnlock) {
            releasedAfterUnlock.append(first)
            self.first = nil
        }
        append(listener)
    }

    /// Drops the spent listeners, keeping the order of the others. Then, so that the next
    /// sweep comes only after about as many appends as this one visited, the array grows if it
    /// is more than half full, and gives most of its capacity back if it is less than a quarter
    /// full.
    private mutating func sweepSpentListeners(releasedAfterUnlock: inout [AnyObject]) {
        guard var list = rest else { return }
        rest = nil  // leaves `list` the only reference, so it is changed in place
        let capacity = list.capacity
        var kept = 0
        for index in list.indices {
            let handler = list[index]
            if isSpentListener(handler, releasedAfterUnlock: &releasedAfterUnlock) {
                releasedAfterUnlock.append(handler)
            } else {
                list[kept] = handler
                kept += 1
            }
        }
        list.removeLast(list.count - kept)
        if let first, isSpentListener(first, releasedAfterUnlock: &releasedAfterUnlock) {
            releasedAfterUnlock.append(first)
            self.first = list.isEmpty ? nil : list.removeFirst()
        }
        guard !list.isEmpty else { return }
        if list.count * 2 > capacity {
            list.reserveCapacity(capacity * 2)
        } else if list.count * 4 < capacity {
            var smaller: [any PromiseHandler] = []
            smaller.reserveCapacity(list.count * 2)
            smaller.append(contentsOf: list)
            list = smaller
        }
        rest = list
    }
}

/// Never sent between threads as a value: it lives in its promise, under that promise's lock.
@available(*, unavailable) extension Handlers: Sendable {}

/// Whether `handler` is a settle listener whose owner is gone. The owner of a live one goes to
/// `releasedAfterUnlock`: checking it takes a strong reference, which must not be the last one
/// released while the lock is held.
@inline(__always)
private func isSpentListener(_ handler: any PromiseHandler, releasedAfterUnlock: inout [AnyObject]) -> Bool {
    guard let listener = handler as? SettleListener else { return false }
    guard let owner = listener.liveOwner else { return true }
    releasedAfterUnlock.append(owner)
    return false
}

// MARK: - Running and releasing handlers

/// What settling a promise released: the handlers to run and the attachment to notify, which
/// must be run with `drain`; or nothing, when the call settled nothing.
///
/// An enum rather than a struct of optionals: copying or destroying a struct with optional
/// reference fields compiles to calls through generic value witnesses (about 60 instructions a
/// field, on every settle), an enum's payload to plain releases.
@usableFromInline package enum ReleasedHandlers {
    /// Nothing settled (the promise had settled already), or nothing to run.
    case none
    /// The promise settled, with no handler waiting and no attachment to tell: the common end
    /// of a chain, returned without a reference to the promise (nothing to retain or release).
    case settled
    /// `source` settled, releasing `handlers` and its `attachment` (told first, with `key`, what
    /// it knows `source` by).
    case released(source: AnyObject, handlers: Handlers, attachment: (any PromiseAttachment)?, key: UInt32)

    /// Whether the call that returned this settled its promise.
    @inline(__always) var didSettle: Bool {
        if case .none = self { return false }
        return true
    }
}

/// Run by the thread that settled their promise (or took them from a lock), never handed to
/// another one: that thread is the one that must run them.
@available(*, unavailable) extension ReleasedHandlers: Sendable {}

/// Runs released handlers, and the handlers they release, iteratively and depth first, in the
/// order a recursive implementation would use (the order they were added, at each promise).
@usableFromInline func drain(_ start: ReleasedHandlers) {
    guard case .released(let source, let handlers, let attachment, let key) = start else { return }
    runReleased(source: source, handlers: handlers, attachment: attachment, key: key)
}

/// `drain` for a value the caller gives up (one taken out of a list): its payload moves into
/// the loop instead of being copied, one retain and one release fewer per reference in it.
package func drain(consuming start: consuming ReleasedHandlers) {
    switch consume start {
    case .released(let source, let handlers, let attachment, let key):
        runReleased(source: source, handlers: handlers, attachment: attachment, key: key)
    case .none, .settled:
        return
    }
}

/// The loop of `drain`, from the first settled promise's released handlers and attachment.
/// Handlers are moved out of each released list (`take()`), not copied: a copy costs a retain
/// here and a release when the list is destroyed.
private func runReleased(
    source: consuming AnyObject, handlers: consuming Handlers, attachment: consuming (any PromiseAttachment)?,
    key: UInt32
) {
    var source = source
    var handlers = handlers
    attachment?.promiseDidSettle(key: UInt64(key))
    guard var current = handlers.first.take() else { return }
    var deferred: [(AnyObject, any PromiseHandler)] = []
    if let rest = handlers.rest.take() {
        pushDeferred(rest, of: source, onto: &deferred)
    }
    while true {
        let next = current.handle(settled: source)
        // Consumed, so that its payload moves out without being copied.
        switch consume next {
        case .released(let nextSource, var handlers, let attachment, let key):
            attachment?.promiseDidSettle(key: UInt64(key))
            if let first = handlers.first.take() {
                if let rest = handlers.rest.take() {
                    pushDeferred(rest, of: nextSource, onto: &deferred)
                }
                current = first
                source = nextSource
                continue
            }
        case .none, .settled:
            break
        }
        if let (s, h) = deferred.popLast() {
            current = h
            source = s
        } else {
            return
        }
    }
}

/// Pushes `handlers` of `source` onto `deferred`, the last first (so they are popped in the
/// order they were added). Makes room for all of them at once, growing geometrically, where
/// appending one by one reallocates at each power of two: a promise with four extra handlers
/// takes one allocation here instead of three.
@inline(__always)
private func pushDeferred(
    _ handlers: [any PromiseHandler], of source: AnyObject, onto deferred: inout [(AnyObject, any PromiseHandler)]
) {
    let needed = deferred.count + handlers.count
    if needed > deferred.capacity { deferred.reserveCapacity(max(needed, 2 * deferred.capacity)) }
    for handler in handlers.reversed() { deferred.append((source, handler)) }
}

/// Releases a list of pending handlers without recursing through nested `deinit`s: every step
/// we hold the last reference to gives up its own handlers before it is released.
func teardown(_ handlers: inout Handlers) {
    guard !handlers.isEmpty else { return }
    // No binding to the first handler may outlive the test: `popForTeardown` checks that the
    // stack holds the only reference.
    if handlers.rest == nil, !handlers.firstIsPromiseStep {
        // A single handler that is not a step (an aggregate, a closure) is released as
        // popping it from the stack would, without allocating the stack.
        handlers = Handlers()
        return
    }
    var stack: [any PromiseHandler] = []
    handlers.moveAll(to: &stack)
    while !stack.isEmpty {
        // Only the stack may reference the element while its type pops it.
        let kind = type(of: stack[stack.count - 1])
        kind.popForTeardown(&stack)
    }
}

// MARK: - Handlers that are not steps

/// A handler that calls a closure; used by `pipe(to:)` and by less frequent operators.
final class ClosureHandler<T>: PromiseHandler, @unchecked Sendable {
    // @unchecked: added on one thread, run once on the settling thread (ordered by the promise's lock).
    private var body: ((Result<T>) -> ReleasedHandlers)?

    init(_ body: @escaping (Result<T>) -> ReleasedHandlers) {
        self.body = body
    }

    func handle(settled source: AnyObject) -> ReleasedHandlers {
        let result = unsafeDowncast(source, to: Promise<T>.self).settledResult
        let body = self.body
        self.body = nil
        return body?(result) ?? .none
    }
}

/// A handler that settles `target` as its source settled; added by `relay(to:)`.
final class Relay<T>: PromiseHandler, @unchecked Sendable {
    // @unchecked: added on one thread, run once on the settling thread (ordered by the promise's lock).
    private var target: Promise<T>?

    init(_ target: Promise<T>) {
        self.target = target
    }

    func handle(settled source: AnyObject) -> ReleasedHandlers {
        guard let target else { return .none }
        self.target = nil
        return target.settle(as: unsafeDowncast(source, to: Promise<T>.self))
    }
}
