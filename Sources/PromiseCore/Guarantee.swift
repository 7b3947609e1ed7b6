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
    @inlinable public func pipe(to: @escaping (Result<T>) -> Void) {
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

    /// Runs `body` with the value on `on` (default `conf.Q.return`).
    @discardableResult
    @inlinable public func done(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) -> Void
    ) -> Guarantee<Void> {
        Guarantee<Void>(promise: promise.done(on: on, flags: flags, body))
    }

    /// Runs `body` with the value on `on` and passes the value on.
    @inlinable public func get(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) -> Void
    ) -> Guarantee<T> {
        Guarantee(promise: promise.get(on: on, flags: flags, body))
    }

    /// Transforms the value on `on`.
    @inlinable public func map<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) -> U
    ) -> Guarantee<U> {
        Guarantee<U>(promise: promise.map(on: on, flags: flags, body))
    }

    /// Runs `body` on `on` and settles as the guarantee it returns.
    @discardableResult
    @inlinable public func then<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) -> Guarantee<U>
    ) -> Guarantee<U> {
        Guarantee<U>(promise: promise.then(on: on, flags: flags, body))
    }

    /// Discards the value.
    @inlinable public func asVoid() -> Guarantee<Void> {
        map(on: nil) { _ in () }
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
    @inlinable public func mapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) -> U
    ) -> Guarantee<[U]> {
        map(on: on, flags: flags) { $0.map(transform) }
    }

    /// Maps every element to a sequence and flattens.
    @inlinable public func flatMapValues<U: Sequence>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) -> U
    ) -> Guarantee<[U.Iterator.Element]> {
        map(on: on, flags: flags) { $0.flatMap(transform) }
    }

    /// Maps every element, dropping `nil`s.
    @inlinable public func compactMapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) -> U?
    ) -> Guarantee<[U]> {
        map(on: on, flags: flags) { $0.compactMap(transform) }
    }

    /// Maps every element to a guarantee and waits for all.
    @inlinable public func thenMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) -> Guarantee<U>
    ) -> Guarantee<[U]> {
        then(on: on, flags: flags) { when(guarantees: $0.map(transform)) }
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens. A guarantee
    /// cannot reject: a rejected input leaves the result pending and is logged as cauterized.
    @inlinable public func thenFlatMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) -> U
    ) -> Guarantee<[U.T.Iterator.Element]> where U.T: Sequence {
        let (guarantee, resolve) = Guarantee<[U.T.Iterator.Element]>.pending()
        _ = promise.then(on: on, flags: flags) { when(fulfilled: $0.map(transform)) }
            .done(on: nil) { resolve($0.flatMap { $0 }) }
            .cauterize()
        return guarantee
    }

    /// Keeps the elements for which `isIncluded` returns `true`.
    @inlinable public func filterValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ isIncluded: @escaping (T.Iterator.Element) -> Bool
    ) -> Guarantee<[T.Iterator.Element]> {
        map(on: on, flags: flags) { $0.filter(isIncluded) }
    }

    /// The elements sorted by `areInIncreasingOrder`.
    @inlinable public func sortedValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ areInIncreasingOrder: @escaping (T.Iterator.Element, T.Iterator.Element) -> Bool
    ) -> Guarantee<[T.Iterator.Element]> {
        map(on: on, flags: flags) { $0.sorted(by: areInIncreasingOrder) }
    }
}

extension Guarantee where T: Sequence, T.Iterator.Element: Comparable {
    /// The elements, sorted.
    @inlinable public func sortedValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil
    ) -> Guarantee<[T.Iterator.Element]> {
        map(on: on, flags: flags) { $0.sorted() }
    }
}
