import Dispatch
import Foundation
import PromiseCore

// Spellings of PromiseKit 7's cancellation and of its PromiseKit 6 add-on (CancelForPromiseKit)
// where this package's name differs. Each forwards to the operation named in its attribute,
// so code written for them compiles, with a fix-it; the migration article lists them all
// ("PromiseKit 7 / CancelForPromiseKit → here"). Queues and cancellation: as the operation
// each one forwards to.

// MARK: - Types

/// CancelForPromiseKit's name for ``Cancellable``.
@available(*, deprecated, renamed: "Cancellable")
public typealias CancellableTask = Cancellable

/// PromiseKit 7's bookkeeping of a chain's tasks; here a chain's tasks and promises are tracked
/// by its ``CancelContext``.
@available(*, deprecated, renamed: "CancelContext")
public typealias CancelItemList = CancelContext

// MARK: - Creating

extension CancellablePromise {
    /// CancelForPromiseKit's spelling of ``init(cancellable:resolver:)``.
    @available(*, deprecated, renamed: "init(cancellable:resolver:)")
    public convenience init(task: (any Cancellable)?, resolver body: (Resolver<T>) throws -> Void) {
        self.init(cancellable: task, resolver: body)
    }

    /// CancelForPromiseKit's spelling of ``init(cancellable:promise:resolver:)``.
    @available(*, deprecated, renamed: "init(cancellable:promise:resolver:)")
    public convenience init(task: (any Cancellable)?, promise: Promise<T>, resolver: Resolver<T>) {
        self.init(cancellable: task, promise: promise, resolver: resolver)
    }

    /// CancelForPromiseKit's spelling of ``init(cancellable:error:)``.
    @available(*, deprecated, renamed: "init(cancellable:error:)")
    public convenience init(task: (any Cancellable)?, error: Error) {
        self.init(cancellable: task, error: error)
    }
}

extension CancellablePromise where T == Void {
    /// CancelForPromiseKit's spelling of ``init(cancellable:)``.
    @available(*, deprecated, renamed: "init(cancellable:)")
    public convenience init(task: any Cancellable) {
        self.init(cancellable: task)
    }
}

extension Thenable {
    /// The PromiseKit 7 guide's spelling of ``cancellize(cancelContext:)``: starts a
    /// cancellable chain from this thenable in `cancelContext`.
    @available(*, deprecated, renamed: "cancellize(cancelContext:)")
    public func cancellize(_ cancelContext: CancelContext) -> CancellablePromise<T> {
        cancellize(cancelContext: cancelContext)
    }
}

/// A global spelling of `thenable.cancellize(cancelContext:)` found in PromiseKit 7's
/// cancellation code before it became a method; the same as ``cancellable(_:cancelContext:)``.
@available(*, deprecated, renamed: "cancellable(_:cancelContext:)")
public func cancellize<U: Thenable>(_ thenable: U, cancelContext: CancelContext? = nil) -> CancellablePromise<U.T> {
    thenable.cancellize(cancelContext: cancelContext)
}

extension Promise {
    /// CancelForPromiseKit's spelling of ``init(cancellable:resolver:)``.
    @available(*, deprecated, renamed: "init(cancellable:resolver:)")
    public convenience init(cancellableTask: any Cancellable, resolver body: (Resolver<T>) throws -> Void) {
        self.init(cancellable: cancellableTask, resolver: body)
    }

    /// CancelForPromiseKit's spelling of ``setCancellable(_:reject:)``.
    @available(*, deprecated, renamed: "setCancellable(_:reject:)")
    @preconcurrency public func setCancellableTask(
        _ task: (any Cancellable)?, reject: (@Sendable (Error) -> Void)? = nil
    ) {
        setCancellable(task, reject: reject)
    }
}

extension Guarantee {
    /// CancelForPromiseKit's spelling of ``init(cancellable:resolver:)``.
    @available(*, deprecated, renamed: "init(cancellable:resolver:)")
    public convenience init(
        cancellableTask: any Cancellable, resolver body: (@escaping @Sendable (T) -> Void) -> Void
    ) {
        self.init(cancellable: cancellableTask, resolver: body)
    }

