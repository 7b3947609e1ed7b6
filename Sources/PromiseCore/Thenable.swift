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

    /// Calls `to` once with the result, synchronously on the thread that settles (or at once, on
    /// the calling thread, if settled already): `to` is `@Sendable`.
    @preconcurrency func pipe(to: @escaping @Sendable (Result<T>) -> Void)

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
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    // `then`, `map` and `done` are inlinable: specialized in the caller's module, they take the
    // step's metadata from a static cache instead of looking it up on every link.
    @preconcurrency
    @inlinable public func then<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> U
    ) -> Promise<U.T> {
        then(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the fulfilled value, on `on`, and settles as the promise it returns.
    ///
    /// A rejection skips `body` and passes through. Returning the promise `then` produces
    /// rejects with `PMKError.returnedSelf`.
    ///
    /// ```swift
    /// login().then { creds in fetch(avatar: creds.user) }
    /// ```
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func then<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> U
    ) -> Promise<U.T> {
        _then(on: on, flags: flags, body)
    }

    /// Transforms the fulfilled value with `transform`, run on `on`. A throw rejects.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func map<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T) throws -> U
    ) -> Promise<U> {
        map(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Transforms the fulfilled value with `transform`, run on `on`. A throw rejects.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func map<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T) throws -> U
    ) -> Promise<U> {
        _map(on: on, flags: flags, transform)
    }

    /// Like `map`, but a `nil` result rejects with `PMKError.compactMap`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func compactMap<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T) throws -> U?
    ) -> Promise<U> {
        compactMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Like `map`, but a `nil` result rejects with `PMKError.compactMap`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func compactMap<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T) throws -> U?
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

    /// Runs `body` with the fulfilled value, on `on`; the result is
    /// `Promise<Void>`. A throw rejects.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func done(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> Void
    ) -> Promise<Void> {
        done(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the fulfilled value, on `on`; the result is
    /// `Promise<Void>`. A throw rejects.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func done(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> Void
    ) -> Promise<Void> {
        _map(on: on, flags: flags, body)
    }

    /// Runs `body` with the fulfilled value, on `on`, and passes the value on. A throw rejects.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func get(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> Void
    ) -> Promise<T> {
        get(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the fulfilled value, on `on`, and passes the value on. A throw rejects.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func get(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> Void
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .fulfilled) { result in
            if case .fulfilled(let value) = result { try body(value) }
            return .result(result)
        }
    }

    /// Runs `body` with the result, whatever it is, on `on`, and passes the result on.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func tap(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (Result<T>) -> Void
    ) -> Promise<T> {
        tap(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the result, whatever it is, on `on`, and passes the result on.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func tap(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (Result<T>) -> Void
    ) -> Promise<T> {
        asPromise()._generalStep(on: on, flags: flags, hop: .always, isObserver: true) { result in
            body(result)
            return .result(result)
        }
    }

    /// Discards the value: a `Promise<Void>` that settles when this does. No queue hop.
    @inlinable public func asVoid() -> Promise<Void> {
        _map(on: nil, flags: nil) { _ in () }
    }
}

// MARK: - Without a body type of their own

extension Thenable {
    /// The step of `map` and `done`, for a body of any type: the public operators pass theirs
    /// (whose type says where it runs), the library its own bodies built around a caller's.
    @inlinable package func _map<U>(
        on: DispatchQueue?, flags: DispatchWorkItemFlags?, _ transform: @escaping (T) throws -> U
    ) -> Promise<U> {
        let step = MapStep<T, U>(queue: on, flags: flags, transform: transform)
        asPromise().addHandlerAndDrain(step)
        return step
    }

    /// The step of `then`, as `_map`.
    @inlinable package func _then<U: Thenable>(
        on: DispatchQueue?, flags: DispatchWorkItemFlags?, _ body: @escaping (T) throws -> U
    ) -> Promise<U.T> {
        let step = ThenStep<T, U>(queue: on, flags: flags, body: body)
        asPromise().addHandlerAndDrain(step)
        return step
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
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func mapValues<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U]> {
        mapValues(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element of the fulfilled sequence.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func mapValues<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U]> {
        asPromise()._map(on: on, flags: flags) { try $0.map(transform) }
    }

    /// Maps every element to a sequence and flattens.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func flatMapValues<U: Sequence>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U.Iterator.Element]> {
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
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U.Iterator.Element]> {
        asPromise()._map(on: on, flags: flags) { foo in
            var result: [U.Iterator.Element] = []
            for element in foo { result.append(contentsOf: try transform(element)) }
            return result
        }
    }

    /// Maps every element, dropping `nil`s.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func compactMapValues<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U?
    ) -> Promise<[U]> {
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
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U?
    ) -> Promise<[U]> {
        asPromise()._map(on: on, flags: flags) { try $0.compactMap(transform) }
    }

    /// Maps every element to a promise and waits for all of them (`when(fulfilled:)`).
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U.T]> {
        thenMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a promise and waits for all of them (`when(fulfilled:)`).
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U.T]> {
        asPromise()._then(on: on, flags: flags) { when(fulfilled: try $0.map(transform)) }
    }

    /// Maps every element to a promise of a sequence, waits for all and flattens.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenFlatMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U.T.Iterator.Element]> where U.T: Sequence {
        thenFlatMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a promise of a sequence, waits for all and flattens.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenFlatMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> Promise<[U.T.Iterator.Element]> where U.T: Sequence {
        asPromise()._then(on: on, flags: flags) {
            when(fulfilled: try $0.map(transform))
        }._map(on: nil, flags: nil) { $0.flatMap { $0 } }
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
    ) -> Promise<[T.Iterator.Element]> {
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
    ) -> Promise<[T.Iterator.Element]> {
        asPromise()._map(on: on, flags: flags) { $0.filter(isIncluded) }
    }
}

extension Thenable where T: Collection {
    /// The first element; rejects with `PMKError.emptySequence` if there is none.
    @inlinable public var firstValue: Promise<T.Iterator.Element> {
        _map(on: nil, flags: nil) { collection in
            guard let first = collection.first else { throw PMKError.emptySequence }
            return first
        }
    }

    /// The first element passing `test`; rejects with `PMKError.emptySequence` if none does.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func firstValue(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping @MainActor @Sendable (T.Iterator.Element) -> Bool
    ) -> Promise<T.Iterator.Element> {
        firstValue(on: on.queue, flags: flags, where: _mainActorBody(test))
    }

    /// The first element passing `test`; rejects with `PMKError.emptySequence` if none does.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func firstValue(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping @Sendable (T.Iterator.Element) -> Bool
    ) -> Promise<T.Iterator.Element> {
        asPromise()._map(on: on, flags: flags) { collection in
            guard let first = collection.first(where: test) else { throw PMKError.emptySequence }
            return first
        }
    }

    /// The last element; rejects with `PMKError.emptySequence` if there is none.
    @inlinable public var lastValue: Promise<T.Iterator.Element> {
        _map(on: nil, flags: nil) { collection in
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
        asPromise()._map(on: on, flags: flags) { $0.sorted() }
    }
}
