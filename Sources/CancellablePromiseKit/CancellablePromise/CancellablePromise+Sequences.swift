import Dispatch
import PromiseCore

// The sequence helpers of `CancellablePromise` (`mapValues`, `thenMap`, `filterValues`,
// `firstValue`…): each returns a step of the same chain, as the operators in
// CancellablePromise+Chain.swift do; queues and cancellation as there.

extension CancellablePromise where T: Sequence {
    /// Maps every element.
    @inlinable public func mapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                try $0.map(transform)
            }
        }
    }

    /// Maps every element to a sequence and flattens.
    @inlinable public func flatMapValues<U: Sequence>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.Iterator.Element]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                try $0.flatMap(transform)
            }
        }
    }

    /// Maps every element, dropping `nil`s.
    @inlinable public func compactMapValues<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U?
    ) -> CancellablePromise<[U]> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key) {
                try $0.compactMap(transform)
            }
        }
    }

    /// Maps every element to a cancellable promise and waits for all; while this chain waits on
    /// them, cancelling it cancels them.
    public func thenMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U]> {
        then(on: on, flags: flags) { values -> CancellablePromise<[U]> in
            whenAll(try values.map(transform))
        }
    }

    /// Maps every element to a thenable and waits for all.
    @inlinable public func thenMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
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
    @inlinable public func thenFlatMap<U>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> CancellablePromise<U>
    ) -> CancellablePromise<[U.Iterator.Element]> where U: Sequence {
        thenMap(on: on, flags: flags, transform).map(on: nil) { $0.flatMap { $0 } }
    }

    /// Maps every element to a thenable of a sequence, waits for all and flattens.
    @inlinable public func thenFlatMap<U: Thenable>(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping (T.Iterator.Element) throws -> U
    ) -> CancellablePromise<[U.T.Iterator.Element]> where U.T: Sequence {
        thenMap(on: on, flags: flags, transform).map(on: nil) { $0.flatMap { $0 } }
    }

    /// Keeps the elements for which `isIncluded` returns `true`.
    @inlinable public func filterValues(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        _ isIncluded: @escaping (T.Iterator.Element) -> Bool
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
    @inlinable public func firstValue(
        on: DispatchQueue? = conf.Q.map,
        flags: DispatchWorkItemFlags? = nil,
        where test: @escaping (T.Iterator.Element) -> Bool
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
