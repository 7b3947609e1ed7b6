import Dispatch

// The steps of a chain. Each is the promise it produces, waiting on its source as a
// `Continuation`: one allocation per link.

/// `map` and `done`: transforms a fulfilled value; a rejection passes through without a hop.
@usableFromInline final class MapStep<T, U>: Promise<U>, Continuation, @unchecked Sendable {
    @exclusivity(unchecked) private var transform: ((T) throws -> U)?
    private let queue: DispatchQueue?
    private let flags: DispatchWorkItemFlags?

    @usableFromInline
    init(queue: DispatchQueue?, flags: DispatchWorkItemFlags?, transform: @escaping (T) throws -> U) {
        self.transform = transform
        self.queue = queue
        self.flags = flags
        super.init(pending: ())
    }

    @usableFromInline func resume(from source: AnyObject) -> Unblocked {
        let source = unsafeDowncast(source, to: Promise<T>.self)
        if let error = source.settledError {
            transform = nil
            return settle(rejected: error)
        }
        let value = source.settledValue
        guard let queue else { return run(value) }
        return dispatchStep(on: queue, flags: flags) { self.run(value) }
    }

    private func run(_ value: T) -> Unblocked {
        let transform = self.transform!
        self.transform = nil
        switch bodyStart {
        case .start: break
        case .settled: return .none
        case .reject(let error): return settle(rejected: error)
        }
        do {
            return settle(fulfilled: try transform(value))
        } catch {
            return settle(rejected: error)
        }
    }

    @usableFromInline static func popForTeardown(_ stack: inout [any Continuation]) {
        popPromiseStepForTeardown(self, &stack) { $0.takeHandlersForTeardown() }
    }

    @usableFromInline static var isPromiseStep: Bool { true }
}

/// `then`: runs a body returning a promise, then follows that promise.
@usableFromInline final class ThenStep<T, R: Thenable>: Promise<R.T>, Continuation, @unchecked Sendable {
    @exclusivity(unchecked) private var body: ((T) throws -> R)?
    private let queue: DispatchQueue?
    private let flags: DispatchWorkItemFlags?
    /// Set once the body has returned: further resumes come from the returned promise.
    @exclusivity(unchecked) private var following = false

    @usableFromInline
    init(queue: DispatchQueue?, flags: DispatchWorkItemFlags?, body: @escaping (T) throws -> R) {
        self.body = body
        self.queue = queue
        self.flags = flags
        super.init(pending: ())
    }

    @usableFromInline func resume(from source: AnyObject) -> Unblocked {
        if following {
            return settle(as: unsafeDowncast(source, to: Promise<R.T>.self))
        }
        let source = unsafeDowncast(source, to: Promise<T>.self)
        if let error = source.settledError {
            body = nil
            return settle(rejected: error)
        }
        let value = source.settledValue
        guard let queue else { return run(value) }
        return dispatchStep(on: queue, flags: flags) { self.run(value) }
    }

    private func run(_ value: T) -> Unblocked {
        let body = self.body!
        self.body = nil
        switch bodyStart {
        case .start: break
        case .settled: return .none
        case .reject(let error): return settle(rejected: error)
        }
        let returned: Promise<R.T>
        do {
            let rv = try body(value)
            if rv === self { return settle(rejected: PMKError.returnedSelf) }
            returned = rv.asPromise()
        } catch {
            return settle(rejected: error)
        }
        if returned === self { return settle(rejected: PMKError.returnedSelf) }
        following = true
        return returned.observe(self)
    }

    @usableFromInline static func popForTeardown(_ stack: inout [any Continuation]) {
        popPromiseStepForTeardown(self, &stack) { $0.takeHandlersForTeardown() }
    }

    @usableFromInline static var isPromiseStep: Bool { true }
}

/// What a general step does with its source's result.
package enum StepOutcome<U> {
    /// Settle with this result.
    case result(Result<U>)
    /// Follow this promise.
    case follow(Promise<U>)
}

