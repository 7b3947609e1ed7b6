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
@inlinable
public func race<T>(_ promises: [CancellablePromise<T>], autoCancel: Bool = false) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: autoCancel)
}

/// Variadic form of ``race(_:autoCancel:)``.
@inlinable
public func race<T>(_ promises: CancellablePromise<T>..., autoCancel: Bool = false) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: autoCancel)
}

/// `race(_:autoCancel:)` without `autoCancel` (declared so that it is preferred over
/// PromiseCore's `race` of plain thenables, which would return a non-cancellable `Promise`).
@inlinable
public func race<T>(_ promises: [CancellablePromise<T>]) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: false)
}

/// Variadic `race(_:autoCancel:)` without `autoCancel`.
@inlinable
public func race<T>(_ promises: CancellablePromise<T>...) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: false, autoCancel: false)
}

/// ``race(fulfilled:autoCancel:)`` without `autoCancel`.
@inlinable
public func race<T>(fulfilled promises: [CancellablePromise<T>]) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: true, autoCancel: false)
}

/// Fulfils with the first input to fulfil, skipping rejections; rejects with
/// `PMKError.noWinner` if every input rejects, `PMKError.badInput` if there is none. With
/// `autoCancel`, the others are cancelled once one fulfils, and cancelling the result cancels
/// every input.
@inlinable
public func race<T>(fulfilled promises: [CancellablePromise<T>], autoCancel: Bool = false) -> CancellablePromise<T> {
    race(promises, fulfilledOnly: true, autoCancel: autoCancel)
}

@inlinable
func race<T>(
    _ promises: [CancellablePromise<T>],
    fulfilledOnly: Bool,
    autoCancel: Bool
) -> CancellablePromise<T> {
    guard !promises.isEmpty else { return CancellablePromise(error: PMKError.badInput) }
    guard autoCancel else {
        let all = promises.mapThroughBuffer { $0.promise }
        let winner = fulfilledOnly ? PromiseCore.race(fulfilled: all) : PromiseCore.race(all)
        return CancellablePromise(newChain: winner, cancel: nil)
    }
    let inputs = AutoCancelInputs(promises.mapThroughBuffer { $0.cancelInput })
    let cores = promises.mapThroughBuffer { $0.promise }
    let winner = PromiseCore._race(reportingWinner: cores, fulfilledOnly: fulfilledOnly) { settled in
        inputs.cancelLosers(winner: settled)
    }
    return CancellablePromise(newChain: winner, cancel: inputs.cancelAll)
}
