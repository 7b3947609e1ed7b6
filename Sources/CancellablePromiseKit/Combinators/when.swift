import Dispatch
import PromiseCore

// `when` over cancellable promises, and `when(_:while:)`.
//
// `autoCancel: true`: when one input rejects, every other input is cancelled (the one that
// rejected is not), and cancelling the returned promise cancels every input. `false` (the
// default): inputs are never cancelled by `when`, as in PromiseKit; cancelling the result only
// rejects it. Results settle on the thread that settles the last (or the rejecting) input.

/// Waits for every input to fulfil and fulfils with their values in order; rejects with the
/// first rejection. An empty array fulfils with `[]`. See above for `autoCancel`.
@inlinable
public func when<T>(fulfilled promises: [CancellablePromise<T>], autoCancel: Bool = false) -> CancellablePromise<[T]> {
    when(
        fulfilled: promises.mapThroughBuffer { $0.promise }, inputs: { promises.mapThroughBuffer { $0.cancelInput } },
        autoCancel: autoCancel
    ) { $0 }
}

/// Waits for every `Void` input to fulfil. See ``when(fulfilled:autoCancel:)``.
@inlinable
public func when(fulfilled promises: [CancellablePromise<Void>], autoCancel: Bool = false) -> CancellablePromise<Void> {
    when(
        fulfilled: promises.mapThroughBuffer { $0.promise }, inputs: { promises.mapThroughBuffer { $0.cancelInput } },
        autoCancel: autoCancel
    ) { $0.asVoid() }
}

/// Variadic form for `Void` inputs.
@inlinable
public func when(fulfilled promises: CancellablePromise<Void>..., autoCancel: Bool = false) -> CancellablePromise<Void>
{
    when(fulfilled: promises, autoCancel: autoCancel)
}

/// Waits for both inputs to fulfil.
@inlinable
public func when<U, V>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, autoCancel: Bool = false
) -> CancellablePromise<(U, V)> {
    let (puVoid, pvVoid) = (pu.promise.asVoid(), pv.promise.asVoid())
    return when(
        fulfilled: [puVoid, pvVoid],
        inputs: { [pu.cancelInput(reporting: puVoid), pv.cancelInput(reporting: pvVoid)] }, autoCancel: autoCancel
    ) { $0.map(on: nil) { [puCore = pu.promise, pvCore = pv.promise] _ in (puCore.value!, pvCore.value!) } }
}

/// Waits for all three inputs to fulfil.
@inlinable
public func when<U, V, W>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    autoCancel: Bool = false
) -> CancellablePromise<(U, V, W)> {
    let (puVoid, pvVoid, pwVoid) = (pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid())
    return when(
        fulfilled: [puVoid, pvVoid, pwVoid],
        inputs: {
            [pu.cancelInput(reporting: puVoid), pv.cancelInput(reporting: pvVoid), pw.cancelInput(reporting: pwVoid)]
        }, autoCancel: autoCancel
    ) {
        $0.map(on: nil) { [puCore = pu.promise, pvCore = pv.promise, pwCore = pw.promise] _ in
            (puCore.value!, pvCore.value!, pwCore.value!)
        }
    }
}

/// Waits for all four inputs to fulfil.
@inlinable
public func when<U, V, W, X>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, autoCancel: Bool = false
) -> CancellablePromise<(U, V, W, X)> {
    let (puVoid, pvVoid, pwVoid) = (pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid())
    let pxVoid = px.promise.asVoid()
    return when(
        fulfilled: [puVoid, pvVoid, pwVoid, pxVoid],
        inputs: {
            [
                pu.cancelInput(reporting: puVoid), pv.cancelInput(reporting: pvVoid),
                pw.cancelInput(reporting: pwVoid), px.cancelInput(reporting: pxVoid),
            ]
        }, autoCancel: autoCancel
    ) {
        $0.map(on: nil) { [puCore = pu.promise, pvCore = pv.promise, pwCore = pw.promise, pxCore = px.promise] _ in
            (puCore.value!, pvCore.value!, pwCore.value!, pxCore.value!)
        }
    }
}

