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
    let inputs = autoCancel ? WeakInputs(promises) : nil
    return when(fulfilled: promises.map { $0.promise }, autoCancel: autoCancel) { inputs?.cancel(except: $0) }
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
        fulfilled: [pu.promise.asVoid(), pv.promise.asVoid()], cancels: [weakCancel(pu), weakCancel(pv)],
        autoCancel: autoCancel
    )
    .map(on: nil) { _ in (pu.value!, pv.value!) }
}

/// Waits for all three inputs to fulfil.
public func when<U, V, W>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    autoCancel: Bool = false
) -> CancellablePromise<(U, V, W)> {
    when(
        fulfilled: [pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid()],
        cancels: [weakCancel(pu), weakCancel(pv), weakCancel(pw)], autoCancel: autoCancel
    ).map(on: nil) { _ in (pu.value!, pv.value!, pw.value!) }
}

/// Waits for all four inputs to fulfil.
public func when<U, V, W, X>(
    fulfilled pu: CancellablePromise<U>, _ pv: CancellablePromise<V>, _ pw: CancellablePromise<W>,
    _ px: CancellablePromise<X>, autoCancel: Bool = false
) -> CancellablePromise<(U, V, W, X)> {
    when(
        fulfilled: [pu.promise.asVoid(), pv.promise.asVoid(), pw.promise.asVoid(), px.promise.asVoid()],
        cancels: [weakCancel(pu), weakCancel(pv), weakCancel(pw), weakCancel(px)], autoCancel: autoCancel
    ).map(on: nil) { _ in (pu.value!, pv.value!, pw.value!, px.value!) }
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
        cancels: [weakCancel(pu), weakCancel(pv), weakCancel(pw), weakCancel(px), weakCancel(py)],
        autoCancel: autoCancel
    ).map(on: nil) { _ in (pu.value!, pv.value!, pw.value!, px.value!, py.value!) }
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

private func when<T>(
    fulfilled promises: [Promise<T>],
    cancels: [() -> Void],
    autoCancel: Bool
) -> CancellablePromise<[T]> {
    when(fulfilled: promises, autoCancel: autoCancel) { except in
        for (index, cancel) in cancels.enumerated() where index != except { cancel() }
    }
}

/// `cancel(except:)` cancels every input but the one at the index (all of them for -1); it is
/// only called with `autoCancel`.
private func when<T>(
    fulfilled promises: [Promise<T>],
    autoCancel: Bool,
    cancel: @escaping (_ except: Int) -> Void
) -> CancellablePromise<[T]> {
    let all = when(fulfilledIndexed: promises) { rejected in
        guard autoCancel else { return }
        cancel(rejected)
    }
    let cancelAll: (() -> Void)? = autoCancel ? { cancel(-1) } : nil
    return CancellablePromise(member: all, context: CancelContext(), cancel: cancelAll)
}

/// Waits for every input to settle and fulfils with their results in order (it rejects only
/// if cancelled). With `autoCancel`, cancelling the result cancels every input.
public func when<T>(
    resolved promises: [CancellablePromise<T>], autoCancel: Bool = false
)
    -> CancellablePromise<[Result<T>]>
{
    let all = when(resolved: promises.map { $0.promise })
    let inputs = autoCancel ? WeakInputs(promises) : nil
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
/// `Promise` form). Cancelling the result cancels every input generated so far and stops the
/// generation; so does a rejection.
public func when<It: IteratorProtocol, T>(
    fulfilled promiseIterator: It, concurrently: Int
)
    -> CancellablePromise<[T]> where It.Element == CancellablePromise<T>
{
    let generated = Locked<[CancellablePromise<T>]>([])
    let cancelled = Locked(false)
    var iterator = promiseIterator
    let promises = AnyIterator<Promise<T>> {
        guard !cancelled.withLock({ $0 }), let next = iterator.next() else { return nil }
        generated.withLock { $0.append(next) }
        return next.promise
    }
    let all = PromiseCore.when(fulfilled: promises, concurrently: concurrently)
    return CancellablePromise(member: all, context: CancelContext()) {
        cancelled.withLock { $0 = true }
        for promise in generated.withLock({ $0 }) { promise.cancel() }
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
