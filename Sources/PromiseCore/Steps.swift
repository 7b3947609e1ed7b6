import Dispatch

// The steps of a chain. Each is the promise it produces, waiting on its source as a
// `PromiseHandler`: one allocation per link. `MapStep` and `ThenStep` serve the frequent
// operators, `GeneralStep` the others, and `MirrorStep` a promise that only settles as its
// source does. A step hops to its queue (`HopRule`, `queueHop`) only for the results its
// body acts on, and its body starts only while its promise and attachment allow it.

// MARK: - What every step shares

/// A handler that is itself a promise: a step of a chain. Releasing the last reference to one
/// may release a whole pending chain after it, so its type implements `popForTeardown` (see
/// `teardown`) with the promise's own handlers.
@usableFromInline protocol PromiseStep: PromiseHandler {
    /// Moves out this promise's handlers; only while the caller holds its last reference.
    func takeHandlersForTeardown() -> Handlers
}

extension PromiseStep {
    @usableFromInline static func popForTeardown(_ stack: inout [any PromiseHandler]) {
        // The check runs on a variable of the concrete type: on an existential or `AnyObject`
        // copy, `isKnownUniquelyReferenced` always fails.
        var step = stack.removeLast() as! Self
        if isKnownUniquelyReferenced(&step) {
            var released = step.takeHandlersForTeardown()
            released.moveAll(to: &stack)
        }
    }

    @usableFromInline static var isPromiseStep: Bool { true }
}

/// Which results a step hops to its queue for: those its body acts on with the caller's code.
/// The body is called for every result; for the others it runs none of the caller's code (it
/// passes a rejection on past `map`, for instance), synchronously on the settling thread, and
/// it does so even once the step's chain is cancelled.
@usableFromInline package enum HopRule {
    /// For no result: the body runs synchronously whatever the result.
    case never
    /// For every result (`ensure`, `tap`, `finally`).
    case always
    /// For a fulfilment (`map`, `then`, `done`, `get`…).
    case fulfilled
    /// For a rejection the policy catches (`catch`, `recover`).
    case rejected(CatchPolicy)

    /// Whether the step hops to its queue for an outcome with `error` (`nil` for a fulfilment),
    /// its body acting on it. Decided from the error alone, so no `Result` needs building.
    @inline(__always)
    @inlinable func hops(settledError error: (any Error)?) -> Bool {
        switch self {
        case .never: return false
        case .always: return true
        case .fulfilled: return error == nil
        case .rejected(let policy): return error.map(policy._catches) ?? false
        }
    }
}

/// Where a step's body runs when the step hops: a queue, with the flags of its `async` if any.
/// One word in the step (the flags, rarely given, live in an object of their own), where a
/// queue and optional flags stored side by side take three.
enum StepQueue {
    case plain(DispatchQueue)
    case withFlags(QueueWithFlags)

    /// `queue`, with `flags` if any; `nil` for no queue (the body runs synchronously).
    init?(_ queue: DispatchQueue?, flags: DispatchWorkItemFlags?) {
        guard let queue else { return nil }
        if let flags {
            self = .withFlags(QueueWithFlags(queue: queue, flags: flags))
        } else {
            self = .plain(queue)
        }
    }
}

/// A queue and the flags of the steps' `async` on it (see `StepQueue`).
final class QueueWithFlags {
    let queue: DispatchQueue
    let flags: DispatchWorkItemFlags

    init(queue: DispatchQueue, flags: DispatchWorkItemFlags) {
        self.queue = queue
        self.flags = flags
    }
}

/// Queues `step`'s body on `queue` (the step has stored the settled source it reads, see
/// `Promise.runQueuedHop`) and drains what it releases there; returns nothing to drain here.
///
/// The block captures the step alone, as its base class `Promise<U>`, and calls a class method:
/// a closure whose one capture is a class reference uses that reference as its context, so a
/// hop allocates the block and nothing else (one allocation fewer than a bare `queue.async`
/// whose closure captures two values). Capturing the source too, or the step as a protocol
/// existential, needs a context box; capturing a value needs a generic box as well.
func queueHop<U>(_ step: Promise<U>, on queue: StepQueue) -> ReleasedHandlers {
    switch queue {
    case .plain(let queue):
        queue.async { drain(step.runQueuedHop()) }
    case .withFlags(let target):
        target.queue.async(flags: target.flags) { drain(step.runQueuedHop()) }
    }
    return .none
}

