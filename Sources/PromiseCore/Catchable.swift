import Dispatch

/// Error handling for thenables that can reject: `catch`, `recover`, `ensure`, `ensureThen`,
/// `cauterize`. (`Guarantee` cannot reject and is not a `CatchMixin`.)
public protocol CatchMixin: Thenable {}

extension CatchMixin {
    /// Handles a rejection: `body` runs on `on` with the error.
    ///
    /// With the default policy (`conf.catchPolicy`, `.allErrorsExceptCancellation`),
    /// cancellation errors are skipped; pass `.allErrors` to see them. The returned finalizer
    /// runs `finally` once the chain has ended either way.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    @inlinable public func `catch`(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @MainActor @Sendable (Error) -> Void
    ) -> PMKFinalizer {
        `catch`(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// Handles a rejection: `body` runs on `on` with the error.
    ///
    /// With the default policy (`conf.catchPolicy`, `.allErrorsExceptCancellation`),
    /// cancellation errors are skipped; pass `.allErrors` to see them. The returned finalizer
    /// runs `finally` once the chain has ended either way.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    @inlinable public func `catch`(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @Sendable (Error) -> Void
    ) -> PMKFinalizer {
        PMKFinalizer(
            asPromise()._generalStep(on: on, flags: flags, hop: .rejected(policy), isObserver: true) { result in
                if case .rejected(let error) = result, policy._catches(error) {
                    body(error)
                }
                return .result(.fulfilled(()))
            })
    }

    /// Handles a rejection by returning a promise to continue with; `body` runs on `on`.
    ///
    /// With the default policy a cancellation error is not recovered and passes through.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func recover<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @MainActor @Sendable (Error) throws -> U
    ) -> Promise<T> where U.T == T {
        recover(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// Handles a rejection by returning a promise to continue with; `body` runs on `on`.
    ///
    /// With the default policy a cancellation error is not recovered and passes through.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func recover<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @Sendable (Error) throws -> U
    ) -> Promise<T> where U.T == T {
        asPromise()._generalStep(on: on, flags: flags, hop: .rejected(policy)) { result in
            guard case .rejected(let error) = result, policy._catches(error) else {
                return .result(result)
            }
            return .settleAs(try body(error).asPromise())
        }
    }

    /// Handles every rejection, cancellation included, with a guarantee: the result cannot
    /// reject.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    @inlinable public func recover(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (Error) -> Guarantee<T>
    ) -> Guarantee<T> {
        recover(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Handles every rejection, cancellation included, with a guarantee: the result cannot
    /// reject.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    @inlinable public func recover(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (Error) -> Guarantee<T>
    ) -> Guarantee<T> {
        Guarantee(
            promise: asPromise()._generalStep(on: on, flags: flags, hop: .rejected(.allErrors)) { result in
                guard case .rejected(let error) = result else { return .result(result) }
                return .settleAs(body(error).promise)
            })
    }

    /// Runs `body` on `on` once settled, whatever the result (cancellation included), and
    /// passes the result on.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func ensure(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> Void
    ) -> Promise<T> {
        ensure(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` on `on` once settled, whatever the result (cancellation included), and
    /// passes the result on.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func ensure(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable () -> Void
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { result in
            body()
            return .result(result)
        }
    }

    /// Like `ensure`, but waits for the guarantee `body` returns before passing the result on.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func ensureThen(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> Guarantee<Void>
    ) -> Promise<T> {
        ensureThen(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Like `ensure`, but waits for the guarantee `body` returns before passing the result on.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func ensureThen(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable () -> Guarantee<Void>
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { result in
            .settleAs(body().promise._generalStep(on: nil, flags: nil, hop: .never) { _ in .result(result) })
        }
    }

    /// Ends the chain, logging any error except cancellation through `conf.logHandler`
    /// (`LogEvent.cauterized`).
    @discardableResult
    @inlinable public func cauterize() -> PMKFinalizer {
        self.catch(on: nil) { conf.logHandler(.cauterized($0)) }
    }
}

extension CatchMixin where T == Void {
    /// Handles every rejection with a non-throwing body: the result cannot reject.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    @inlinable public func recover(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (Error) -> Void
    ) -> Guarantee<Void> {
        recover(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Handles every rejection with a non-throwing body: the result cannot reject.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    @inlinable public func recover(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (Error) -> Void
    ) -> Guarantee<Void> {
        Guarantee(
            promise: asPromise()._generalStep(on: on, flags: flags, hop: .rejected(.allErrors)) { result in
                if case .rejected(let error) = result { body(error) }
                return .result(.fulfilled(()))
            })
    }

    /// Handles a rejection with a throwing body; a throw rejects with the new error.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func recover(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @MainActor @Sendable (Error) throws -> Void
    ) -> Promise<Void> {
        recover(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// Handles a rejection with a throwing body; a throw rejects with the new error.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func recover(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @Sendable (Error) throws -> Void
    ) -> Promise<Void> {
        asPromise()._generalStep(on: on, flags: flags, hop: .rejected(policy)) { result in
            guard case .rejected(let error) = result, policy._catches(error) else {
                return .result(result)
            }
            try body(error)
            return .result(.fulfilled(()))
        }
    }
}

/// The end of a chain, returned by `catch` and `cauterize`.
public class PMKFinalizer: @unchecked Sendable {
    // @unchecked: a class that is not final cannot be checked; it holds only a `let` promise.
    @usableFromInline let _promise: Promise<Void>

    @usableFromInline init(_ promise: Promise<Void>) {
        self._promise = promise
    }

    /// Runs `body` on `on` once the chain and its `catch` are done.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func finally(
        on: MainActorQueue = .main, flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> Void
    ) {
        finally(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` on `on` once the chain and its `catch` are done.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func finally(
        on: DispatchQueue?, flags: DispatchWorkItemFlags? = nil, _ body: @escaping @Sendable () -> Void
    ) {
        _ = _promise._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { _ in
            body()
            return .result(.fulfilled(()))
        }
    }
}
