import Dispatch

// `when`: waiting for every input, all at once (`when(fulfilled:)`, `when(resolved:)`,
// `when(guarantees:)`) or a few at a time (`concurrently:`). The aggregates below use the
// machinery of Aggregate.swift.

// MARK: - Aggregates

/// `when(fulfilled:)`: fulfils with every value in order, or rejects with the first error.
///
/// The values are kept in one buffer allocated up front, with a byte per input recording
/// whether its value is stored, and each input's position is found in an `InputIndex`; the
/// state is guarded by this promise's own lock, and the last value settles the promise under
/// that same lock.
@usableFromInline final class WhenFulfilled<T>: Promise<[T]>, AggregateSink, @unchecked Sendable {
    // @unchecked: restates Promise's; its own state changes under its lock or on the settling thread.
    // Guarded by the promise's lock.
    @exclusivity(unchecked) private var remaining: Int
    private let count: Int
    /// `count` values, and `count` flags (1: the value at that index is stored), in one
    /// allocation: the flags follow the values.
    private let values: UnsafeMutablePointer<T>
    private let stored: UnsafeMutablePointer<UInt8>
    /// Deallocated (and set to `nil`) when the promise settles.
    @exclusivity(unchecked) private var positions: InputIndex?
    /// Taken (and released) by the thread that settles the aggregate.
    @exclusivity(unchecked) private var onReject: ((AnyObject) -> Void)?

    @usableFromInline init(count: Int, onReject: ((AnyObject) -> Void)? = nil) {
        self.count = count
        remaining = count
        let valueBytes = count * MemoryLayout<T>.stride
        let buffer = UnsafeMutableRawPointer.allocate(
            byteCount: valueBytes + count, alignment: MemoryLayout<T>.alignment)
        values = buffer.bindMemory(to: T.self, capacity: count)
        stored = (buffer + valueBytes).bindMemory(to: UInt8.self, capacity: count)
        stored.initialize(repeating: 0, count: count)
        positions = InputIndex(count: count)
        self.onReject = onReject
        super.init(pending: ())
    }

    deinit {
        // Values received but not moved out (the aggregate rejected first).
        if remaining > 0 {
            for index in 0..<count where stored[index] != 0 {
                (values + index).deinitialize(count: 1)
            }
        }
        UnsafeMutableRawPointer(values).deallocate()  // the flags' storage too
        positions?.deallocate()
    }

    @usableFromInline static var needsPositions: Bool { true }

    @usableFromInline func register(_ input: AnyObject, at index: Int) {
        positions?.insert(input, at: index)
    }

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        let input = unsafeDowncast(source, to: Promise<T>.self)
        if let error = input.settledError {
            lock()
            guard !isSettled else {
                unlock()
                return .none
            }
            releasePositionsLocked()
            let unused = onReject
            onReject = nil
            let released = settleLocked(rejected: error)
            if let unused { unused(source) }
            return released
        }
        lock()
        guard !isSettled, let index = positions?.take(source) else {
            assert(isSettled, "WhenFulfilled: an input settled with no position left")
            unlock()
            return .none
        }
        (values + index).initialize(to: input.settledValue)
        stored[index] = 1
        remaining -= 1
        guard remaining == 0 else {
            unlock()
            return .none
        }
        releasePositionsLocked()
        let count = self.count
        let values = self.values
        let all = [T](unsafeUninitializedCapacity: count) { buffer, initialized in
            buffer.baseAddress!.moveInitialize(from: values, count: count)
            initialized = count
        }
        initializeValue(all)
        let unused = onReject
        onReject = nil
        let released = settleLocked()
        _ = unused  // released outside the lock
        return released
    }

    /// The positions are not needed once the promise settles.
    private func releasePositionsLocked() {
        positions?.deallocate()
        positions = nil
    }
}

/// `when(resolved:)`: fulfils with every result in order once all have settled. Its state is
/// guarded by this promise's own lock, as `WhenFulfilled`'s.
@usableFromInline final class WhenResolved<T>: Promise<[Result<T>]>, AggregateSink, @unchecked Sendable {
    // @unchecked: restates Promise's; its own state changes under its lock.
    @exclusivity(unchecked) private var results: [Result<T>?]
    @exclusivity(unchecked) private var remaining: Int
    /// Deallocated (and set to `nil`) when the promise settles.
    @exclusivity(unchecked) private var positions: InputIndex?

