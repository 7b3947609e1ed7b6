import Dispatch
import PromiseCore

// Chain operators of `CancellablePromise`. Each returns a `CancellablePromise` in the same
// `CancelContext`, built on the matching `Promise` operator of the wrapped promise; the new
// promise is a member of the context, so cancelling the chain rejects it, and a step body that
// has not started by then never runs. Queues: as the `Promise` operators (`on:` defaults to
// `conf.Q.map` or `conf.Q.return`; `on: nil` runs synchronously on the settling thread).

extension CancellablePromise {
    /// Wraps a step of this chain.
    @inlinable
    func chained<U>(_ step: Promise<U>) -> CancellablePromise<U> {
        CancellablePromise<U>(member: step, context: cancelContext, cancel: nil)
    }

    /// Wraps a step whose body must not run once the chain is cancelled (`then`, `map`,
    /// `compactMap`, `done`, `get`, `recover`). On a chain cancelled already, `make` is not
    /// called and the step is rejected with the cancellation error: with `on: nil` the body
    /// would otherwise run at once, before the step joins the context.
    @inlinable
    func step<U>(_ make: () -> Promise<U>) -> CancellablePromise<U> {
        if let error = cancelContext.cancelledError { return chained(Promise(error: error)) }
        return chained(make())
    }

    /// Makes a promise returned by a step body part of this chain: a `CancellablePromise`'s
    /// chain joins this one; a plain promise whose producer attached its task gets that task
    /// cancelled with the chain.
    func adopt<U>(_ thenable: U) where U: Thenable {
        if let cancellable = thenable as? CancellablePromise<U.T> {
            cancelContext.join(cancellable.cancelContext)
        } else if !(thenable is Guarantee<U.T>) {
            let promise = thenable.asPromise()
            if let task = promise.attachedCancellation {
                _ = CancellablePromise<U.T>(member: promise, context: cancelContext, cancel: task.cancel)
            }
        }
    }