/// Waits for all five inputs to fulfil.
@inlinable
public func when<U, V, W, X, Y>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, _ py: CancellablePromise<Y>, autoCancel: Bool = false
) -> CancellablePromise<(U, V, W, X, Y)> {
    let (puVoid, pvVoid, pwVoid) = (pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid())
    let (pxVoid, pyVoid) = (px.promise.asVoid(), py.promise.asVoid())
    return when(
        fulfilled: [puVoid, pvVoid, pwVoid, pxVoid, pyVoid],
        inputs: {
            [
                pu.cancelInput(reporting: puVoid), pv.cancelInput(reporting: pvVoid),
                pw.cancelInput(reporting: pwVoid), px.cancelInput(reporting: pxVoid), py.cancelInput(reporting: pyVoid),
            ]
        },
        autoCancel: autoCancel
    ) { [puCore = pu.promise, pvCore = pv.promise, pwCore = pw.promise, pxCore = px.promise, pyCore = py.promise] in
        $0.map(on: nil) { _ in (puCore.value!, pvCore.value!, pwCore.value!, pxCore.value!, pyCore.value!) }
    }
}

// The same functions without `autoCancel`: declared so that they are preferred over
// PromiseCore's `when` of plain thenables (which return non-cancellable promises) when the
// argument is left out.

/// `when(fulfilled:autoCancel:)` without `autoCancel`.
@inlinable
public func when<T>(fulfilled promises: [CancellablePromise<T>]) -> CancellablePromise<[T]> {
    when(fulfilled: promises, autoCancel: false)
}

/// `when(fulfilled:autoCancel:)` for `Void` inputs, without `autoCancel`.
@inlinable
public func when(fulfilled promises: [CancellablePromise<Void>]) -> CancellablePromise<Void> {
    when(fulfilled: promises, autoCancel: false)
}

/// Variadic `Void` form without `autoCancel`.
@inlinable
public func when(fulfilled promises: CancellablePromise<Void>...) -> CancellablePromise<Void> {
    when(fulfilled: promises, autoCancel: false)
}

/// Two-input form without `autoCancel`.
@inlinable
public func when<U, V>(fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>) -> CancellablePromise<(U, V)> {
    when(fulfilled: pu, pv, autoCancel: false)
}

/// Three-input form without `autoCancel`.
@inlinable
public func when<U, V, W>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>
) -> CancellablePromise<(U, V, W)> {
    when(fulfilled: pu, pv, pw, autoCancel: false)
}

/// Four-input form without `autoCancel`.
@inlinable
public func when<U, V, W, X>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>
) -> CancellablePromise<(U, V, W, X)> {
    when(fulfilled: pu, pv, pw, px, autoCancel: false)
}

/// Five-input form without `autoCancel`.
@inlinable
public func when<U, V, W, X, Y>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, _ py: CancellablePromise<Y>
) -> CancellablePromise<(U, V, W, X, Y)> {
    when(fulfilled: pu, pv, pw, px, py, autoCancel: false)
}

/// `when(resolved:autoCancel:)` without `autoCancel`.
@inlinable
public func when<T>(resolved promises: [CancellablePromise<T>]) -> CancellablePromise<[Result<T>]> {
    when(resolved: promises, autoCancel: false)
}

/// Variadic `when(resolved:autoCancel:)` without `autoCancel`.
@inlinable
public func when<T>(resolved promises: CancellablePromise<T>...) -> CancellablePromise<[Result<T>]> {
    when(resolved: promises, autoCancel: false)
}

/// `when(fulfilled:)` over the inputs' promises, finished on the core promise (`finish`: the
/// identity, `asVoid()`, or the tuple forms' combining of the inputs' values) and wrapped once.
/// With `autoCancel`, a rejection cancels the other inputs and cancelling the result cancels
/// them all; `inputs` is only built then.
@inlinable
func when<T, R>(
    fulfilled promises: [Promise<T>],
    inputs: () -> [CancelInput],
    autoCancel: Bool,
    finish: (Promise<[T]>) -> Promise<R>
) -> CancellablePromise<R> {
    guard autoCancel else {
        return CancellablePromise(newChain: finish(PromiseCore.when(fulfilled: promises)), cancel: nil)
    }
    let inputs = AutoCancelInputs(inputs())
    let all = _when(fulfilledReportingRejection: promises) { rejected in inputs.cancelLosers(winner: rejected) }
    return CancellablePromise(newChain: finish(all), cancel: inputs.cancelAll)
}