    @usableFromInline init(count: Int) {
        results = Array(repeating: nil, count: count)
        remaining = count
        positions = InputIndex(count: count)
        super.init(pending: ())
    }

    deinit {
        positions?.deallocate()
    }

    @usableFromInline static var needsPositions: Bool { true }

    @usableFromInline func register(_ input: AnyObject, at index: Int) {
        positions?.insert(input, at: index)
    }

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        let result = unsafeDowncast(source, to: Promise<T>.self).settledResult
        lock()
        guard !isSettled, let index = positions?.take(source) else {
            assert(isSettled, "WhenResolved: an input settled with no position left")
            unlock()
            return .none
        }
        results[index] = result
        remaining -= 1
        guard remaining == 0 else {
            unlock()
            return .none
        }
        positions?.deallocate()
        positions = nil
        let complete = results.map { $0! }
        results = []
        initializeValue(complete)
        return settleLocked()
    }
}

// MARK: - when(fulfilled:)

/// Waits for every thenable to fulfil, and fulfils with their values in order; rejects as soon
/// as one rejects (the others keep running). An empty array fulfils with `[]`.
///
/// No handler hop: the result settles on the thread that settles the last input.
@inlinable
public func when<U: Thenable>(fulfilled thenables: [U]) -> Promise<[U.T]> {
    whenAllFulfilled(thenables)
}

/// The implementation of every `when(fulfilled:)` and `when(guarantees:)` form. The public
/// overloads call it rather than each other: with `[Promise<Void>]` or `[Promise<Any>]`
/// arguments, overload resolution picks the `Void` or `[any Thenable]` form again, which
/// recursed forever. `onReject`: see `_when(fulfilledReportingRejection:onReject:)`.
@inlinable
func whenAllFulfilled<U: Thenable>(_ promises: [U], onReject: ((AnyObject) -> Void)? = nil) -> Promise<[U.T]> {
    guard !promises.isEmpty else { return .value([]) }
    let aggregate = WhenFulfilled<U.T>(count: promises.count, onReject: onReject)
    connect(aggregate, to: promises)
    return aggregate
}

/// `when(fulfilled:)` over thenables of different types; values are returned as `Any`.
///
/// Disfavoured so that an array literal of thenables of one type (`when(fulfilled: [a, b])`)
/// still gives `Promise<[T]>`, not `Promise<[Any]>`.
@_disfavoredOverload
public func when(fulfilled thenables: [any Thenable]) -> Promise<[Any]> {
    func erase<P: Thenable>(_ thenable: P) -> Promise<Any> {
        thenable.asPromise()._map(on: nil, flags: nil) { $0 as Any }
    }
    return whenAllFulfilled(thenables.map { erase($0) })
}

/// Waits for every `Void` thenable to fulfil.
@inlinable
public func when<U: Thenable>(fulfilled promises: U...) -> Promise<Void> where U.T == Void {
    when(fulfilled: promises)
}

/// Waits for every `Void` thenable to fulfil.
@inlinable
public func when<U: Thenable>(fulfilled promises: [U]) -> Promise<Void> where U.T == Void {
    whenAllFulfilled(promises)._map(on: nil, flags: nil) { _ in () }
}

/// Waits for both to fulfil; rejects with the first rejection.
@inlinable
public func when<U: Thenable, V: Thenable>(fulfilled pu: U, _ pv: V) -> Promise<(U.T, V.T)> {
    whenAllFulfilled([pu.asVoid(), pv.asVoid()] as [Promise<Void>])._map(on: nil, flags: nil) { _ in
        (pu.value!, pv.value!)
    }
}

/// Waits for all three to fulfil; rejects with the first rejection.
@inlinable
public func when<U: Thenable, V: Thenable, W: Thenable>(
    fulfilled pu: U, _ pv: V, _ pw: W
)
    -> Promise<(U.T, V.T, W.T)>
{
    whenAllFulfilled([pu.asVoid(), pv.asVoid(), pw.asVoid()] as [Promise<Void>])
        ._map(on: nil, flags: nil) { _ in (pu.value!, pv.value!, pw.value!) }
}

/// Waits for all four to fulfil; rejects with the first rejection.
@inlinable
public func when<U: Thenable, V: Thenable, W: Thenable, X: Thenable>(
    fulfilled pu: U, _ pv: V, _ pw: W, _ px: X
) -> Promise<(U.T, V.T, W.T, X.T)> {
    whenAllFulfilled([pu.asVoid(), pv.asVoid(), pw.asVoid(), px.asVoid()] as [Promise<Void>])
        ._map(on: nil, flags: nil) { _ in (pu.value!, pv.value!, pw.value!, px.value!) }
}