    /// Runs `body` with the value, on `on`, and follows the `CancellablePromise` it returns,
    /// whose chain joins this one: cancelling either cancels both.
    ///
    /// ```swift
    /// let chain = login().then { creds in fetch(avatar: creds.user) }   // both cancellable
    /// chain.cancel()   // cancels login or fetch, whichever is running
    /// ```
    public func then<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> CancellablePromise<U>
    ) -> CancellablePromise<U> {
        step {
            promise.then(on: on, flags: flags) { value -> CancellablePromise<U> in
                let next = try body(value)
                self.adopt(next)
                return next
            }
        }
    }

    /// Runs `body` with the value, on `on`, and follows the thenable it returns. Cancelling the
    /// chain rejects the result at once; the returned promise's work is cancelled too if its
    /// producer attached its task (as PromiseFoundation's do), otherwise it goes on.
    public func then<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> U
    ) -> CancellablePromise<U.T> {
        step {
            promise.then(on: on, flags: flags) { value -> U in
                let next = try body(value)
                self.adopt(next)
                return next
            }
        }
    }

    /// Transforms the value on `on`; not run once the chain is cancelled.
    @inlinable public func map<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T) throws -> U
    ) -> CancellablePromise<U> {
        step { promise.map(on: on, flags: flags, transform) }
    }

    /// Like `map`; `nil` rejects with `PMKError.compactMap`.
    public func compactMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T) throws -> U?
    ) -> CancellablePromise<U> {
        step { promise.compactMap(on: on, flags: flags, transform) }
    }

    /// Runs `body` with the value on `on` (default `conf.Q.return`); not run once cancelled.
    @inlinable public func done(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> Void
    ) -> CancellablePromise<Void> {
        step { promise.done(on: on, flags: flags, body) }
    }

    /// Runs `body` with the value on `on` and passes it on; not run once cancelled.
    public func get(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> Void
    ) -> CancellablePromise<T> {
        step { promise.get(on: on, flags: flags, body) }
    }

    /// Runs `body` with the result on `on`, whatever it is, cancellation included.
    public func tap(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (Result<T>) -> Void
    ) -> CancellablePromise<T> {
        chained(promise.tap(on: on, flags: flags, body))
    }

    /// Discards the value.
    public func asVoid() -> CancellablePromise<Void> {
        chained(promise.asVoid())
    }

    // MARK: Errors

    /// Handles a rejection; `body` runs on `on` (default `conf.Q.return`). With the default
    /// policy cancellation errors are skipped; `.allErrors` receives them, including the
    /// chain's own cancellation. The finalizer can still cancel the chain.
    @discardableResult
    public func `catch`(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping (Error) -> Void
    ) -> CancellableFinalizer {
        CancellableFinalizer(promise.catch(on: on, flags: flags, policy: policy, body).promise, context: cancelContext)
    }

    /// Recovers from a rejection with the thenable `body` returns (a `CancellablePromise`'s chain
    /// joins this one). Never runs for the chain's own cancellation: a cancelled chain stays
    /// cancelled (unlike PromiseKit 7, where recovering reset it). Other cancellation errors
    /// are recovered only with `policy: .allErrors`.
    public func recover<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping (Error) throws -> U
    ) -> CancellablePromise<T> where U.T == T {
        step {
            promise.recover(on: on, flags: flags, policy: policy) { error -> U in
                let next = try body(error)
                self.adopt(next)
                return next
            }
        }
    }

    /// Recovers from any rejection except the chain's own cancellation with a guarantee.
    public func recover(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (Error) -> Guarantee<T>
    ) -> CancellablePromise<T> {
        recover(on: on, flags: flags, policy: .allErrors) { error -> Guarantee<T> in body(error) }
    }

    /// Runs `body` on `on` once settled, whatever the result, cancellation included.
    public func ensure(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping () -> Void
    ) -> CancellablePromise<T> {
        chained(promise.ensure(on: on, flags: flags, body))
    }

    /// Like `ensure`, waiting for the guarantee `body` returns.
    public func ensureThen(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping () -> Guarantee<Void>
    ) -> CancellablePromise<T> {
        chained(promise.ensureThen(on: on, flags: flags, body))
    }

    /// Like `ensure`, waiting for the cancellable promise `body` returns (whose chain joins this
    /// one); its rejection is ignored.
    public func ensureThen(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping () -> CancellablePromise<Void>
    ) -> CancellablePromise<T> {
        chained(
            promise.ensureThen(on: on, flags: flags) {
                let next = body()
                self.adopt(next)
                return Guarantee(
                    promise: next.promise.step(on: nil, flags: nil, hop: .never) { _ in .result(.fulfilled(())) })
            })
    }

    /// Ends the chain, logging errors other than cancellation through `conf.logHandler`.
    @discardableResult
    public func cauterize() -> CancellableFinalizer {
        self.catch(on: nil) { conf.logHandler(.cauterized($0)) }
    }
}

extension CancellablePromise where T == Void {
    /// Recovers from any rejection except the chain's own cancellation.
    @discardableResult
    public func recover(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (Error) -> Void
    ) -> CancellablePromise<Void> {
        step {
            promise.recover(on: on, flags: flags, policy: .allErrors) { (error: Error) throws -> Void in body(error) }
        }
    }

    /// Recovers from a rejection with a throwing body.
    public func recover(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping (Error) throws -> Void
    ) -> CancellablePromise<Void> {
        step { promise.recover(on: on, flags: flags, policy: policy, body) }
    }
}

extension Thenable {
    /// Continues a plain chain with a cancellable step (PromiseKit 7's "convert a standard chain
    /// to a cancellable chain"): the result is a `CancellablePromise`, so the chain is
    /// cancellable from here on. `body` runs on `on` with the value and its promise's chain joins
    /// the result's. Cancelling rejects the result at once and cancels the promise `body`
    /// returned; if `body` has not started it never runs, and this thenable's own work goes on.
    ///
    /// ```swift
    /// let finalizer = firstly { login() }.then { creds in
    ///     fetch(avatar: creds.user).cancellize()
    /// }.done { image in … }.catch(policy: .allErrors) { … }
    /// finalizer.cancel()
    /// ```
    public func then<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> CancellablePromise<U>
    ) -> CancellablePromise<U> {
        CancellablePromise(self).then(on: on, flags: flags, body)
    }
}