/// `when(fulfilled:)` whose cancellation cancels every input, while a rejection leaves the
/// others running (what a `thenMap` step waits on).
@inlinable
func whenAll<T>(_ promises: [CancellablePromise<T>]) -> CancellablePromise<[T]> {
    let inputs = AutoCancelInputs(promises.mapThroughBuffer { $0.cancelInput })
    let all = PromiseCore.when(fulfilled: promises.mapThroughBuffer { $0.promise })
    return CancellablePromise(newChain: all, cancel: inputs.cancelAll)
}

/// Waits for every input to settle and fulfils with their results in order (it rejects only
/// if cancelled). With `autoCancel`, cancelling the result cancels every input.
@inlinable
public func when<T>(
    resolved promises: [CancellablePromise<T>], autoCancel: Bool = false
)
    -> CancellablePromise<[Result<T>]>
{
    let all = when(resolved: promises.mapThroughBuffer { $0.promise })
    let inputs = autoCancel ? AutoCancelInputs(promises.mapThroughBuffer { $0.cancelInput }) : nil
    return CancellablePromise(newChain: all.asPromise(), cancel: inputs?.cancelAll)
}

/// Variadic form of ``when(resolved:autoCancel:)``.
@inlinable
public func when<T>(
    resolved promises: CancellablePromise<T>..., autoCancel: Bool = false
)
    -> CancellablePromise<[Result<T>]>
{
    when(resolved: promises, autoCancel: autoCancel)
}

/// Generates cancellable promises lazily, at most `concurrently` pending at once (see the
/// `Promise` form). Cancelling the result cancels every generated input still pending and stops
/// the generation; so does a rejection (the input that rejected is not cancelled).
/// The iterator is `sending`, as there.
public func when<It: IteratorProtocol, T>(
    fulfilled promiseIterator: sending It, concurrently: Int
)
    -> CancellablePromise<[T]> where It.Element == CancellablePromise<T>
{
    let generation = Generation()
    var iterator = promiseIterator
    let promises = AnyIterator<Promise<T>> {
        guard let next = generation.isStopped ? nil : iterator.next() else { return nil }
        generation.add(next.cancelInput)
        return next.promise
    }
    let all = PromiseCore.when(fulfilled: promises, concurrently: concurrently)
    all.pipe { result in
        if case .rejected = result { generation.stop() }
    }
    return CancellablePromise(newChain: all, cancel: generation.stop)
}

/// The inputs generated so far by `when(fulfilled:concurrently:)`, and whether to go on.
private final class Generation: Sendable {
    private let state = Locked<(stopped: Bool, inputs: [CancelInput])>((false, []))

    var isStopped: Bool { state.withLock { $0.stopped } }

    func add(_ input: CancelInput) {
        state.withLock { $0.inputs.append(input) }
    }

    /// Stops the generation and cancels every generated input still pending.
    func stop() {
        let inputs = state.withLock { state in
            state.stopped = true
            defer { state.inputs = [] }
            return state.inputs
        }
        for input in inputs { input.storage.cancel(ifListed: input.key) }
    }
}

// MARK: - when(_:while:)

// Every form below watches `cancelPromise` as a settle listener (PromiseCore's one way for an
// owner to hear a settle) whose owner, held weakly, is the returned promise's attachment: it
// goes when that promise settles or is dropped. So a long-lived `cancelPromise` (one wrapper
// running many sub-tasks) keeps only the results still pending and still referenced: settled
// or dropped ones are freed while it lives on (it stores about as many listeners as have a
// live owner).