    /// CancelForPromiseKit's spelling of ``setCancellable(_:)``.
    @available(*, deprecated, renamed: "setCancellable(_:)")
    @preconcurrency public func setCancellableTask(_ task: (any Cancellable)?) {
        setCancellable(task)
    }
}

/// CancelForPromiseKit's cancellable timer: `after(seconds:scheduler:).cancellize()`, fulfilled
/// where `scheduler` runs its work (a global queue by default); cancelling stops the timer and
/// rejects the promise.
@available(*, deprecated, message: "use after(seconds:).cancellize()")
public func cancellableAfter(
    seconds: TimeInterval, scheduler: any PromiseScheduler = DispatchScheduler.global
) -> CancellablePromise<Void> {
    after(seconds: seconds, scheduler: scheduler).cancellize()
}

/// CancelForPromiseKit's cancellable timer: `after(_:scheduler:).cancellize()` (cancelling
/// stops the timer and rejects the promise).
@available(*, deprecated, message: "use after(_:).cancellize()")
public func cancellableAfter(
    _ interval: DispatchTimeInterval, scheduler: any PromiseScheduler = DispatchScheduler.global
) -> CancellablePromise<Void> {
    after(interval, scheduler: scheduler).cancellize()
}

// MARK: - The delegate promise and the cancel bookkeeping

extension CancellablePromise {
    /// PromiseKit 7's name for the delegate promise, ``promise``.
    @available(*, deprecated, renamed: "promise")
    public var thenable: Promise<T> { promise }

    /// PromiseKit 7's name for the delegate promise that `catch` and `recover` act on,
    /// ``promise``.
    @available(*, deprecated, renamed: "promise")
    public var catchable: Promise<T> { promise }

    /// PromiseKit 7's bookkeeping of the chain's tasks: the chain's ``cancelContext``.
    @available(*, deprecated, renamed: "cancelContext")
    public var cancelItemList: CancelContext { cancelContext }

    /// The PromiseKit 7 guide's spelling of ``cancel(with:)``; `nil` cancels with
    /// `CancellablePromiseError.cancelled`, as ``cancel()`` does.
    @available(*, deprecated, renamed: "cancel(with:)")
    public func cancel(error: Error?) {
        if let error { cancel(with: error) } else { cancel() }
    }

    /// The PromiseKit 7 guide's spelling of ``appendCancellable(_:reject:)``.
    @available(*, deprecated, renamed: "appendCancellable(_:reject:)")
    @preconcurrency public func appendCancellable(cancellable: (any Cancellable)?, reject: (@Sendable (Error) -> Void)?)
    {
        appendCancellable(cancellable, reject: reject)
    }

    /// CancelForPromiseKit's spelling of ``appendCancellable(_:reject:)``.
    @available(*, deprecated, renamed: "appendCancellable(_:reject:)")
    @preconcurrency public func appendCancellableTask(
        _ task: (any Cancellable)?, reject: (@Sendable (Error) -> Void)? = nil
    ) {
        appendCancellable(task, reject: reject)
    }
}

extension CancellableFinalizer {
    /// The PromiseKit 7 guide's spelling of ``cancel(with:)``; `nil` cancels with
    /// `CancellablePromiseError.cancelled`.
    @available(*, deprecated, renamed: "cancel(with:)")
    public func cancel(error: Error?) {
        if let error { cancel(with: error) } else { cancel() }
    }
}

extension CancelContext {
    /// CancelForPromiseKit's spelling of ``cancel(with:)``; `nil` cancels with
    /// `CancellablePromiseError.cancelled`.
    @available(*, deprecated, renamed: "cancel(with:)")
    public func cancel(error: Error?) {
        if let error { cancel(with: error) } else { cancel() }
    }
}

// MARK: - Chain operators taking bodies that return any thenable

