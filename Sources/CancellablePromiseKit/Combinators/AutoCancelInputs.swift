import PromiseCore

// What `race` and `when` with `autoCancel: true` keep of their inputs: each input's promise,
// chain handle and key, to cancel the losers, or all of them when the result is cancelled.

/// One input of a combinator with `autoCancel`: its promise (what the combinator reports as
/// the input that settled it), the handle of its chain (so the combinator can cancel it while
/// it is pending) and its place in that chain.
@usableFromInline struct CancelInput {
    @usableFromInline let promise: AnyObject
    /// The input's `CancellablePromise`: a handle of its chain.
    @usableFromInline let handle: any _CancelHandle
    @usableFromInline let storage: CancelStorage
    @usableFromInline let key: SlotKey

    @usableFromInline init(promise: AnyObject, handle: any _CancelHandle, key: SlotKey) {
        self.promise = promise
        self.handle = handle
        self.storage = handle._handleStorage
        self.key = key
    }

}

extension CancellablePromise {
    @inlinable var cancelInput: CancelInput { CancelInput(promise: promise, handle: self, key: _key) }

    /// This promise as an input that the combinator reports as `reported` (a promise made from
    /// this one, such as its `asVoid()`, given to the combinator in its place).
    @inlinable func cancelInput(reporting reported: AnyObject) -> CancelInput {
        CancelInput(promise: reported, handle: self, key: _key)
    }
}

/// The inputs of a combinator with `autoCancel`, held (with their chains' handles) until the
/// combinator settles or is cancelled: one object for all of them, rather than a closure per
/// input. A fire-and-forget `race(…, autoCancel: true)` still cancels its losers; once it has
/// settled it holds nothing.
///
/// The list sits behind a lock: taken out once, by the first of `cancelLosers` and `cancelAll`.
@usableFromInline final class AutoCancelInputs: @unchecked Sendable {
    // @unchecked: `inputs` is only reached through its lock (`take()`).
    /// The inputs, `nil` once taken, and their lock.
    private let inputs: Locked<[CancelInput]?>

    @usableFromInline init(_ inputs: [CancelInput]) {
        self.inputs = Locked(inputs)
    }

    /// Takes the inputs out (the first caller gets them, later ones `nil`).
    private func take() -> [CancelInput]? {
        inputs.withLock { inputs in
            let taken = inputs
            inputs = nil
            return taken
        }
    }

    /// Cancels the pending work of every input but `winnerPromise`'s, the input that settled
    /// the combinator: never the winner (nor the same member given twice), nothing it depends
    /// on. A loser in a chain of its own has that chain cancelled; a loser that is a branch of
    /// the winner's chain is cancelled alone (its own promise, task and the chains it waits on),
    /// so the winner's chain is not marked cancelled. Each of those is decided by the loser's
    /// chain under its lock (`ChainState.cancelLoser`), from the winner's storage and key; the
    /// winner's own entry (found here by its promise) is left alone there too.
    @usableFromInline func cancelLosers(winner winnerPromise: AnyObject) {
        guard let inputs = take(), let winner = inputs.first(where: { $0.promise === winnerPromise }) else { return }
        // The winner is among them: the machine leaves it alone (the same storage and key).
        for input in inputs { input.storage.cancelLoser(input.key, winner: winner.storage, winnerKey: winner.key) }
    }

    /// Cancels every input still pending: the cancel closure of the combinator's result.
    @usableFromInline func cancelAll() {
        guard let inputs = take() else { return }
        for input in inputs { input.storage.cancel(ifListed: input.key) }
    }
}
