import Dispatch

/// A promise that cannot reject, as PromiseKit's `Guarantee`.
///
/// Its handlers run on the queue given as `on:` (defaults as for `Promise`); `on: nil` runs them
/// synchronously on the resolving thread. A guarantee cannot be cancelled: a cancellable wrapper
/// (`asCancellable()`) rejects itself while the guarantee stays pending.
public final class Guarantee<T>: Thenable, Sendable {
    /// The promise holding the state; never rejected.
    @usableFromInline let promise: Promise<T>

    @usableFromInline package init(promise: Promise<T>) {
        self.promise = promise
    }

    /// Returns a resolved guarantee.
    @inlinable public static func value(_ value: T) -> Guarantee<T> {
        Guarantee(promise: .value(value))
    }

    /// Creates a pending guarantee and calls `body`, at once, with the function that resolves it.
    /// The function may be called from any thread; handlers run as their `on:` says.
    public convenience init(resolver body: (@escaping @Sendable (T) -> Void) -> Void) {
        let (guarantee, resolve) = Guarantee.pending()
        self.init(promise: guarantee.promise)
        body(resolve)
    }

    /// Returns a pending guarantee and the function that resolves it (first call wins). The
    /// function may be called from any thread; handlers run as their `on:` says.
    public static func pending() -> (guarantee: Guarantee<T>, resolve: @Sendable (T) -> Void) {
        let promise = Promise<T>(pending: ())
        let sealer = GuaranteeSealer(promise)
        return (Guarantee(promise: promise), { sealer.promise.resolve(.fulfilled($0)) })
    }

    /// Calls `to` once with the result (always `.fulfilled`).
    @preconcurrency @inlinable public func pipe(to: @escaping @Sendable (Result<T>) -> Void) {
        promise.pipe(to: to)
    }

    /// The result, or `nil` while pending.
    @inlinable public var result: Result<T>? { promise.result }

    /// The underlying promise (never rejected).
    @inlinable public func asPromise() -> Promise<T> { promise }

    /// Blocks until resolved and returns the value. Every call made on the main thread logs
    /// `LogEvent.waitOnMainThread` first, even when the guarantee has already resolved. Never
    /// call it on a queue the guarantee needs.
    public func wait() -> T {
        switch promise.waitForResult() {
        case .fulfilled(let value): return value
        case .rejected: preconditionFailure("a Guarantee cannot reject")
        }
    }