extension CancellablePromise {
    /// PromiseKit 7's name for `then` with a body returning a plain thenable: here `then`
    /// accepts it. `body` runs on `on` and never starts once the chain
    /// is cancelled; the thenable's attached task, if any, is cancelled with the chain.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @available(*, deprecated, renamed: "then(on:flags:_:)")
    public func cancellableThen<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> U
    ) -> CancellablePromise<U.T> {
        cancellableThen(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// PromiseKit 7's name for `then` with a body returning a plain thenable: here `then`
    /// accepts it. `body` runs on `on` and never starts once the chain
    /// is cancelled; the thenable's attached task, if any, is cancelled with the chain.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @available(*, deprecated, renamed: "then(on:flags:_:)")
    public func cancellableThen<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> U
    ) -> CancellablePromise<U.T> {
        then(on: on, flags: flags, body)
    }

    /// PromiseKit 7's name for `recover` with a body returning a plain thenable: here
    /// `recover` accepts it. `body` runs on `on` and never runs for the
    /// chain's own cancellation.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @available(*, deprecated, renamed: "recover(on:flags:policy:_:)")
    public func cancellableRecover<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @MainActor @Sendable (Error) throws -> U
    ) -> CancellablePromise<T> where U.T == T {
        cancellableRecover(on: on.queue, flags: flags, policy: policy, _mainActorBody(body))
    }

    /// PromiseKit 7's name for `recover` with a body returning a plain thenable: here
    /// `recover` accepts it. `body` runs on `on` and never runs for the
    /// chain's own cancellation.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @available(*, deprecated, renamed: "recover(on:flags:policy:_:)")
    public func cancellableRecover<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        policy: CatchPolicy = conf.catchPolicy,
        _ body: @escaping @Sendable (Error) throws -> U
    ) -> CancellablePromise<T> where U.T == T {
        recover(on: on, flags: flags, policy: policy, body)
    }
}

extension CancellablePromise where T: Sequence {
    /// PromiseKit 7's name for `thenMap` with a transform returning a plain thenable.
    /// `transform` runs on `on`, not once the chain is cancelled.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @available(*, deprecated, renamed: "thenMap(on:flags:_:)")
    public func cancellableThenMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T]> {
        cancellableThenMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// PromiseKit 7's name for `thenMap` with a transform returning a plain thenable.
    /// `transform` runs on `on`, not once the chain is cancelled.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @available(*, deprecated, renamed: "thenMap(on:flags:_:)")
    public func cancellableThenMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T]> {
        thenMap(on: on, flags: flags, transform)
    }

    /// PromiseKit 7's name for `thenFlatMap` with a transform returning a plain thenable.
    /// `transform` runs on `on`, not once the chain is cancelled.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @available(*, deprecated, renamed: "thenFlatMap(on:flags:_:)")
    public func cancellableThenFlatMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T.Iterator.Element]> where U.T: Sequence {
        cancellableThenFlatMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// PromiseKit 7's name for `thenFlatMap` with a transform returning a plain thenable.
    /// `transform` runs on `on`, not once the chain is cancelled.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @available(*, deprecated, renamed: "thenFlatMap(on:flags:_:)")
    public func cancellableThenFlatMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T.Iterator.Element]> where U.T: Sequence {
        thenFlatMap(on: on, flags: flags, transform)
    }
}

// MARK: - Combinators

/// PromiseKit 7's name for the two-input `when(fulfilled:_:)` of cancellable promises.
/// Settles on the thread that settles the last (or the rejecting) input; cancelling the
/// result rejects it and leaves the inputs alone, as `when` without `autoCancel` does. The
/// three- to five-input forms below behave the same.
@available(*, deprecated, renamed: "when(fulfilled:_:)")
public func cancellableWhen<U, V>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>
) -> CancellablePromise<(U, V)> {
    when(fulfilled: pu, pv)
}

/// PromiseKit 7's name for the three-input `when(fulfilled:_:_:)` of cancellable promises.
@available(*, deprecated, renamed: "when(fulfilled:_:_:)")
public func cancellableWhen<U, V, W>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>
) -> CancellablePromise<(U, V, W)> {
    when(fulfilled: pu, pv, pw)
}