/// Waits for `promise` but rejects as soon as `cancelPromise` rejects (with its error), keeping
/// the value's type. If `cancelPromise` fulfils, it no longer matters.
///
/// Made for the `cancelPromise` of `CancellablePromise { cancelPromise in … }`:
///
/// ```swift
/// CancellablePromise<String> { cancelPromise in
///     when(download(), while: cancelPromise).map { String(decoding: $0, as: UTF8.self) }
/// }
/// ```
///
/// No closure runs: the result settles synchronously on the thread that settles `promise` or
/// rejects `cancelPromise`. If both have settled already, `promise` wins. Nothing is cancelled:
/// `promise` goes on when `cancelPromise` rejects (see ``when(_:while:autoCancel:)`` to cancel
/// a `CancellablePromise`). `cancelPromise` holds the result only weakly, and not at all once
/// it has settled.
public func when<U: Thenable, C: Thenable>(_ promise: U, while cancelPromise: C) -> Promise<U.T> where C.T == Void {
    watch(promise.asPromise(), while: cancelPromise.asPromise(), ensured: false, onConditionRejected: nil)
}

/// ``when(_:while:)`` with CancellablePromiseKit 0.3's `isEnsured`: when `true`, a value that
/// arrives too late is not delivered.
///
/// With `isEnsured: true`, a fulfilment of `promise` is not passed on at once: the value is
/// *delivered* by a block queued on `conf.Q.map` as read when `when` is called (the main queue
/// by default; if it is `nil`, the block runs at once on the thread that fulfils `promise`),
/// which fulfils the result. If `cancelPromise`
/// rejects after `promise` fulfilled and before that block has run, the result rejects at once
/// with `CancellablePromiseError.cancelled` and the value is dropped, even though `promise`
/// fulfilled first; the same happens if `cancelPromise` had already rejected when `promise`
/// fulfilled. So a handler of the result running on that queue (the default for `done`,
/// `then`, `map`, `catch`…) sees `.cancelled` whenever `cancelPromise` rejected before the
/// delivery block ran. A rejection that comes after the delivery changes nothing.
///
/// Everything else is as with `isEnsured: false`, which is ``when(_:while:)`` itself: a
/// `cancelPromise` that rejects while `promise` is pending rejects the result with its own
/// error, a rejection of `promise` is passed on at once, and nothing is cancelled.
///
/// ```swift
/// when(fetchProfile(), while: cancelPromise, isEnsured: true).done { profile in
///     show(profile)   // never runs once cancelPromise has rejected
/// }
/// ```
public func when<U: Thenable, C: Thenable>(
    _ promise: U, while cancelPromise: C, isEnsured: Bool
) -> Promise<U.T> where C.T == Void {
    watch(promise.asPromise(), while: cancelPromise.asPromise(), ensured: isEnsured, onConditionRejected: nil)
}

/// Waits for a cancellable promise while `cancelPromise` does not reject, as
/// ``when(_:while:)``: no closure runs, and the result settles on the thread that settles
/// `promise` or rejects `cancelPromise`. With `autoCancel`, `promise` is cancelled when
/// `cancelPromise` rejects while it is pending: synchronously on the rejecting thread, just
/// after the result has been rejected (its cancel closures run then, see
/// `CancellablePromise.cancel()`). To be able to do so, `cancelPromise` keeps `promise` alive
/// until `promise` settles. Without `autoCancel`, nothing is cancelled.
public func when<T, C: Thenable>(
    _ promise: CancellablePromise<T>, while cancelPromise: C, autoCancel: Bool = false
)
    -> Promise<T> where C.T == Void
{
    watch(
        promise.promise, while: cancelPromise.asPromise(), ensured: false,
        onConditionRejected: autoCancel ? { promise.cancel() } : nil)
}

/// ``when(_:while:autoCancel:)`` with CancellablePromiseKit 0.3's `isEnsured`: see
/// ``when(_:while:isEnsured:)`` for when a value counts as delivered. With `autoCancel`,
/// `promise` is cancelled when `cancelPromise` rejects while `promise` is pending.
public func when<T, C: Thenable>(
    _ promise: CancellablePromise<T>, while cancelPromise: C, isEnsured: Bool, autoCancel: Bool = false
)
    -> Promise<T> where C.T == Void
{
    watch(
        promise.promise, while: cancelPromise.asPromise(), ensured: isEnsured,
        onConditionRejected: autoCancel ? { promise.cancel() } : nil)
}