/// Waits for all five to fulfil; rejects with the first rejection.
@inlinable
public func when<U: Thenable, V: Thenable, W: Thenable, X: Thenable, Y: Thenable>(
    fulfilled pu: U, _ pv: V, _ pw: W, _ px: X, _ py: Y
) -> Promise<(U.T, V.T, W.T, X.T, Y.T)> {
    whenAllFulfilled([pu.asVoid(), pv.asVoid(), pw.asVoid(), px.asVoid(), py.asVoid()] as [Promise<Void>])
        ._map(on: nil, flags: nil) { _ in (pu.value!, pv.value!, pw.value!, px.value!, py.value!) }
}

/// Generates promises lazily, keeping at most `concurrently` pending at once; fulfils with
/// every value in generation order, rejects on the first rejection (and stops generating).
/// `concurrently <= 0` rejects with `PMKError.badInput`.
///
/// `promiseIterator.next()` is called on the thread that settles a previous promise (or the
/// calling thread), never concurrently and never under a lock, so it may resolve promises.
/// The iterator is `sending`: it moves to those threads, and a Swift 6 caller is told if it goes
/// on using what the iterator captured.
public func when<It: IteratorProtocol>(
    fulfilled promiseIterator: sending It, concurrently: Int
)
    -> Promise<[It.Element.T]> where It.Element: Thenable
{
    guard concurrently > 0 else { return Promise(error: PMKError.badInput) }
    return ConcurrentWhen(promiseIterator, width: concurrently, stopOnRejection: true).start()
        ._map(on: nil, flags: nil) { results in
            try results.map { try $0.get() }
        }
}

/// Waits for every promise to settle, and fulfils with their results in order. Never rejects.
@inlinable
public func when<T>(resolved promises: Promise<T>...) -> Guarantee<[Result<T>]> {
    when(resolved: promises)
}

/// Waits for every promise to settle, and fulfils with their results in order. Never rejects.
/// An empty array fulfils with `[]`.
@inlinable
public func when<T>(resolved promises: [Promise<T>]) -> Guarantee<[Result<T>]> {
    guard !promises.isEmpty else { return .value([]) }
    let aggregate = WhenResolved<T>(count: promises.count)
    connect(aggregate, to: promises)
    return Guarantee(promise: aggregate)
}

/// Like `when(fulfilled:concurrently:)` but waits for every result. `concurrently <= 0` gives
/// a single `.rejected(PMKError.badInput)` result, as in PromiseKit.
public func when<It: IteratorProtocol>(
    resolved promiseIterator: sending It, concurrently: Int
)
    -> Guarantee<[Result<It.Element.T>]> where It.Element: Thenable
{
    guard concurrently > 0 else { return .value([.rejected(PMKError.badInput)]) }
    return Guarantee(
        promise: ConcurrentWhen(promiseIterator, width: concurrently, stopOnRejection: false).start())
}

/// Drives `when(…, concurrently:)`.
///
/// One thread at a time "pumps" (takes the next input from the iterator and starts observing
/// it). The iterator runs user code, so it is called outside the lock; and an input that is
/// already settled finishes while its pump is still running, which only updates the counters:
/// the running pump goes on with the next input instead of recursing once per input.
private final class ConcurrentWhen<It: IteratorProtocol>: @unchecked Sendable where It.Element: Thenable {
    // @unchecked: `iterator` is used only by the pumping thread, which `state`'s lock designates.
    typealias T = It.Element.T
    private struct State {
        var results: [Result<T>?] = []
        var running = 0
        var exhausted = false
        var failed = false
        /// A thread is inside `pump`; it alone may touch `iterator`.
        var pumping = false
    }
    private enum PumpAction {
        case takeNext
        case stop
        case finish([Result<T>])
    }
    private let state = Locked(State())
    /// Only used by the thread that set `state.pumping` (ordered by the lock).
    private var iterator: It
    private let width: Int
    private let stopOnRejection: Bool
    private let output = Promise<[Result<T>]>(pending: ())

    init(_ iterator: It, width: Int, stopOnRejection: Bool) {
        self.iterator = iterator
        self.width = width
        self.stopOnRejection = stopOnRejection
    }

    func start() -> Promise<[Result<T>]> {
        pump()
        return output
    }

