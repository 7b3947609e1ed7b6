import Dispatch

/// Anything that eventually produces a `Result<T>`: `Promise`, `Guarantee`,
/// `CancellablePromise`, or a type of your own.
///
/// Every operator (`then`, `map`, `done`…) is defined on `Thenable`, so it works on all of them.
/// Handlers run on the queue given as `on:`; `on: nil` runs them synchronously on the resolving
/// thread. Operators on a plain `Thenable` return plain (non-cancellable) promises.
public protocol Thenable: AnyObject {
    /// The type of the value.
    associatedtype T

    /// Calls `to` once with the result, synchronously on the thread that settles (or at once).
    func pipe(to: @escaping (Result<T>) -> Void)

    /// The result, or `nil` while pending.
    var result: Result<T>? { get }

    /// A `Promise` that settles as this thenable does. A `Promise` returns itself, a
    /// `CancellablePromise` the promise it wraps.
    func asPromise() -> Promise<T>
}

extension Thenable {
    /// Bridges through `pipe(to:)`: a new promise that settles as this thenable does.
    @inlinable public func asPromise() -> Promise<T> {
        let promise = Promise<T>(pending: ())
        pipe { promise.resolve($0) }
        return promise
    }
}

// MARK: - Operators

extension Thenable {
    /// Runs `body` with the fulfilled value, on `on`, and settles as the promise it returns.
    ///
    /// A rejection skips `body` and passes through. Returning the promise `then` produces
    /// rejects with `PMKError.returnedSelf`.
    ///
    /// ```swift
    /// login().then { creds in fetch(avatar: creds.user) }
    /// ```
    // `then`, `map` and `done` are inlinable: specialized in the caller's module, they take the
    // step's metadata from a static cache instead of looking it up on every link.
    @inlinable public func then<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> U
    ) -> Promise<U.T> {
        let step = ThenStep<T, U>(queue: on, flags: flags, body: body)
        asPromise().addHandlerAndDrain(step)
        return step
    }

    /// Transforms the fulfilled value with `transform`, run on `on`. A throw rejects.
    @inlinable public func map<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T) throws -> U
    ) -> Promise<U> {
        let step = MapStep<T, U>(queue: on, flags: flags, transform: transform)
        asPromise().addHandlerAndDrain(step)
        return step
    }

    /// Like `map`, but a `nil` result rejects with `PMKError.compactMap`.
    @inlinable public func compactMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T) throws -> U?
    ) -> Promise<U> {
        asPromise()._generalStep(on: on, flags: flags, hop: .fulfilled) { result in
            switch result {
            case .rejected(let error): return .result(.rejected(error))
            case .fulfilled(let value):
                guard let mapped = try transform(value) else {
                    throw PMKError.compactMap(value, U.self)
                }
                return .result(.fulfilled(mapped))
            }
        }
    }

    /// Runs `body` with the fulfilled value, on `on` (default `conf.Q.return`); the result is
    /// `Promise<Void>`. A throw rejects.
    @inlinable public func done(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> Void
    ) -> Promise<Void> {
        let step = MapStep<T, Void>(queue: on, flags: flags, transform: body)
        asPromise().addHandlerAndDrain(step)
        return step
    }

    /// Runs `body` with the fulfilled value, on `on`, and passes the value on. A throw rejects.
    @inlinable public func get(
        on: DispatchQueue? = conf.Q.return,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (T) throws -> Void
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .fulfilled) { result in
            if case .fulfilled(let value) = result { try body(value) }
            return .result(result)
        }
    }

    /// Runs `body` with the result, whatever it is, on `on`, and passes the result on.
    @inlinable public func tap(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping (Result<T>) -> Void
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { result in
            body(result)
            return .result(result)
        }
    }

    /// Discards the value: a `Promise<Void>` that settles when this does. No queue hop.
    @inlinable public func asVoid() -> Promise<Void> {
        map(on: nil) { _ in () }
    }
}

// MARK: - State

extension Thenable {
    /// The error, if rejected.
    @inlinable public var error: Error? {
        if case .rejected(let error)? = result { return error }
        return nil
    }

    /// `true` while not settled.
    @inlinable public var isPending: Bool { result == nil }

    /// `true` once settled.
    @inlinable public var isResolved: Bool { result != nil }

    /// `true` if fulfilled.
    @inlinable public var isFulfilled: Bool {
        if case .fulfilled? = result { return true }
        return false
    }

    /// `true` if rejected.
    @inlinable public var isRejected: Bool {
        if case .rejected? = result { return true }
        return false
    }

    /// The value, if fulfilled.
    @inlinable public var value: T? {
        if case .fulfilled(let value)? = result { return value }
        return nil
    }
}

// MARK: - Sequences

extension Thenable where T: Sequence {
    /// Maps every element of the fulfilled sequence.
    @inlinable public func mapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> Promise<[U]> {
        map(on: on, flags: flags) { try $0.map(transform) }
    }

    /// Maps every element to a sequence and flattens.
    @inlinable public func flatMapValues<U: Sequence>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> Promise<[U.Iterator.Element]> {
        map(on: on, flags: flags) { foo in
            var result: [U.Iterator.Element] = []
            for element in foo { result.append(contentsOf: try transform(element)) }
            return result
        }
    }

    /// Maps every element, dropping `nil`s.
    @inlinable public func compactMapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U?
    ) -> Promise<[U]> {
        map(on: on, flags: flags) { try $0.compactMap(transform) }
    }

    /// Maps every element to a promise and waits for all of them (`when(fulfilled:)`).
    @inlinable public func thenMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> Promise<[U.T]> {
        then(on: on, flags: flags) { when(fulfilled: try $0.map(transform)) }
    }

    /// Maps every element to a promise of a sequence, waits for all and flattens.
    @inlinable public func thenFlatMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> Promise<[U.T.Iterator.Element]> where U.T: Sequence {
        then(on: on, flags: flags) {
            when(fulfilled: try $0.map(transform))
        }.map(on: nil) { $0.flatMap { $0 } }
    }

    /// Keeps the elements for which `isIncluded` returns `true`.
    @inlinable public func filterValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ isIncluded: @escaping (T.Iterator.Element) -> Bool
    ) -> Promise<[T.Iterator.Element]> {
        map(on: on, flags: flags) { $0.filter(isIncluded) }
    }
}

extension Thenable where T: Collection {
    /// The first element; rejects with `PMKError.emptySequence` if there is none.
    @inlinable public var firstValue: Promise<T.Iterator.Element> {
        map(on: nil) { collection in
            guard let first = collection.first else { throw PMKError.emptySequence }
            return first
        }
    }

    /// The first element passing `test`; rejects with `PMKError.emptySequence` if none does.
    @inlinable public func firstValue(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping (T.Iterator.Element) -> Bool
    ) -> Promise<T.Iterator.Element> {
        map(on: on, flags: flags) { collection in
            guard let first = collection.first(where: test) else { throw PMKError.emptySequence }
            return first
        }
    }

    /// The last element; rejects with `PMKError.emptySequence` if there is none.
    @inlinable public var lastValue: Promise<T.Iterator.Element> {
        map(on: nil) { collection in
            guard let last = Array(collection).last else { throw PMKError.emptySequence }
            return last
        }
    }
}

extension Thenable where T: Sequence, T.Iterator.Element: Comparable {
    /// The elements, sorted.
    @inlinable public func sortedValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil
    ) -> Promise<[T.Iterator.Element]> {
        map(on: on, flags: flags) { $0.sorted() }
    }
}