/// The machinery of every `when(_:while:)` form: `watched` settles the result, a rejection of
/// `condition` rejects it (and, while `watched` is pending, calls `onConditionRejected` after
/// settling the result).
///
/// The result's attachment is a `ConditionWatch`, a settle listener of `condition`: held by
/// the result until it settles, and only weakly by `condition`, so that a long-lived condition
/// keeps nothing of a result that has settled (it drops the spent listener later).
private func watch<T>(
    _ watched: Promise<T>,
    while condition: Promise<Void>,
    ensured: Bool,
    onConditionRejected: (() -> Void)?
) -> Promise<T> {
    // Settled already: `promise` wins over a rejected condition, unless its value must still
    // be delivered.
    if !watched.isPending, !(ensured && watched.isFulfilled) { return watched._mirror() }
    let output = Promise<T>._makePending()
    let watch = ConditionWatch<T>(
        output: output, condition: condition, valueArrived: ensured && watched.isFulfilled,
        onConditionRejected: onConditionRejected)
    _ = output.replaceAttachment(with: watch, key: 0)
    condition.addSettleListener(watch, key: ConditionWatch<T>.conditionKey)
    let deliveryQueue = ensured ? conf.Q.map : nil
    watched.pipe { result in
        guard ensured, case .fulfilled(let value) = result else {
            output.resolve(result)
            return
        }
        watch.valueArrived()
        let delivery = UncheckedSendable { output.resolve(.fulfilled(value)) }
        if let deliveryQueue {
            deliveryQueue.async { delivery.value() }
        } else {
            delivery.value()
        }
    }
    return output
}

/// What a pending `when(_:while:)` result keeps (as its attachment, known by the key 0): told,
/// as a settle listener of the condition, when the condition settles, it rejects the result if
/// the condition rejected. Once the result or the condition has settled it holds nothing more
/// (the closure that cancels the watched promise is released).
private final class ConditionWatch<T>: PromiseAttachment, Sendable {
    private struct State {
        /// Set, with `isEnsured`, once the value has arrived and waits for its delivery.
        var valueArrived: Bool
        var onConditionRejected: (() -> Void)?
    }

    /// The key the condition's listener tells.
    static var conditionKey: UInt64 { 1 }

    private weak let condition: Promise<Void>?
    /// The result; weakly, as it holds this watch (its attachment).
    private weak let output: Promise<T>?
    private let state: Locked<State>

    init(output: Promise<T>, condition: Promise<Void>, valueArrived: Bool, onConditionRejected: (() -> Void)?) {
        self.output = output
        self.condition = condition
        self.state = Locked(State(valueArrived: valueArrived, onConditionRejected: onConditionRejected))
    }

    func valueArrived() { state.withLock { $0.valueArrived = true } }

    /// The condition settled (told as its listener), or the result did (as its attachment).
    func promiseDidSettle(key: UInt64) {
        // Taken once, by the first settle heard; released outside the lock.
        let (late, onConditionRejected) = state.withLock { state in
            defer { state.onConditionRejected = nil }
            return (state.valueArrived, state.onConditionRejected)
        }
        guard key == Self.conditionKey, let output, case .rejected(let error)? = condition?.result else { return }
        drain(consuming: output.settle(rejected: late ? CancellablePromiseError.cancelled : error))
        // A value that arrived late means `promise` has fulfilled: there is nothing to cancel.
        guard let onConditionRejected, !late else { return }
        onConditionRejected()
    }

    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

/// Waits for every promise to fulfil, rejecting as soon as one rejects or `cancelPromise`
/// rejects. As with ``when(_:while:)``, no closure runs (the result settles on the thread that
/// settles the last input or rejects), and nothing is cancelled.
public func when<U: Thenable, C: Thenable>(fulfilled promises: [U], while cancelPromise: C) -> Promise<[U.T]>
where C.T == Void {
    when(when(fulfilled: promises), while: cancelPromise)
}
