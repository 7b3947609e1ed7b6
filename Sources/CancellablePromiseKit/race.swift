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
    guard autoCancel else {
        let all = promises.map { $0.promise }
        let winner = fulfilledOnly ? PromiseCore.race(fulfilled: all) : PromiseCore.race(all)
        return CancellablePromise(member: winner, context: CancelContext(), cancel: nil)
    }
    let inputs = AutoCancelInputs(promises.map { $0.cancelInput })
    let winner = PromiseCore.race(indexed: promises.map { $0.promise }, fulfilledOnly: fulfilledOnly) { index in
        inputs.cancelLosers(winner: index)
    }
    return CancellablePromise(member: winner, context: CancelContext(), cancel: inputs.cancelAll)
}

/// One input of a combinator with `autoCancel`: the handle of its chain (so the combinator can
/// cancel it while it is pending) and its place in that chain.
struct CancelInput {
    let context: CancelContext
    let entry: CancelEntry
}

extension CancellablePromise {
    var cancelInput: CancelInput { CancelInput(context: cancelContext, entry: entry) }
}

/// The inputs of a combinator with `autoCancel`, held (with their chains' handles) until the
/// combinator settles or is cancelled: one object for all of them, rather than a closure per
/// input. A fire-and-forget `race(…, autoCancel: true)` still cancels its losers; once it has
/// settled it holds nothing.
final class AutoCancelInputs: Sendable {
    private let inputs: Locked<[CancelInput]?>

    init(_ inputs: [CancelInput]) {
        self.inputs = Locked(inputs)
    }

    private func take() -> [CancelInput]? {
        inputs.withLock { inputs in
            defer { inputs = nil }
            return inputs
        }
    }

    /// Cancels the pending work of every input but the one at `index`, which settled the
    /// combinator: never the winner (nor the same promise given twice), nothing it depends on.
    /// A loser in a chain of its own has that chain cancelled; a loser that is a branch of the
    /// winner's chain is cancelled alone (its own promise, task and the chains it waits on), so
    /// the winner's chain is not marked cancelled.
    func cancelLosers(winner index: Int) {
        guard let inputs = take(), inputs.indices.contains(index) else { return }
        let winner = inputs[index]
        // Links followed from a loser never reach back into the winner's chain (a loser may
        // wait on the winner).
        let winnerRoot = winner.context.storage.root
        for (position, loser) in inputs.enumerated() where position != index {
            guard loser.entry !== winner.entry, loser.entry.home.isListed(loser.entry) else { continue }
            if loser.context.storage.isSameChain(as: winner.context.storage) {
                loser.entry.home.cancelAlone(loser.entry, excluding: winnerRoot)
            } else {
                loser.context.storage.cancel(with: boxedCancellation, at: .library, excluding: winnerRoot)
            }
        }
    }

    /// Cancels every input still pending: the cancel closure of the combinator's result.
    func cancelAll() {
        guard let inputs = take() else { return }
        for input in inputs where input.entry.home.isListed(input.entry) {
            input.context.cancel()
        }
    }
}