/// PromiseKit 7's name for the four-input `when(fulfilled:_:_:_:)` of cancellable promises.
@available(*, deprecated, renamed: "when(fulfilled:_:_:_:)")
public func cancellableWhen<U, V, W, X>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>
) -> CancellablePromise<(U, V, W, X)> {
    when(fulfilled: pu, pv, pw, px)
}

/// PromiseKit 7's name for the five-input `when(fulfilled:_:_:_:_:)` of cancellable promises.
@available(*, deprecated, renamed: "when(fulfilled:_:_:_:_:)")
public func cancellableWhen<U, V, W, X, Y>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, _ py: CancellablePromise<Y>
) -> CancellablePromise<(U, V, W, X, Y)> {
    when(fulfilled: pu, pv, pw, px, py)
}

/// The array `when(fulfilled:)` of cancellable promises under a `cancellable` prefix.
@available(*, deprecated, renamed: "when(fulfilled:)")
public func cancellableWhen<T>(fulfilled promises: [CancellablePromise<T>]) -> CancellablePromise<[T]> {
    when(fulfilled: promises)
}

/// `race` of cancellable promises under a `cancellable` prefix: settles as the first input
/// settles, on its thread; cancelling the result leaves the inputs alone.
@available(*, deprecated, renamed: "race(_:)")
public func cancellableRace<T>(_ promises: CancellablePromise<T>...) -> CancellablePromise<T> {
    race(promises)
}

/// `race` of an array of cancellable promises under a `cancellable` prefix.
@available(*, deprecated, renamed: "race(_:)")
public func cancellableRace<T>(_ promises: [CancellablePromise<T>]) -> CancellablePromise<T> {
    race(promises)
}

// MARK: - Timeouts

extension PMKError {
    /// PromiseKit 7's timeout error. A timeout here rejects with ``PromiseTimeoutError``,
    /// which is not a cancellation (`isCancelled` is `false`, so a default `catch` sees it).
    ///
    /// As a pattern — `catch PMKError.timedOut`, `case PMKError.timedOut` — it matches every
    /// ``PromiseTimeoutError``, whatever its duration. As a value it is a
    /// `PromiseTimeoutError` of no particular duration (`seconds` is NaN).
    @available(
        *, deprecated, message: "timeouts reject with PromiseTimeoutError; match it with `catch is PromiseTimeoutError`"
    )
    public static var timedOut: PromiseTimeoutError { PromiseTimeoutError(seconds: .nan) }
}

/// Matches `value` if it is a ``PromiseTimeoutError`` of `pattern`'s duration, or of any
/// duration when `pattern` has none (`PMKError.timedOut`), so `catch PMKError.timedOut`
/// compiles and matches as in PromiseKit 7.
public func ~= (pattern: PromiseTimeoutError, value: any Error) -> Bool {
    guard let timeout = value as? PromiseTimeoutError else { return false }
    return pattern.seconds.isNaN || pattern.seconds == timeout.seconds
}

/// PromiseKit 7's stand-alone timer that rejects: a promise rejected with
/// ``PromiseTimeoutError`` after `seconds` of `scheduler`'s time (the wall clock and a global
/// queue by default); it never fulfils.
///
/// PromiseKit 7 code races it against work, `race(work, timeout(seconds: 5))`; here
/// `work.timeout(seconds: 5)` does that with the work's type, and on a cancellable chain it also
/// cancels the work. The timer is attached to the promise: `timeout(seconds:).cancellize()`
/// stops it when cancelled (and rejects with the cancellation error instead).
@available(*, deprecated, message: "use promise.timeout(seconds:), which keeps the promise's type and cancels its task")
public func timeout(
    seconds: TimeInterval, scheduler: any PromiseScheduler = DispatchScheduler.global
) -> Promise<Void> {
    let (promise, resolver) = Promise<Void>.pending()
    let timer = scheduler.scheduleTimer(seconds: seconds) {
        resolver.reject(PromiseTimeoutError(seconds: seconds))
    }
    promise.attachCancellation { timer.cancel() }
    return promise
}