extension Promise {
    /// What a step does instead of starting its body, or `nil` if the body may start, marked as
    /// `mark` says (see `bodyStart`): nothing once the step has settled, or reject with its
    /// attachment's error.
    @inline(__always) @usableFromInline final func releasedInsteadOfBody(
        mark: inout RunningBodyMark?
    ) -> ReleasedHandlers? {
        switch bodyStart {
        case .start(let started):
            mark = started
            return nil
        case .settled: return ReleasedHandlers.none
        case .reject(let error): return settle(rejected: error)
        }
    }
}

// MARK: - The steps

/// What `MapStep` and `ThenStep` share: a body that acts on a fulfilled value, on `queue` if
/// there is one (hopping there with the settled source kept in `hopSource`), while a rejection
/// passes through without a hop. The subclasses provide the body (`run`) and drop it
/// (`dropBody`) when a rejection passes through; they are called through the class's table, with
/// no protocol witness.
@usableFromInline class ValueStep<T, U>: Promise<U>, @unchecked Sendable {
    // @unchecked: restates Promise's; `hopSource` is set before the hop is queued and taken by
    // the queued block.
    private let queue: StepQueue?
    /// The settled source, from queueing the hop until the queued body reads it.
    @exclusivity(unchecked) private var hopSource: Promise<T>?

    init(queue: DispatchQueue?, flags: DispatchWorkItemFlags?) {
        self.queue = StepQueue(queue, flags: flags)
        super.init(pending: ())
    }

    /// Passes a rejection of `source` through, or runs the body for its value (after a hop to
    /// the queue, if any).
    @inline(__always) final func handleSource(_ source: AnyObject) -> ReleasedHandlers {
        let source = unsafeDowncast(source, to: Promise<T>.self)
        if let error = source.settledError {
            dropBody()
            return settle(rejected: error)
        }
        guard let queue else { return run(source.settledValue) }
        hopSource = source
        return queueHop(self, on: queue)
    }

    override final func runQueuedHop() -> ReleasedHandlers {
        let source = hopSource!
        hopSource = nil
        return run(source.settledValue)
    }

    /// Runs the body for `value` and settles this promise (or waits) accordingly.
    func run(_ value: T) -> ReleasedHandlers {
        preconditionFailure("ValueStep.run: a subclass runs its body")
    }

    /// Releases the body, which will not run.
    func dropBody() {}
}

/// `map` and `done`: transforms a fulfilled value; a rejection passes through without a hop.
@usableFromInline final class MapStep<T, U>: ValueStep<T, U>, PromiseStep, @unchecked Sendable {
    // @unchecked: restates Promise's; `transform` is taken once, by the thread that runs the body.
    @exclusivity(unchecked) private var transform: ((T) throws -> U)?

    @usableFromInline
    init(queue: DispatchQueue?, flags: DispatchWorkItemFlags?, transform: @escaping (T) throws -> U) {
        self.transform = transform
        super.init(queue: queue, flags: flags)
    }

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        handleSource(source)
    }

    override func dropBody() { transform = nil }

    override func run(_ value: T) -> ReleasedHandlers {
        let transform = self.transform!
        self.transform = nil
        var mark: RunningBodyMark?
        if let instead = releasedInsteadOfBody(mark: &mark) { return instead }
        do {
            let transformed = try transform(value)
            if let mark { leaveRunningBody(mark) }
            return settle(fulfilled: transformed)
        } catch {
            if let mark { leaveRunningBody(mark) }
            return settle(rejected: error)
        }
    }
}

/// `then`: runs a body returning a promise, then settles as that promise does.
@usableFromInline final class ThenStep<T, R: Thenable>: ValueStep<T, R.T>, PromiseStep, @unchecked Sendable {
    // @unchecked: restates Promise's; `body` is taken once, by the thread that runs it.
    @exclusivity(unchecked) private var body: ((T) throws -> R)?
    /// Set once the body has returned a promise and the step waits for it: the next call to
    /// `handle(settled:)` comes from that promise.
    @exclusivity(unchecked) private var awaitsReturnedPromise = false

    @usableFromInline
    init(queue: DispatchQueue?, flags: DispatchWorkItemFlags?, body: @escaping (T) throws -> R) {
        self.body = body
        super.init(queue: queue, flags: flags)
    }

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        if awaitsReturnedPromise {
            return settle(as: unsafeDowncast(source, to: Promise<R.T>.self))
        }
        return handleSource(source)
    }

    override func dropBody() { body = nil }

    override func run(_ value: T) -> ReleasedHandlers {
        let body = self.body!
        self.body = nil
        var mark: RunningBodyMark?
        if let instead = releasedInsteadOfBody(mark: &mark) { return instead }
        let returned: Promise<R.T>
        do {
            let rv = try body(value)
            if let mark { leaveRunningBody(mark) }
            if rv === self { return settle(rejected: PMKError.returnedSelf) }
            returned = rv.asPromise()
        } catch {
            if let mark { leaveRunningBody(mark) }
            return settle(rejected: error)
        }
        if returned === self { return settle(rejected: PMKError.returnedSelf) }
        awaitsReturnedPromise = true
        return returned.addHandler(self)
    }
}

