import PromiseCore

// `when` over cancellable promises, and `when(_:while:)`.
//
// `autoCancel: true`: when one input rejects, every other input is cancelled (the one that
// rejected is not), and cancelling the returned promise cancels every input. `false` (the
// default): inputs are never cancelled by `when`, as in PromiseKit; cancelling the result only
// rejects it. Results settle on the thread that settles the last (or the rejecting) input.

/// Waits for every input to fulfil and fulfils with their values in order; rejects with the
/// first rejection. An empty array fulfils with `[]`. See above for `autoCancel`.
public func when<T>(fulfilled promises: [CancellablePromise<T>], autoCancel: Bool = false) -> CancellablePromise<[T]> {
    when(fulfilled: promises.map { $0.promise }, inputs: promises.map { $0.cancelInput }, autoCancel: autoCancel)
}

/// Waits for every `Void` input to fulfil. See ``when(fulfilled:autoCancel:)``.
public func when(fulfilled promises: [CancellablePromise<Void>], autoCancel: Bool = false) -> CancellablePromise<Void> {
    let all: CancellablePromise<[Void]> = when(fulfilled: promises, autoCancel: autoCancel)
    return all.asVoid()
}

/// Variadic form for `Void` inputs.
public func when(fulfilled promises: CancellablePromise<Void>..., autoCancel: Bool = false) -> CancellablePromise<Void>
{
    when(fulfilled: promises, autoCancel: autoCancel)
}

/// Waits for both inputs to fulfil.
public func when<U, V>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, autoCancel: Bool = false
) -> CancellablePromise<(U, V)> {
    when(
        fulfilled: [pu.promise.asVoid(), pv.promise.asVoid()],
        inputs: [pu.cancelInput, pv.cancelInput], autoCancel: autoCancel
    )
    .map(on: nil) { [puCore = pu.promise, pvCore = pv.promise] _ in (puCore.value!, pvCore.value!) }
}

/// Waits for all three inputs to fulfil.
public func when<U, V, W>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    autoCancel: Bool = false
) -> CancellablePromise<(U, V, W)> {
    when(
        fulfilled: [pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid()],
        inputs: [pu.cancelInput, pv.cancelInput, pw.cancelInput], autoCancel: autoCancel
    ).map(on: nil) { [puCore = pu.promise, pvCore = pv.promise, pwCore = pw.promise] _ in
        (puCore.value!, pvCore.value!, pwCore.value!)
    }
}

/// Waits for all four inputs to fulfil.
public func when<U, V, W, X>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, autoCancel: Bool = false
) -> CancellablePromise<(U, V, W, X)> {
    when(
        fulfilled: [pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid(), px.promise.asVoid()],
        inputs: [pu.cancelInput, pv.cancelInput, pw.cancelInput, px.cancelInput], autoCancel: autoCancel
    ).map(on: nil) { [puCore = pu.promise, pvCore = pv.promise, pwCore = pw.promise, pxCore = px.promise] _ in
        (puCore.value!, pvCore.value!, pwCore.value!, pxCore.value!)
    }
}

/// Waits for all five inputs to fulfil.
public func when<U, V, W, X, Y>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, _ py: CancellablePromise<Y>, autoCancel: Bool = false
) -> CancellablePromise<(U, V, W, X, Y)> {
    when(
        fulfilled: [
            pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid(), px.promise.asVoid(), py.promise.asVoid(),
        ],
        inputs: [pu.cancelInput, pv.cancelInput, pw.cancelInput, px.cancelInput, py.cancelInput],
        autoCancel: autoCancel
    ).map(on: nil) {
        [puCore = pu.promise, pvCore = pv.promise, pwCore = pw.promise, pxCore = px.promise, pyCore = py.promise] _ in
        (puCore.value!, pvCore.value!, pwCore.value!, pxCore.value!, pyCore.value!)
    }
}

// The same functions without `autoCancel`: declared so that they are preferred over
// PromiseCore's `when` of plain thenables (which return non-cancellable promises) when the
// argument is left out.

/// `when(fulfilled:autoCancel:)` without `autoCancel`.
public func when<T>(fulfilled promises: [CancellablePromise<T>]) -> CancellablePromise<[T]> {
    when(fulfilled: promises, autoCancel: false)
}

/// `when(fulfilled:autoCancel:)` for `Void` inputs, without `autoCancel`.
public func when(fulfilled promises: [CancellablePromise<Void>]) -> CancellablePromise<Void> {
    when(fulfilled: promises, autoCancel: false)
}

/// Variadic `Void` form without `autoCancel`.
public func when(fulfilled promises: CancellablePromise<Void>...) -> CancellablePromise<Void> {
    when(fulfilled: promises, autoCancel: false)
}

/// Two-input form without `autoCancel`.
public func when<U, V>(fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>) -> CancellablePromise<(U, V)> {
    when(fulfilled: pu, pv, autoCancel: false)
}

/// Three-input form without `autoCancel`.
public func when<U, V, W>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>
) -> CancellablePromise<(U, V, W)> {
    when(fulfilled: pu, pv, pw, autoCancel: false)
}

