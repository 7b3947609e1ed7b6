// `race`: settling with the first input to settle, or to fulfil, through the aggregate
// machinery of Aggregate.swift.

/// `race`: settles with the first input to settle (or, for `race(fulfilled:)`, to fulfil). The
/// handler of every input; which input settled it does not matter, so it needs no index.
@usableFromInline final class Race<T>: Promise<T>, AggregateSink, @unchecked Sendable {
    // @unchecked: restates Promise's; its own state changes under its lock or on the settling thread.
    /// Rejections received, for `race(fulfilled:)`; guarded by the promise's lock.
    @exclusivity(unchecked) private var rejections = 0
    private let fulfilledOnly: Bool
    private let count: Int
    /// Taken (and released) by the thread that settles the race: an aggregate kept after it
    /// settled holds nothing of its caller's.
    @exclusivity(unchecked) private var onWin: ((AnyObject) -> Void)?

    @usableFromInline init(count: Int, fulfilledOnly: Bool, onWin: ((AnyObject) -> Void)? = nil) {
        self.count = count
        self.fulfilledOnly = fulfilledOnly
        self.onWin = onWin
        super.init(pending: ())
    }

    @usableFromInline static var needsPositions: Bool { false }

    @usableFromInline func register(_ input: AnyObject, at index: Int) {}

    @usableFromInline func handle(settled source: AnyObject) -> ReleasedHandlers {
        let input = unsafeDowncast(source, to: Promise<T>.self)
        if fulfilledOnly, input.settledError != nil {
            lock()
            rejections += 1
            guard !isSettled, rejections == count else {
                unlock()
                return .none
            }
            let unused = onWin
            onWin = nil
            let released = settleLocked(rejected: PMKError.noWinner)
            _ = unused  // released outside the lock
            return released
        }
        let released = settle(as: input)
        if released.didSettle, let onWin {
            self.onWin = nil
            onWin(source)
        }
        return released
    }
}

/// The implementation of every `race` form: a `Race` connected to `inputs`, or, for an empty
/// array, a promise rejected with `PMKError.badInput`.
@inlinable
func makeRace<U: Thenable>(_ inputs: [U], fulfilledOnly: Bool, onWin: ((AnyObject) -> Void)? = nil) -> Promise<U.T> {
    guard !inputs.isEmpty else { return Promise(error: PMKError.badInput) }
    let race = Race<U.T>(count: inputs.count, fulfilledOnly: fulfilledOnly, onWin: onWin)
    connect(race, to: inputs)
    return race
}

/// Settles with the first thenable to settle, fulfilled or rejected; the others keep running.
/// An empty array rejects with `PMKError.badInput`.
@inlinable
public func race<U: Thenable>(_ thenables: [U]) -> Promise<U.T> {
    makeRace(thenables, fulfilledOnly: false)
}

/// Settles with the first thenable to settle. Unlike PromiseKit, calling it with no arguments
/// rejects with `PMKError.badInput` instead of never settling.
@inlinable
public func race<U: Thenable>(_ thenables: U...) -> Promise<U.T> {
    race(thenables)
}

/// Resolves with the first guarantee to resolve. At least one guarantee is required (a race of
/// no guarantees could never resolve, so it does not compile).
public func race<T>(_ first: Guarantee<T>, _ rest: Guarantee<T>...) -> Guarantee<T> {
    Guarantee(promise: makeRace(([first] + rest).map { $0.promise }, fulfilledOnly: false))
}

/// Fulfils with the first thenable to fulfil, skipping rejections; rejects with
/// `PMKError.noWinner` if all reject, and with `PMKError.badInput` if the array is empty.
@inlinable
public func race<U: Thenable>(fulfilled thenables: [U]) -> Promise<U.T> {
    makeRace(thenables, fulfilledOnly: true)
}