/// What a general step does with its source's result.
@usableFromInline package enum StepOutcome<U> {
    /// Settle with this result.
    case result(Result<U>)
    /// Wait for this promise and settle as it does.
    case settleAs(Promise<U>)
}

/// The general step behind the less frequent operators (`recover`, `ensure`, `tap`, `get`,
/// `compactMap`, `catch`…): `body` receives the source's result, on `queue` when `hop` says
/// the step hops for it, and decides this promise's outcome.
///
/// The class's own methods are compiled once for all `T` and `U`, and code that builds or takes
/// apart a `Result<T>` or a `StepOutcome<U>` there looks up that type's metadata at run time
/// (about 330 instructions a lookup, three per step). So the part that does, `runGeneralStep`,
/// is inlinable and reached through `runner`, a reference to its specialization made by
/// `_generalStep` in the caller's module; the class itself handles only references.
@usableFromInline final class GeneralStep<T, U>: Promise<U>, PromiseStep, @unchecked Sendable {
    // @unchecked: restates Promise's; `body` is taken once, by the thread that runs it, and
    // `hopSource` is set before the hop is queued and taken by the queued block.
    @usableFromInline @exclusivity(unchecked) var body: ((Result<T>) throws -> StepOutcome<U>)?
    /// `runGeneralStep` for `T` and `U`: runs `body` for a settled source.
    private let runner: (GeneralStep<T, U>, Promise<T>) -> ReleasedHandlers
    private let queue: StepQueue?
    @usableFromInline let hop: HopRule
    /// Observers (`tap`, `ensure`, `catch`, `finally`) run even once this promise has been
    /// settled by a cancellation; other steps do not start then.
    @usableFromInline let isObserver: Bool
    /// Made with its attachment (`_makeGeneralStep`): an observer's body runs as the running
    /// body of that attachment (see `enterObserverBody()`).
    @usableFromInline let isAttachedFromStart: Bool
    /// Set once the body has returned `.settleAs` and the step waits for that promise: the next
    /// call to `handle(settled:)` comes from it.
    @usableFromInline @exclusivity(unchecked) var awaitsReturnedPromise = false
    /// The settled source, from queueing the hop until the queued body reads it.
    @exclusivity(unchecked) private var hopSource: Promise<T>?

    @usableFromInline init(
        queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        hop: HopRule,
        isObserver: Bool,
        isAttachedFromStart: Bool = false,
        body: @escaping (Result<T>) throws -> StepOutcome<U>,
        runner: @escaping (GeneralStep<T, U>, Promise<T>) -> ReleasedHandlers
    ) {
        self.isAttachedFromStart = isAttachedFromStart
        self.body = body
        self.runner = runner
        self.queue = StepQueue(queue, flags: flags)
        self.hop = hop
        self.isObserver = isObserver
        super.init(pending: ())
    }

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        if awaitsReturnedPromise {
            return settle(as: unsafeDowncast(source, to: Promise<U>.self))
        }
        let settled = unsafeDowncast(source, to: Promise<T>.self)
        guard let queue, hop.hops(settledError: settled.settledError) else { return runner(self, settled) }
        hopSource = settled
        return queueHop(self, on: queue)
    }

    override func runQueuedHop() -> ReleasedHandlers {
        let source = hopSource!
        hopSource = nil
        return runner(self, source)
    }
}

/// Runs `step`'s body for its settled `source` (see `GeneralStep`): inlinable, so that the
/// caller's specialization builds the `Result<T>` and takes the `StepOutcome<U>` apart with
/// their metadata from static caches.
@inlinable
func runGeneralStep<T, U>(_ step: GeneralStep<T, U>, _ source: Promise<T>) -> ReleasedHandlers {
    let body = step.body!
    step.body = nil
    let error = source.settledError
    // A body that runs none of the caller's code for this result runs even once the chain is
    // cancelled.
    var mark: RunningBodyMark?
    if step.hop.hops(settledError: error) {
        if !step.isObserver {
            if let instead = step.releasedInsteadOfBody(mark: &mark) { return instead }
        } else if step.isAttachedFromStart {
            mark = step.enterObserverBody()
        }
    }
    let result: Result<T> = if let error { .rejected(error) } else { .fulfilled(source.settledValue) }
    let outcome: StepOutcome<U>
    do {
        outcome = try body(result)
        if let mark { leaveRunningBody(mark) }
    } catch {
        if let mark { leaveRunningBody(mark) }
        return step.settle(rejected: error)
    }
    switch outcome {
    case .result(.fulfilled(let value)):
        return step.settle(fulfilled: value)
    case .result(.rejected(let error)):
        return step.settle(rejected: error)
    case .settleAs(let promise):
        if promise === step { return step.settle(rejected: PMKError.returnedSelf) }
        step.awaitsReturnedPromise = true
        return promise.addHandler(step)
    }
}