/// The end of a cancellable chain, returned by `catch`: it can still cancel the chain.
public final class CancellableFinalizer: @unchecked Sendable {
    private let promise: Promise<Void>

    /// The chain's context.
    public let cancelContext: CancelContext

    init(_ promise: Promise<Void>, context: CancelContext) {
        self.promise = promise
        self.cancelContext = context
    }

    /// Cancels the chain.
    public func cancel() { cancelContext.cancel() }

    /// Cancels the chain with `error`.
    public func cancel(with error: Error) { cancelContext.cancel(with: error) }

    /// `true` once the chain was cancelled.
    public var isCancelled: Bool { cancelContext.isCancelled }

    /// The same as `isCancelled` (PromiseKit 7's name).
    public var cancelAttempted: Bool { cancelContext.isCancelled }

    /// Runs `body` on `on` (default `conf.Q.return`) once the chain and its `catch` are done,
    /// cancelled or not. Returns the chain's context.
    @discardableResult
    public func finally(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping () -> Void
    ) -> CancelContext {
        PMKFinalizer(promise).finally(on: on, flags: flags, body)
        return cancelContext
    }
}

// MARK: - Sequences

extension CancellablePromise where T: Sequence {
    /// Maps every element.
    public func mapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U]> {
        chained(promise.mapValues(on: on, flags: flags, transform))
    }

    /// Maps every element to a sequence and flattens.
    public func flatMapValues<U: Sequence>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.Iterator.Element]> {
        chained(promise.flatMapValues(on: on, flags: flags, transform))
    }

    /// Maps every element, dropping `nil`s.
    public func compactMapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U?
    ) -> CancellablePromise<[U]> {
        chained(promise.compactMapValues(on: on, flags: flags, transform))
    }

    /// Maps every element to a cancellable promise and waits for all; their chains join this
    /// one, so cancelling it cancels them.
    public func thenMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U]> {
        then(on: on, flags: flags) { values -> CancellablePromise<[U]> in
            let promises = try values.map(transform)
            for promise in promises { self.adopt(promise) }
            return self.chained(when(fulfilled: promises.map { $0.promise }))
        }
    }

    /// Maps every element to a thenable and waits for all.
    public func thenMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T]> {
        then(on: on, flags: flags) { values -> Promise<[U.T]> in
            let thenables = try values.map(transform)
            for thenable in thenables { self.adopt(thenable) }
            return when(fulfilled: thenables)
        }
    }

    /// Maps every element to a cancellable promise of a sequence, waits for all and flattens.
    public func thenFlatMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U.Iterator.Element]> where U: Sequence {
        thenMap(on: on, flags: flags, transform).map(on: nil) { $0.flatMap { $0 } }
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens.
    public func thenFlatMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T.Iterator.Element]> where U.T: Sequence {
        thenMap(on: on, flags: flags, transform).map(on: nil) { $0.flatMap { $0 } }
    }

    /// Keeps the elements for which `isIncluded` returns `true`.
    public func filterValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ isIncluded: @escaping (T.Iterator.Element) -> Bool
    ) -> CancellablePromise<[T.Iterator.Element]> {
        chained(promise.filterValues(on: on, flags: flags, isIncluded))
    }
}

extension CancellablePromise where T: Collection {
    /// The first element; rejects with `PMKError.emptySequence` if there is none.
    public var firstValue: CancellablePromise<T.Iterator.Element> {
        chained(promise.firstValue)
    }

    /// The first element passing `test`.
    public func firstValue(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping (T.Iterator.Element) -> Bool
    ) -> CancellablePromise<T.Iterator.Element> {
        chained(promise.firstValue(on: on, flags: flags, where: test))
    }

    /// The last element; rejects with `PMKError.emptySequence` if there is none.
    public var lastValue: CancellablePromise<T.Iterator.Element> {
        chained(promise.lastValue)
    }
}

extension CancellablePromise where T: Sequence, T.Iterator.Element: Comparable {
    /// The elements, sorted.
    public func sortedValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil
    ) -> CancellablePromise<[T.Iterator.Element]> {
        chained(promise.sortedValues(on: on, flags: flags))
    }
}