/// The general step behind the less frequent operators (`recover`, `ensure`, `tap`, `get`,
/// `compactMap`, `catch`…): `body` receives the source's result, on `queue` when `hop` says
/// the body must run for it, and decides this promise's outcome.
package final class Step<T, U>: Promise<U>, Continuation, @unchecked Sendable {
    @exclusivity(unchecked) private var body: ((Result<T>) throws -> StepOutcome<U>)?
    private let queue: DispatchQueue?
    private let flags: DispatchWorkItemFlags?
    private let hop: HopRule
    /// Observers (`tap`, `ensure`, `catch`, `finally`) run even once this promise has been
    /// settled by a cancellation; other steps do not start then.
    private let isObserver: Bool
    @exclusivity(unchecked) private var following = false

    package init(
        queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        hop: HopRule,
        isObserver: Bool,
        body: @escaping (Result<T>) throws -> StepOutcome<U>
    ) {
        self.body = body
        self.queue = queue
        self.flags = flags
        self.hop = hop
        self.isObserver = isObserver
        super.init(pending: ())
    }

    package func resume(from source: AnyObject) -> Unblocked {
        if following {
            return settle(as: unsafeDowncast(source, to: Promise<U>.self))
        }
        let result = unsafeDowncast(source, to: Promise<T>.self).settledResult
        guard let queue, hop.runsBody(for: result) else { return run(result) }
        return dispatchStep(on: queue, flags: flags) { self.run(result) }
    }

    private func run(_ result: Result<T>) -> Unblocked {
        let body = self.body!
        self.body = nil
        if !isObserver, hop.runsBody(for: result) {
            switch bodyStart {
            case .start: break
            case .settled: return .none
            case .reject(let error): return settle(rejected: error)
            }
        }
        do {
            switch try body(result) {
            case .result(let outcome):
                return settle(outcome)
            case .follow(let promise):
                if promise === self { return settle(rejected: PMKError.returnedSelf) }
                following = true
                return promise.observe(self)
            }
        } catch {
            return settle(rejected: error)
        }
    }

    package static func popForTeardown(_ stack: inout [any Continuation]) {
        popPromiseStepForTeardown(self, &stack) { $0.takeHandlersForTeardown() }
    }

    package static var isPromiseStep: Bool { true }
}

extension Promise {
    /// Attaches a general step to this promise and returns it.
    package final func step<U>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        hop: HopRule,
        isObserver: Bool = false,
        attachment: (any PromiseAttachment)? = nil,
        _ body: @escaping (Result<T>) throws -> StepOutcome<U>
    ) -> Promise<U> {
        let step = Step<T, U>(queue: queue, flags: flags, hop: hop, isObserver: isObserver, body: body)
        if let attachment { step.initializeAttachment(attachment) }
        drain(observe(step))
        return step
    }

    /// `map` whose step has `attachment` from the start (see `PromiseAttachment.errorBeforeBody`).
    @inlinable package final func map<U>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        attachment: any PromiseAttachment,
        _ transform: @escaping (T) throws -> U
    ) -> Promise<U> {
        let step = MapStep<T, U>(queue: queue, flags: flags, transform: transform)
        step.initializeAttachment(attachment)
        drain(observe(step))
        return step
    }

    /// `then` whose step has `attachment` from the start.
    @inlinable package final func then<R: Thenable>(
        on queue: DispatchQueue?,
        flags: DispatchWorkItemFlags?,
        attachment: any PromiseAttachment,
        _ body: @escaping (T) throws -> R
    ) -> Promise<R.T> {
        let step = ThenStep<T, R>(queue: queue, flags: flags, body: body)
        step.initializeAttachment(attachment)
        drain(observe(step))
        return step
    }
}

/// A promise that settles as its source does, synchronously: one allocation, no closure.
@usableFromInline final class FollowStep<T>: Promise<T>, Continuation, @unchecked Sendable {
    @usableFromInline init() { super.init(pending: ()) }

    @usableFromInline func resume(from source: AnyObject) -> Unblocked {
        settle(as: unsafeDowncast(source, to: Promise<T>.self))
    }

    @usableFromInline static func popForTeardown(_ stack: inout [any Continuation]) {
        popPromiseStepForTeardown(self, &stack) { $0.takeHandlersForTeardown() }
    }

    @usableFromInline static var isPromiseStep: Bool { true }
}

extension Promise {
    /// A new promise that settles as this one does, on the settling thread. Settling it by
    /// other means first (a cancellation) leaves this promise untouched.
    @inlinable package final func follower() -> Promise<T> {
        let follower = FollowStep<T>()
        drain(observe(follower))
        return follower
    }
}