/// Four-input form without `autoCancel`.
public func when<U, V, W, X>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>
) -> CancellablePromise<(U, V, W, X)> {
    when(fulfilled: pu, pv, pw, px, autoCancel: false)
}

/// Five-input form without `autoCancel`.
public func when<U, V, W, X, Y>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, _ py: CancellablePromise<Y>
) -> CancellablePromise<(U, V, W, X, Y)> {
    when(fulfilled: pu, pv, pw, px, py, autoCancel: false)
}

/// `when(resolved:autoCancel:)` without `autoCancel`.
public func when<T>(resolved promises: [CancellablePromise<T>]) -> CancellablePromise<[Result<T>]> {
    when(resolved: promises, autoCancel: false)
}

/// Variadic `when(resolved:autoCancel:)` without `autoCancel`.
public func when<T>(resolved promises: CancellablePromise<T>...) -> CancellablePromise<[Result<T>]> {
    when(resolved: promises, autoCancel: false)
}

/// `when(fulfilled:)` over the inputs' promises. With `autoCancel`, a rejection cancels the
/// other inputs and cancelling the result cancels them all.
private func when<T>(
    fulfilled promises: [Promise<T>],
    inputs: [CancelInput],
    autoCancel: Bool
) -> CancellablePromise<[T]> {
    guard autoCancel else {
        return CancellablePromise(member: PromiseCore.when(fulfilled: promises), context: CancelContext(), cancel: nil)
    }
    let inputs = AutoCancelInputs(inputs)
    let all = when(fulfilledIndexed: promises) { rejected in inputs.cancelLosers(winner: rejected) }
    return CancellablePromise(member: all, context: CancelContext(), cancel: inputs.cancelAll)
}

/// `when(fulfilled:)` whose cancellation cancels every input, while a rejection leaves the
/// others running (what a `thenMap` step waits on).
func whenAll<T>(_ promises: [CancellablePromise<T>]) -> CancellablePromise<[T]> {
    let inputs = AutoCancelInputs(promises.map { $0.cancelInput })
    let all = PromiseCore.when(fulfilled: promises.map { $0.promise })
    return CancellablePromise(member: all, context: CancelContext(), cancel: inputs.cancelAll)
}

/// Waits for every input to settle and fulfils with their results in order (it rejects only
/// if cancelled). With `autoCancel`, cancelling the result cancels every input.
public func when<T>(
    resolved promises: [CancellablePromise<T>], autoCancel: Bool = false
)
    -> CancellablePromise<[Result<T>]>
{
    let all = when(resolved: promises.map { $0.promise })
    let inputs = autoCancel ? AutoCancelInputs(promises.map { $0.cancelInput }) : nil
    return CancellablePromise(member: all.promise, context: CancelContext(), cancel: inputs?.cancelAll)
}

/// Variadic form of ``when(resolved:autoCancel:)``.
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
public func when<It: IteratorProtocol, T>(
    fulfilled promiseIterator: It, concurrently: Int
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
    return CancellablePromise(member: all, context: CancelContext(), cancel: generation.stop)
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
        for input in inputs where input.entry.home.isListed(input.entry) {
            input.context.cancel()
        }
    }
}

// MARK: - when(_:while:)

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
/// The result settles on the thread that settles `promise` or rejects `cancelPromise`.
public func when<U: Thenable, C: Thenable>(_ promise: U, while cancelPromise: C) -> Promise<U.T> where C.T == Void {
    let output = promise.asPromise().follower()
    cancelPromise.pipe { result in
        if case .rejected(let error) = result { output.resolve(.rejected(error)) }
    }
    return output
}

/// Waits for a cancellable promise while `cancelPromise` does not reject. With `autoCancel`,
/// `promise` is cancelled when `cancelPromise` rejects.
public func when<T, C: Thenable>(
    _ promise: CancellablePromise<T>, while cancelPromise: C, autoCancel: Bool = false
)
    -> Promise<T> where C.T == Void
{
    let output = when(promise.promise, while: cancelPromise)
    if autoCancel {
        cancelPromise.pipe { result in
            if case .rejected = result { promise.cancel() }
        }
    }
    return output
}

/// Waits for every promise to fulfil, rejecting as soon as one rejects or `cancelPromise`
/// rejects.
public func when<U: Thenable, C: Thenable>(fulfilled promises: [U], while cancelPromise: C) -> Promise<[U.T]>
where C.T == Void {
    when(when(fulfilled: promises), while: cancelPromise)
}

// MARK: - firstly, hang

/// Runs `body` at once and returns the cancellable promise it returns (a throw rejects).
///
/// ```swift
/// firstly { login().cancellize() }.then { fetch(avatar: $0.user).cancellize() }
/// ```
public func firstly<T>(execute body: () throws -> CancellablePromise<T>) -> CancellablePromise<T> {
    do {
        return try body()
    } catch {
        return CancellablePromise(error: error)
    }
}

/// Waits for the promise; see `hang(_: Promise)`.
public func hang<T>(_ promise: CancellablePromise<T>) throws -> T {
    try hang(promise.promise)
}