    /// Starts promises until `width` are running or the iterator is exhausted; returns at once
    /// if another call is already pumping (that call sees the updated counters).
    private func pump() {
        let mayPump: Bool = state.withLock { state in
            if state.pumping { return false }
            state.pumping = true
            return true
        }
        guard mayPump else { return }
        while true {
            // Decide under the lock whether to take another input; stop pumping otherwise.
            let action: PumpAction = state.withLock { state in
                if !state.failed, !state.exhausted, state.running < width { return .takeNext }
                state.pumping = false
                guard state.running == 0, state.exhausted, !state.failed else { return .stop }
                return .finish(state.results.map { $0! })
            }
            switch action {
            case .takeNext: break
            case .stop: return
            case .finish(let results):
                output.resolve(.fulfilled(results))
                return
            }
            let element = iterator.next()
            let index: Int? = state.withLock { state in
                guard element != nil else {
                    state.exhausted = true
                    return nil
                }
                state.results.append(nil)
                state.running += 1
                return state.results.count - 1
            }
            if let element, let index {
                element.asPromise()._pipe { result in self.finished(index, result) }
            }
        }
    }

    private func finished(_ index: Int, _ result: Result<T>) {
        let failedNow: Error? = state.withLock { state in
            state.results[index] = result
            state.running -= 1
            if stopOnRejection, case .rejected(let error) = result, !state.failed {
                state.failed = true
                return error
            }
            return nil
        }
        if let failedNow {
            output.resolve(.rejected(failedNow))
            return
        }
        pump()
    }
}

// MARK: - Guarantees

/// Waits for every `Void` guarantee.
@inlinable
public func when(_ guarantees: Guarantee<Void>...) -> Guarantee<Void> {
    when(guarantees: guarantees)
}

/// Waits for every guarantee and returns their values in order.
@inlinable
public func when<T>(_ guarantees: Guarantee<T>...) -> Guarantee<[T]> {
    when(guarantees: guarantees)
}

/// Waits for every `Void` guarantee.
@inlinable
public func when(guarantees: [Guarantee<Void>]) -> Guarantee<Void> {
    when(guarantees: guarantees)._mapGuarantee(on: nil, flags: nil) { (_: [Void]) in () }
}

/// Waits for every guarantee and returns their values in order. An empty array gives `[]`.
@inlinable
public func when<T>(guarantees: [Guarantee<T>]) -> Guarantee<[T]> {
    Guarantee(promise: whenAllFulfilled(guarantees.map { $0.promise }))
}

/// Waits for both guarantees.
@inlinable
public func when<U, V>(guarantees gu: Guarantee<U>, _ gv: Guarantee<V>) -> Guarantee<(U, V)> {
    when(guarantees: [gu.asVoid(), gv.asVoid()])._mapGuarantee(on: nil, flags: nil) { (gu.value!, gv.value!) }
}

/// Waits for all three guarantees.
@inlinable
public func when<U, V, W>(
    guarantees gu: Guarantee<U>, _ gv: Guarantee<V>, _ gw: Guarantee<W>
)
    -> Guarantee<(U, V, W)>
{
    when(guarantees: [gu.asVoid(), gv.asVoid(), gw.asVoid()])._mapGuarantee(on: nil, flags: nil) {
        (gu.value!, gv.value!, gw.value!)
    }
}

/// Waits for all four guarantees.
@inlinable
public func when<U, V, W, X>(
    guarantees gu: Guarantee<U>, _ gv: Guarantee<V>, _ gw: Guarantee<W>, _ gx: Guarantee<X>
) -> Guarantee<(U, V, W, X)> {
    when(guarantees: [gu.asVoid(), gv.asVoid(), gw.asVoid(), gx.asVoid()])
        ._mapGuarantee(on: nil, flags: nil) { (gu.value!, gv.value!, gw.value!, gx.value!) }
}

/// Waits for all five guarantees.
@inlinable
public func when<U, V, W, X, Y>(
    guarantees gu: Guarantee<U>, _ gv: Guarantee<V>, _ gw: Guarantee<W>, _ gx: Guarantee<X>, _ gy: Guarantee<Y>
) -> Guarantee<(U, V, W, X, Y)> {
    when(guarantees: [gu.asVoid(), gv.asVoid(), gw.asVoid(), gx.asVoid(), gy.asVoid()])
        ._mapGuarantee(on: nil, flags: nil) { (gu.value!, gv.value!, gw.value!, gx.value!, gy.value!) }
}