extension Promise {
    /// Adds a general step to this promise and returns it.
    @inlinable package final func _generalStep<U>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        hop: HopRule,
        isObserver: Bool = false,
        _ body: @escaping (Result<T>) throws -> StepOutcome<U>
    ) -> Promise<U> {
        let step = GeneralStep<T, U>(
            queue: queue, flags: flags, hop: hop, isObserver: isObserver, body: body, runner: runGeneralStep)
        addHandlerAndDrain(step)
        return step
    }
}

/// A step made with its attachment but not yet added to its source (see `Promise._connect`):
/// nothing can run its body, settle it or see it, so its owner can list it first. Made by
/// `_makeGeneralStep`, `_makeMap` and `_makeThen`.
@usableFromInline package struct _UnconnectedStep<U> {
    /// The step, as the handler its source runs.
    @usableFromInline let handler: any PromiseHandler

    /// The step. (One stored reference, not two: a second would be retained and released on
    /// every step made.)
    @inlinable package var promise: Promise<U> { unsafeDowncast(handler, to: Promise<U>.self) }

    @usableFromInline init(_ step: some PromiseStep & Promise<U>) {
        handler = step
    }
}

extension Promise {
    /// Adds `step`, made from this promise by one of the `_make…` functions, as a handler: its
    /// body runs when this promise settles (at once if it has).
    @inlinable package final func _connect<U>(_ step: _UnconnectedStep<U>) {
        addHandlerAndDrain(step.handler)
    }

    /// A general step of this promise with `attachment` (which knows it by `key`) from the start
    /// (see `PromiseAttachment.errorBeforeBody`), not yet connected.
    @inlinable package final func _makeGeneralStep<U>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        hop: HopRule,
        isObserver: Bool = false,
        attachment: any PromiseAttachment,
        key: UInt32,
        _ body: @escaping (Result<T>) throws -> StepOutcome<U>
    ) -> _UnconnectedStep<U> {
        let step = GeneralStep<T, U>(
            queue: queue, flags: flags, hop: hop, isObserver: isObserver, isAttachedFromStart: true, body: body,
            runner: runGeneralStep)
        step.initializeAttachment(attachment, key: key)
        return _UnconnectedStep(step)
    }

    /// A `map` step with `attachment` from the start, not yet connected.
    @inlinable package final func _makeMap<U>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        attachment: any PromiseAttachment,
        key: UInt32,
        _ transform: @escaping (T) throws -> U
    ) -> _UnconnectedStep<U> {
        let step = MapStep<T, U>(queue: queue, flags: flags, transform: transform)
        step.initializeAttachment(attachment, key: key)
        return _UnconnectedStep(step)
    }

    /// A `then` step with `attachment` from the start, not yet connected.
    @inlinable package final func _makeThen<R: Thenable>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        attachment: any PromiseAttachment,
        key: UInt32,
        _ body: @escaping (T) throws -> R
    ) -> _UnconnectedStep<R.T> {
        let step = ThenStep<T, R>(queue: queue, flags: flags, body: body)
        step.initializeAttachment(attachment, key: key)
        return _UnconnectedStep(step)
    }
}

/// A promise that settles as its source does, synchronously: one allocation, no closure.
@usableFromInline final class MirrorStep<T>: Promise<T>, PromiseStep, @unchecked Sendable {
    // @unchecked: restates Promise's; it adds no state.
    @usableFromInline init() { super.init(pending: ()) }

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        settle(as: unsafeDowncast(source, to: Promise<T>.self))
    }
}

extension Promise {
    /// A new promise that settles as this one does, on the settling thread. Settling it by
    /// other means first (a cancellation) leaves this promise untouched.
    @inlinable package final func _mirror() -> Promise<T> {
        let mirror = MirrorStep<T>()
        addHandlerAndDrain(mirror)
        return mirror
    }
}