    /// Runs `body` with the value on `on`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    @inlinable public func done(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) -> Void
    ) -> Guarantee<Void> {
        done(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the value on `on`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    @inlinable public func done(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) -> Void
    ) -> Guarantee<Void> {
        Guarantee<Void>(promise: promise.done(on: on, flags: flags, body))
    }

    /// Runs `body` with the value on `on` and passes the value on.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func get(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) -> Void
    ) -> Guarantee<T> {
        get(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the value on `on` and passes the value on.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func get(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) -> Void
    ) -> Guarantee<T> {
        Guarantee(promise: promise.get(on: on, flags: flags, body))
    }

    /// Transforms the value on `on`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func map<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) -> U
    ) -> Guarantee<U> {
        map(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Transforms the value on `on`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func map<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) -> U
    ) -> Guarantee<U> {
        Guarantee<U>(promise: promise.map(on: on, flags: flags, body))
    }

    /// Runs `body` on `on` and settles as the guarantee it returns.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @discardableResult
    @inlinable public func then<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) -> Guarantee<U>
    ) -> Guarantee<U> {
        then(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` on `on` and settles as the guarantee it returns.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @discardableResult
    @inlinable public func then<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) -> Guarantee<U>
    ) -> Guarantee<U> {
        Guarantee<U>(promise: promise.then(on: on, flags: flags, body))
    }

    /// `map` for the library's own bodies, built from a body of the caller's: the caller's type
    /// says where that body runs.
    @inlinable package func _mapGuarantee<U>(
        on: DispatchQueue?, flags: DispatchWorkItemFlags?, _ body: @escaping (T) -> U
    ) -> Guarantee<U> {
        Guarantee<U>(promise: promise._map(on: on, flags: flags, body))
    }

    /// Discards the value.
    @inlinable public func asVoid() -> Guarantee<Void> {
        _mapGuarantee(on: nil, flags: nil) { _ in () }
    }
}

/// Logs when a guarantee's resolve function is released while the guarantee is pending.
private final class GuaranteeSealer<T>: Sendable {
    let promise: Promise<T>
    init(_ promise: Promise<T>) { self.promise = promise }
    deinit {
        if promise.isPending { conf.logHandler(.pendingGuaranteeDeallocated) }
    }
}

extension Guarantee where T == Void {
    /// Creates a resolved `Guarantee<Void>`.
    public convenience init() {
        self.init(promise: Promise())
    }

    /// A resolved `Guarantee<Void>`.
    @inlinable public static var value: Guarantee<Void> { Guarantee() }
}

extension Guarantee: CustomStringConvertible, CustomDebugStringConvertible {
    /// `Guarantee(…T)` while pending, otherwise `Guarantee(value)`.
    public var description: String {
        switch result {
        case .fulfilled(let value)?: return "Guarantee(\(value))"
        case .rejected(let error)?: return "Guarantee(\(error))"
        case nil: return "Guarantee(…\(T.self))"
        }
    }

    /// The state spelled out as for `Promise`: `Guarantee<Int>.pending(handlers: 1)` with the
    /// number of handlers waiting, or `Guarantee<Int>.fulfilled(3)`.
    public var debugDescription: String {
        if let count = promise.waitingHandlerCount {
            return "Guarantee<\(T.self)>.pending(handlers: \(count))"
        }
        // Settled: taking the lock to count the handlers ordered this read after the outcome.
        switch promise.settledResult {
        case .fulfilled(let value): return "Guarantee<\(T.self)>.fulfilled(\(value))"
        case .rejected(let error): return "Guarantee<\(T.self)>.rejected(\(type(of: error)).\(error))"
        }
    }
}

extension Guarantee where T: Sequence {
    /// Maps every element.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func mapValues<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) -> U
    ) -> Guarantee<[U]> {
        mapValues(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func mapValues<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) -> U
    ) -> Guarantee<[U]> {
        _mapGuarantee(on: on, flags: flags) { $0.map(transform) }
    }

    /// Maps every element to a sequence and flattens.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func flatMapValues<U: Sequence>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) -> U
    ) -> Guarantee<[U.Iterator.Element]> {
        flatMapValues(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a sequence and flattens.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func flatMapValues<U: Sequence>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) -> U
    ) -> Guarantee<[U.Iterator.Element]> {
        _mapGuarantee(on: on, flags: flags) { $0.flatMap(transform) }
    }

    /// Maps every element, dropping `nil`s.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func compactMapValues<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) -> U?
    ) -> Guarantee<[U]> {
        compactMapValues(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element, dropping `nil`s.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func compactMapValues<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) -> U?
    ) -> Guarantee<[U]> {
        _mapGuarantee(on: on, flags: flags) { $0.compactMap(transform) }
    }

    /// Maps every element to a guarantee and waits for all.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenMap<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) -> Guarantee<U>
    ) -> Guarantee<[U]> {
        thenMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a guarantee and waits for all.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenMap<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) -> Guarantee<U>
    ) -> Guarantee<[U]> {
        Guarantee<[U]>(promise: promise._then(on: on, flags: flags) { when(guarantees: $0.map(transform)) })
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens. A guarantee
    /// cannot reject: a rejected input leaves the result pending and is logged as cauterized.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenFlatMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) -> U
    ) -> Guarantee<[U.T.Iterator.Element]> where U.T: Sequence {
        thenFlatMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens. A guarantee
    /// cannot reject: a rejected input leaves the result pending and is logged as cauterized.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenFlatMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) -> U
    ) -> Guarantee<[U.T.Iterator.Element]> where U.T: Sequence {
        let (guarantee, resolve) = Guarantee<[U.T.Iterator.Element]>.pending()
        _ = promise._then(on: on, flags: flags) { when(fulfilled: $0.map(transform)) }
            ._map(on: nil, flags: nil) { resolve($0.flatMap { $0 }) }
            .cauterize()
        return guarantee
    }

    /// Keeps the elements for which `isIncluded` returns `true`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func filterValues(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ isIncluded: @escaping @MainActor @Sendable (T.Iterator.Element) -> Bool
    ) -> Guarantee<[T.Iterator.Element]> {
        filterValues(on: on.queue, flags: flags, _mainActorBody(isIncluded))
    }

    /// Keeps the elements for which `isIncluded` returns `true`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func filterValues(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ isIncluded: @escaping @Sendable (T.Iterator.Element) -> Bool
    ) -> Guarantee<[T.Iterator.Element]> {
        _mapGuarantee(on: on, flags: flags) { $0.filter(isIncluded) }
    }

    /// The elements sorted by `areInIncreasingOrder`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func sortedValues(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ areInIncreasingOrder: @escaping @MainActor @Sendable (T.Iterator.Element, T.Iterator.Element) -> Bool
    ) -> Guarantee<[T.Iterator.Element]> {
        sortedValues(on: on.queue, flags: flags, _mainActorBody(areInIncreasingOrder))
    }

    /// The elements sorted by `areInIncreasingOrder`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func sortedValues(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ areInIncreasingOrder: @escaping @Sendable (T.Iterator.Element, T.Iterator.Element) -> Bool
    ) -> Guarantee<[T.Iterator.Element]> {
        _mapGuarantee(on: on, flags: flags) { $0.sorted(by: areInIncreasingOrder) }
    }
}

extension Guarantee where T: Sequence, T.Iterator.Element: Comparable {
    /// The elements, sorted.
    @inlinable public func sortedValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil
    ) -> Guarantee<[T.Iterator.Element]> {
        _mapGuarantee(on: on, flags: flags) { $0.sorted() }
    }
}
