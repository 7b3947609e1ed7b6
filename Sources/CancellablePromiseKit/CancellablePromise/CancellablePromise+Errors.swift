import Dispatch
import PromiseCore

// Error handling of `CancellablePromise`: `catch`, `recover`, `ensure`, `ensureThen`, `finally`
// and the chain's end, `CancellableFinalizer`. Each operator comes as a main-actor overload
// (no `on:`) and a `@Sendable` one (`on:` a queue or `nil`), as the chain operators do.

extension CancellablePromise {

    /// Handles a rejection; `body` runs on `on`. With the default
    /// policy cancellation errors are skipped; `.allErrors` receives them, including the
    /// chain's own cancellation. The finalizer can still cancel the chain.
    ///
    /// The `catch` step is a member of the chain that a cancellation does not reject (an
    /// observer, as `ensure`): its body sees its own ``CancellationToken/current``.
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
    ) -> CancellableFinalizer {
        `catch`(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// Handles a rejection; `body` runs on `on`. With the default
    /// policy cancellation errors are skipped; `.allErrors` receives them, including the
    /// chain's own cancellation. The finalizer can still cancel the chain.
    ///
    /// The `catch` step is a member of the chain that a cancellation does not reject (an
    /// observer, as `ensure`): its body sees its own ``CancellationToken/current``.
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
    ) -> CancellableFinalizer {
        CancellableFinalizer(
            step(isObserver: true) { member in
                promise._makeGeneralStep(
                    on: on, flags: flags, hop: .rejected(policy), isObserver: true, attachment: member.storage,
                    key: member.key.slot
                ) { result -> StepOutcome<Void> in
                    if case .rejected(let error) = result, policy.catches(error) { body(error) }
                    return .result(.fulfilled(()))
                }
            })
    }

    /// Recovers from a rejection with the thenable `body` returns (while this chain waits on a
    /// returned `CancellablePromise`, cancelling this chain cancels it, as for `then`). Never runs for the chain's own cancellation: a cancelled chain stays
    /// cancelled (unlike PromiseKit 7, where recovering reset it). Other cancellation errors
    /// are recovered only with `policy: .allErrors`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func recover<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @MainActor @Sendable (Error) throws -> U
    ) -> CancellablePromise<T> where U.T == T {
        recover(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// Recovers from a rejection with the thenable `body` returns (while this chain waits on a
    /// returned `CancellablePromise`, cancelling this chain cancels it, as for `then`). Never runs for the chain's own cancellation: a cancelled chain stays
    /// cancelled (unlike PromiseKit 7, where recovering reset it). Other cancellation errors
    /// are recovered only with `policy: .allErrors`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func recover<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @Sendable (Error) throws -> U
    ) -> CancellablePromise<T> where U.T == T {
        step { member in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .rejected(policy), attachment: member.storage, key: member.key.slot
            ) { result in
                guard case .rejected(let error) = result, policy.catches(error) else {
                    return .result(result)
                }
                let next = try body(error)
                member.link(next)
                return .settleAs(next.asPromise())
            }
        }
    }

    /// Recovers from any rejection except the chain's own cancellation with a guarantee.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func recover(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (Error) -> Guarantee<T>
    ) -> CancellablePromise<T> {
        recover(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Recovers from any rejection except the chain's own cancellation with a guarantee.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func recover(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (Error) -> Guarantee<T>
    ) -> CancellablePromise<T> {
        recover(on: on, flags: flags, policy: .allErrors) { error -> Guarantee<T> in body(error) }
    }

    /// Runs `body` on `on` once settled, whatever the result, cancellation included. If the
    /// chain is cancelled before `body` has run, the steps after it settle only once it has run.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func ensure(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> Void
    ) -> CancellablePromise<T> {
        ensure(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` on `on` once settled, whatever the result, cancellation included. If the
    /// chain is cancelled before `body` has run, the steps after it settle only once it has run.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func ensure(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable () -> Void
    ) -> CancellablePromise<T> {
        observer { member in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .always, isObserver: true, attachment: member.storage, key: member.key.slot
            ) { result in
                body()
                return .result(member.passOn(result))
            }
        }
    }

    /// Like `ensure`, waiting for the guarantee `body` returns: the steps after it settle once
    /// that guarantee has resolved, also when the chain is cancelled.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func ensureThen(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> Guarantee<Void>
    ) -> CancellablePromise<T> {
        ensureThen(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Like `ensure`, waiting for the guarantee `body` returns: the steps after it settle once
    /// that guarantee has resolved, also when the chain is cancelled.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func ensureThen(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable () -> Guarantee<Void>
    ) -> CancellablePromise<T> {
        observer(waitingFor: { body().asPromise() }, on: on, flags: flags)
    }

    /// Like `ensure`, waiting for the cancellable promise `body` returns (its rejection is
    /// ignored). Cancelling this chain does not cancel that cleanup: the steps after this one
    /// wait for it to settle.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func ensureThen(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> CancellablePromise<Void>
    ) -> CancellablePromise<T> {
        ensureThen(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Like `ensure`, waiting for the cancellable promise `body` returns (its rejection is
    /// ignored). Cancelling this chain does not cancel that cleanup: the steps after this one
    /// wait for it to settle.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func ensureThen(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable () -> CancellablePromise<Void>
    ) -> CancellablePromise<T> {
        observer(waitingFor: { body().asPromise() }, on: on, flags: flags)
    }

    /// The observer step of both `ensureThen`s: runs `cleanup` when this promise settles (also
    /// when the chain is cancelled) and settles as this promise did, or with the chain's
    /// cancellation, once the promise `cleanup` returned has settled (its rejection ignored).
    @inlinable
    func observer(
        waitingFor cleanup: @escaping () -> Promise<Void>, on: DispatchQueue?, flags: DispatchWorkItemFlags?
    ) -> CancellablePromise<T> {
        observer { member in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .always, isObserver: true, attachment: member.storage, key: member.key.slot
            ) { result in
                .settleAs(
                    cleanup()._generalStep(on: nil, flags: nil, hop: .never) { _ in
                        .result(member.passOn(result))
                    }
                )
            }
        }
    }

    /// Ends the chain, logging errors other than cancellation through `conf.logHandler`.
    @discardableResult
    @inlinable public func cauterize() -> CancellableFinalizer {
        self.catch(on: nil) { conf.logHandler(.cauterized($0)) }
    }
}

extension CancellablePromise where T == Void {
    /// Recovers from any rejection except the chain's own cancellation.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    @inlinable public func recover(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (Error) -> Void
    ) -> CancellablePromise<Void> {
        recover(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Recovers from any rejection except the chain's own cancellation.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    @inlinable public func recover(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (Error) -> Void
    ) -> CancellablePromise<Void> {
        plainStep { storage, key in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .rejected(.allErrors), attachment: storage, key: key
            ) { result in
                if case .rejected(let error) = result { body(error) }
                return .result(.fulfilled(()))
            }
        }
    }

    /// Recovers from a rejection with a throwing body.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func recover(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @MainActor @Sendable (Error) throws -> Void
    ) -> CancellablePromise<Void> {
        recover(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// Recovers from a rejection with a throwing body.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func recover(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @Sendable (Error) throws -> Void
    ) -> CancellablePromise<Void> {
        plainStep { storage, key in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .rejected(policy), attachment: storage, key: key
            ) { result in
                guard case .rejected(let error) = result, policy.catches(error) else {
                    return .result(result)
                }
                try body(error)
                return .result(.fulfilled(()))
            }
        }
    }
}

/// The end of a cancellable chain, returned by `catch`: it can still cancel the chain.
public final class CancellableFinalizer: Sendable {
    /// The `catch` step that ends the chain, a member of it: a handle of the chain.
    @usableFromInline let end: CancellablePromise<Void>

    @usableFromInline init(_ end: CancellablePromise<Void>) {
        self.end = end
    }

    /// A handle of the chain.
    @usableFromInline var chain: CancellablePromise<Void> { end }

    /// The `catch` step's promise.
    @usableFromInline var promise: Promise<Void> { end.promise }

    /// The chain's context (made on first use; the same one its promises return).
    public var cancelContext: CancelContext { chain._handleContext }

    /// Cancels the chain.
    public func cancel(file: StaticString = #fileID, line: UInt = #line) {
        chain._handleStorage.cancel(with: boxedCancellation, at: CancelSite(file: file, line: line))
    }

    /// ``cancel(file:line:)`` without a call site: the `Cancellable` requirement.
    @_disfavoredOverload
    public func cancel() { chain._handleStorage.cancel(with: boxedCancellation, at: .library) }

    /// Cancels the chain with `error`.
    public func cancel(with error: Error, file: StaticString = #fileID, line: UInt = #line) {
        chain._handleStorage.cancel(with: error, at: CancelSite(file: file, line: line))
    }

    /// ``cancel(with:file:line:)`` without a call site, for code that names the method
    /// exactly (a protocol requirement, a function reference).
    @_disfavoredOverload
    public func cancel(with error: Error) {
        chain._handleStorage.cancel(with: error, at: .library)
    }

    /// `true` once the chain was cancelled.
    public var isCancelled: Bool { chain._handleStorage.cancelledError != nil }

    /// The same as `isCancelled` (PromiseKit 7's name).
    public var cancelAttempted: Bool { isCancelled }

    /// Runs `body` on `on` once the chain and its `catch` are done,
    /// cancelled or not. Returns the chain's context.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    public func finally(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable () -> Void
    ) -> CancelContext {
        finally(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` on `on` once the chain and its `catch` are done,
    /// cancelled or not. Returns the chain's context.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    public func finally(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable () -> Void
    ) -> CancelContext {
        // `PMKFinalizer.finally`'s step: an observer that always hops to `on`, a member of the
        // chain (its body sees its own `CancellationToken.current`).
        _ = end.observer { member in
            end.promise._makeGeneralStep(
                on: on, flags: flags, hop: .always, isObserver: true, attachment: member.storage, key: member.key.slot
            ) { _ in
                body()
                return .result(.fulfilled(()))
            }
        }
        return cancelContext
    }
}

extension CatchPolicy {
    /// Whether `catch` and `recover` with this policy handle `error`, as for a plain promise:
    /// every error, except a cancellation (`isCancelled`) under `.allErrorsExceptCancellation`.
    @inlinable @inline(__always) func catches(_ error: any Error) -> Bool {
        self == .allErrors || !error.isCancelled
    }
}
