import Dispatch

/// Error handling for thenables that can reject: `catch`, `recover`, `ensure`, `ensureThen`,
/// `cauterize`. (`Guarantee` cannot reject and is not a `CatchMixin`.)
public protocol CatchMixin: Thenable {}

extension CatchMixin {
    /// Handles a rejection: `body` runs on `on` (default `conf.Q.return`) with the error.
    ///
    /// With the default policy (`conf.catchPolicy`, `.allErrorsExceptCancellation`),
    /// cancellation errors are skipped; pass `.allErrors` to see them. The returned finalizer
    /// runs `finally` once the chain has ended either way.
    @discardableResult
    @inlinable public func `catch`(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping (Error) -> Void
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
    @inlinable public func recover<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping (Error) throws -> U
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
    @discardableResult
    @inlinable public func recover(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (Error) -> Guarantee<T>
    ) -> Guarantee<T> {
        Guarantee(
            promise: asPromise()._generalStep(on: on, flags: flags, hop: .rejected(.allErrors)) { result in
                guard case .rejected(let error) = result else { return .result(result) }
                return .settleAs(body(error).promise)
            })
    }

    /// Runs `body` on `on` once settled, whatever the result (cancellation included), and
    /// passes the result on.
    @inlinable public func ensure(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping () -> Void
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { result in
            body()
            return .result(result)
        }
    }

    /// Like `ensure`, but waits for the guarantee `body` returns before passing the result on.
    @inlinable public func ensureThen(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping () -> Guarantee<Void>
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
    @discardableResult
    @inlinable public func recover(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (Error) -> Void
    ) -> Guarantee<Void> {
        Guarantee(
            promise: asPromise()._generalStep(on: on, flags: flags, hop: .rejected(.allErrors)) { result in
                if case .rejected(let error) = result { body(error) }
                return .result(.fulfilled(()))
            })
    }

    /// Handles a rejection with a throwing body; a throw rejects with the new error.
    @inlinable public func recover(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping (Error) throws -> Void
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

    /// Runs `body` on `on` (default `conf.Q.return`) once the chain and its `catch` are done.
    @inlinable public func finally(
        on: DispatchQueue? = conf.Q.return, flags: DispatchWorkItemFlags? = nil, _ body: @escaping () -> Void
    ) {
        _ = _promise._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { _ in
            body()
            return .result(.fulfilled(()))
        }
    }
}
