import Dispatch
import PromiseCore

// The sequence helpers of `CancellablePromise` (`mapValues`, `thenMap`, `filterValues`,
// `firstValue`…): each returns a step of the same chain, as the operators in
// CancellablePromise+Chain.swift do; queues and cancellation as there.

extension CancellablePromise where T: Sequence {
    /// Maps every element.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func mapValues<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U]> {
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
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                try $0.map(transform)
            }
        }
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
    ) -> CancellablePromise<[U.Iterator.Element]> {
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
    ) -> CancellablePromise<[U.Iterator.Element]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                try $0.flatMap(transform)
            }
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
    ) -> CancellablePromise<[U]> {
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
    ) -> CancellablePromise<[U]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                try $0.compactMap(transform)
            }
        }
    }

    /// Maps every element to a cancellable promise and waits for all; while this chain waits on
    /// them, cancelling it cancels them.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    public func thenMap<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U]> {
        thenMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a cancellable promise and waits for all; while this chain waits on
    /// them, cancelling it cancels them.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    public func thenMap<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U]> {
        _thenCancellable(on: on, flags: flags) { values -> CancellablePromise<[U]> in
            whenAll(try values.map(transform))
        }
    }

    /// Maps every element to a thenable and waits for all.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T]> {
        thenMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a thenable and waits for all.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T]> {
        step { member in
            promise._makeThen(on: on, flags: flags, attachment: member.storage, key: member.key.slot) {
                values -> Promise<[U.T]> in
                let thenables = try values.map(transform)
                for thenable in thenables { member.link(thenable) }
                return when(fulfilled: thenables)
            }
        }
    }

    /// Maps every element to a cancellable promise of a sequence, waits for all and flattens.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenFlatMap<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U.Iterator.Element]> where U: Sequence {
        thenFlatMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a cancellable promise of a sequence, waits for all and flattens.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenFlatMap<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U.Iterator.Element]> where U: Sequence {
        thenMap(on: on, flags: flags, transform)._mapCancellable(on: nil, flags: nil) { $0.flatMap { $0 } }
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func thenFlatMap<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T.Iterator.Element]> where U.T: Sequence {
        thenFlatMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func thenFlatMap<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T.Iterator.Element]> where U.T: Sequence {
        thenMap(on: on, flags: flags, transform)._mapCancellable(on: nil, flags: nil) { $0.flatMap { $0 } }
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
    ) -> CancellablePromise<[T.Iterator.Element]> {
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
    ) -> CancellablePromise<[T.Iterator.Element]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                $0.filter(isIncluded)
            }
        }
    }
}

extension CancellablePromise where T: Collection {
    /// The first element; rejects with `PMKError.emptySequence` if there is none.
    @inlinable public var firstValue: CancellablePromise<T.Iterator.Element> {
        chained(promise.firstValue)
    }

    /// The first element passing `test`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func firstValue(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping @MainActor @Sendable (T.Iterator.Element) -> Bool
    ) -> CancellablePromise<T.Iterator.Element> {
        firstValue(on: on.queue, flags: flags, where: _mainActorBody(test))
    }

    /// The first element passing `test`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func firstValue(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping @Sendable (T.Iterator.Element) -> Bool
    ) -> CancellablePromise<T.Iterator.Element> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) { collection in
                guard let first = collection.first(where: test) else { throw PMKError.emptySequence }
                return first
            }
        }
    }

    /// The last element; rejects with `PMKError.emptySequence` if there is none.
    @inlinable public var lastValue: CancellablePromise<T.Iterator.Element> {
        chained(promise.lastValue)
    }
}

extension CancellablePromise where T: Sequence, T.Iterator.Element: Comparable {
    /// The elements, sorted.
    @inlinable public func sortedValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil
    ) -> CancellablePromise<[T.Iterator.Element]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) { $0.sorted() }
        }
    }
}
