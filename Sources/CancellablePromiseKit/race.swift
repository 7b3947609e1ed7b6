import PromiseCore

/// Settles with the first input to settle, fulfilled or rejected.
///
/// With `autoCancel: true`, the other inputs are cancelled as soon as one settles (the input
/// that settled the race is never cancelled), and cancelling the returned promise cancels every
/// input. With `false` (the default) inputs are never cancelled by the race, as in PromiseKit;
/// cancelling the returned promise only rejects it.
///
/// An empty array rejects with `PMKError.badInput`. The result settles on the thread that
/// settles the winning input; losers are cancelled synchronously there, before the result's
/// handlers run.
///
/// ```swift
/// let fastest = race(mirrors.map { download(from: $0) }, autoCancel: true)
/// ```
public func race<T>(_ promises: [CancellablePromise<T>], autoCancel: Bool = false) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: autoCancel)
}

/// Variadic form of ``race(_:autoCancel:)``.
public func race<T>(_ promises: CancellablePromise<T>..., autoCancel: Bool = false) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: autoCancel)
}

/// `race(_:autoCancel:)` without `autoCancel` (declared so that it is preferred over
/// PromiseCore's `race` of plain thenables, which would return a non-cancellable `Promise`).
public func race<T>(_ promises: [CancellablePromise<T>]) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: false)
}

/// Variadic `race(_:autoCancel:)` without `autoCancel`.
public func race<T>(_ promises: CancellablePromise<T>...) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: false)
}

/// ``race(fulfilled:autoCancel:)`` without `autoCancel`.
public func race<T>(fulfilled promises: [CancellablePromise<T>]) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: true, autoCancel: false)
}

/// Fulfils with the first input to fulfil, skipping rejections; rejects with
/// `PMKError.noWinner` if every input rejects, `PMKError.badInput` if there is none. With
/// `autoCancel`, the others are cancelled once one fulfils, and cancelling the result cancels
/// every input.
public func race<T>(fulfilled promises: [CancellablePromise<T>], autoCancel: Bool = false) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: true, autoCancel: autoCancel)
}

private func race<T>(
    _ promises: [CancellablePromise<T>],
    fulfilledOnly: Bool,
    autoCancel: Bool
) -> CancellablePromise<T> {
    guard !promises.isEmpty else { return CancellablePromise(error: PMKError.badInput) }
    // Weak: a pending input is kept alive by its own context, and a settled one needs no
    // cancelling, so the settled race does not keep its inputs alive.
    let inputs = autoCancel ? WeakInputs(promises) : nil
    let winner = PromiseCore.race(indexed: promises.map { $0.promise }, fulfilledOnly: fulfilledOnly) { index in
        inputs?.cancel(except: index)
    }
    return CancellablePromise(member: winner, context: CancelContext(), cancel: inputs?.cancelAll)
}

/// Weak references to a combinator's inputs, for `autoCancel`: one object for all of them
/// rather than a closure per input.
final class WeakInputs<T> {
    private struct Input {
        weak var promise: CancellablePromise<T>?
    }

    private let inputs: [Input]

    init(_ promises: [CancellablePromise<T>]) {
        inputs = promises.map { Input(promise: $0) }
    }

    /// Cancels, in order, every input still alive except the one at `index` (none is skipped
    /// for an index out of range).
    func cancel(except index: Int) {
        for position in inputs.indices where position != index {
            inputs[position].promise?.cancel()
        }
    }

    /// Cancels every input still alive: the cancel closure of a combinator's result.
    func cancelAll() {
        cancel(except: -1)
    }
}

/// Cancels `promise` if it is still alive; a pending `CancellablePromise` is kept alive by its
/// context, so only settled ones (with nothing to cancel) can be gone.
func weakCancel<T>(_ promise: CancellablePromise<T>) -> () -> Void {
    { [weak promise] in promise?.cancel() }
}
