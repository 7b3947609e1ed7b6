import Dispatch
import PromiseCore

// Producers attaching their task: the public face of the hook that `after`, PromiseFoundation's
// URLSession/Process/NotificationCenter promises and token-taking functions use. A plain
// `Promise` or `Guarantee` carries the task it was made by, so `cancellize()` (and everything
// that links a returned promise into a cancellable chain) stops the real work. Also the
// `CancellablePromise` initialisers that take a task (PromiseKit 7's `init(cancellable:…)`),
// and tying further tasks or chains to a chain (`appendCancellable`, `appendCancelContext`).

/// A task attached to a promise through public API: the `Cancellable` (held strongly, until the
/// promise settles or it is cancelled) and what to call after cancelling it. Cancels at most
/// once, however many chains reach it (`cancellize()`, chains waiting on the promise).
private final class AttachedTask: Sendable {
    private struct Parts: @unchecked Sendable {
        // @unchecked: a `Cancellable` is called from any thread by contract, and `reject` is
        // documented to be called on the cancelling thread.
        let task: any Cancellable
        let reject: (@Sendable (Error) -> Void)?
    }

    private let parts: Locked<Parts?>

    init(_ task: any Cancellable, reject: (@Sendable (Error) -> Void)?) {
        parts = Locked(Parts(task: task, reject: reject))
    }

    func cancel() {
        guard let taken = parts.withLock({ $0.take() }) else { return }
        taken.task.cancel()
        taken.reject?(CancellablePromiseError.cancelled)
    }

    static func attachment(_ task: (any Cancellable)?, reject: (@Sendable (Error) -> Void)?) -> (@Sendable () -> Void)?
    {
        guard let task else { return nil }
        let attached = AttachedTask(task, reject: reject)
        return { attached.cancel() }
    }
}

// MARK: - Promise

extension Promise {
    /// Creates a pending promise, calls `body` at once with its resolver (as
    /// `Promise(resolver:)` does), and attaches `cancellable`, the task that produces it.
    ///
    /// The promise itself is not cancellable: a plain chain built on it goes on as before. What
    /// the task changes is `cancellize()` (and `CancellablePromise(promise)`, the same
    /// operation): cancelling that cancellable promise calls `cancellable.cancel()`,
    /// synchronously on the cancelling thread, and rejects *this* promise with the cancellation
    /// error, so the work stops and every chain waiting on it learns why. A cancellable chain
    /// that waits on this promise (a `then` body returned it) cancels the task too when it is
    /// cancelled; this promise then settles as the task settles it, so have the task reject it
    /// when cancelled (as a URLSession task completes with `URLError.cancelled`), or use
    /// `setCancellable(_:reject:)`. `cancel()` is called at most once, only while the promise
    /// is pending, and the task is released once the promise settles.
    ///
    /// ```swift
    /// func download(_ url: URL) -> Promise<Data> {
    ///     let item = DownloadTask(url)          // a class conforming to Cancellable
    ///     return Promise(cancellable: item) { resolver in
    ///         item.start { data, error in resolver.resolve(data, error) }
    ///     }
    /// }
    /// let chain = download(url).cancellize().done { show($0) }
    /// chain.cancel()    // `item.cancel()` runs, the download promise rejects
    /// ```
    public convenience init(cancellable: any Cancellable, resolver body: (Resolver<T>) throws -> Void) {
        self.init(resolver: body)
        setCancellable(cancellable)
    }

    /// Attaches `cancellable` as the task producing this promise (see
    /// `init(cancellable:resolver:)` for what cancelling then does), replacing a task attached
    /// before; `nil` removes it.
    ///
    /// `reject`, if given, is called with `CancellablePromiseError.cancelled` right after
    /// `cancellable.cancel()`, on the cancelling thread; pass this promise's `resolver.reject`.
    /// `cancellize()` rejects this promise itself (with the chain's error: the error of
    /// `cancel(with:)` if one was given) before the task is cancelled, so there `reject` adds
    /// nothing; a chain that only waits on this promise cancels the task without rejecting the
    /// promise, and `reject` then settles it.
    ///
    /// Does nothing once the promise has settled (there is nothing to cancel), nor on a
    /// promise that is already part of a cancellable chain (`cancellablePromise.promise`): use
    /// `CancellablePromise.appendCancellable(_:reject:)` there.
    @preconcurrency public func setCancellable(
        _ cancellable: (any Cancellable)?, reject: (@Sendable (Error) -> Void)? = nil
    ) {
        attachCancellation(AttachedTask.attachment(cancellable, reject: reject))
    }
}

// MARK: - Guarantee

extension Guarantee {
    /// Creates a pending guarantee, calls `body` at once with the function that resolves it (as
    /// `Guarantee(resolver:)` does), and attaches `cancellable`, the task that produces it.
    ///
    /// Cancelling `cancellize()` of this guarantee calls `cancellable.cancel()`, synchronously
    /// on the cancelling thread, and rejects the cancellable wrapper. The guarantee itself
    /// cannot reject: it stays pending unless the task resolves it (as `after(seconds:)`'s
    /// does). `cancel()` is called at most once, only while the guarantee is pending.
    ///
    /// ```swift
    /// let item = DispatchWorkItem { refresh() }
    /// let done = Guarantee<Void>(cancellable: item) { resolve in
    ///     DispatchQueue.global().asyncAfter(deadline: .now() + 5) { item.perform(); resolve(()) }
    /// }
    /// done.cancellize().cancel()    // `item` is cancelled
    /// ```
    public convenience init(
        cancellable: any Cancellable, resolver body: (@escaping @Sendable (T) -> Void) -> Void
    ) {
        self.init(resolver: body)
        setCancellable(cancellable)
    }

    /// Attaches `cancellable` as the task producing this guarantee (see
    /// `init(cancellable:resolver:)`), replacing a task attached before; `nil` removes it.
    /// Does nothing once the guarantee has resolved.
    @preconcurrency public func setCancellable(_ cancellable: (any Cancellable)?) {
        asPromise().attachCancellation(AttachedTask.attachment(cancellable, reject: nil))
    }
}

// MARK: - CancellablePromise initialisers taking a task

extension CancellablePromise {
    /// Creates a pending cancellable promise and calls `body` at once with its resolver;
    /// cancelling the promise (or its chain) while it is pending rejects it and calls
    /// `cancellable?.cancel()`, synchronously on the cancelling thread, once.
    ///
    /// The PromiseKit 7 form, where the task is an object made before the promise. When the
    /// body itself starts the task, ``init(resolver:)`` (whose body returns the function that
    /// cancels it) reads better. Without `cancellable`, cancelling rejects the promise only.
    ///
    /// ```swift
    /// let item = DispatchWorkItem { … }
    /// let promise = CancellablePromise<Int>(cancellable: item) { resolver in
    ///     DispatchQueue.global().async(execute: item)
    /// }
    /// ```
    public convenience init(cancellable: (any Cancellable)? = nil, resolver body: (Resolver<T>) throws -> Void) {
        let (promise, resolver) = Promise<T>.pending()
        let storage = CancelStorage.make()
        do {
            try storage._runFirstBody { try body(resolver) }
        } catch {
            resolver.reject(error)
        }
        self.init(
            member: promise, storage: storage, newChain: true, cancel: cancellable.map { task in { task.cancel() } })
    }

    /// Wraps `promise`, resolved through `resolver`, and the task producing it: cancelling the
    /// returned promise (or its chain) while it is pending rejects it, calls
    /// `cancellable?.cancel()` and rejects `promise` through `resolver` with
    /// `CancellablePromiseError.cancelled`, synchronously on the cancelling thread.
    ///
    /// ```swift
    /// let (promise, resolver) = Promise<Data>.pending()
    /// let cancellable = CancellablePromise(cancellable: task, promise: promise, resolver: resolver)
    /// ```
    public convenience init(cancellable: (any Cancellable)? = nil, promise: Promise<T>, resolver: Resolver<T>) {
        let cancel = {
            cancellable?.cancel()
            resolver.reject(CancellablePromiseError.cancelled)
        }
        self.init(newChain: promise._mirror(), cancel: cancel)
    }

    /// A cancellable promise rejected with `error`. It has settled, so `cancellable` is never
    /// cancelled (cancelling a settled promise does nothing); the parameter is accepted for
    /// PromiseKit 7 code.
    public convenience init(cancellable: (any Cancellable)?, error: Error) {
        self.init(error: error)
    }
}

extension CancellablePromise where T == Void {
    /// A cancellable promise fulfilled with `()`. It has settled, so `cancellable` is never
    /// cancelled; the parameter is accepted for PromiseKit 7 code.
    public convenience init(cancellable: any Cancellable) {
        self.init()
    }
}

// MARK: - Tying tasks and chains to a chain

extension CancellablePromise {
    /// Ties `cancellable` to this promise's chain while this promise is pending: cancelling the
    /// chain before this promise settles calls `cancellable?.cancel()` and then
    /// `reject?(error)` with the chain's cancellation error, synchronously on the cancelling
    /// thread, once. If the chain was cancelled already, that happens at once, on this thread.
    /// Once this promise settles the task is released uncalled; if it has settled already,
    /// nothing is tied.
    ///
    /// For a producer that starts further work on behalf of a promise it already returned:
    ///
    /// ```swift
    /// let (promise, resolver) = CancellablePromise<Data>.pending()
    /// let task = session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
    /// promise.appendCancellable(task, reject: nil)
    /// task.resume()
    /// ```
    @preconcurrency public func appendCancellable(
        _ cancellable: (any Cancellable)?, reject: (@Sendable (Error) -> Void)? = nil
    ) {
        guard cancellable != nil || reject != nil else { return }
        let storage = _chainStorage
        // Read when the closure runs: the chain's error is recorded before links are followed.
        let cancel = { [weak storage] in
            cancellable?.cancel()
            reject?(storage?.cancelledError ?? CancellablePromiseError.cancelled)
        }
        // A link of this promise's own member: followed when the member is cancelled (at once
        // if the chain was cancelled already), released when it settles or is abandoned.
        storage.link(_key, .task(cancel), whileBodyRuns: false)
    }

    /// Joins the chain of `other` to this promise's chain: from now on, cancelling either
    /// cancels both (as ``CancelContext`` joins do), from any thread. If one of them was
    /// cancelled already, the other is cancelled at once, with that error, on this thread.
    public func appendCancelContext<U>(from other: CancellablePromise<U>) {
        _chainStorage.join(other._chainStorage)
    }
}

// MARK: - The finalizer

extension CancellableFinalizer {
    /// The error the chain was cancelled with, if it was (as
    /// `CancellablePromise.cancelledError`).
    public var cancelledError: Error? { chain._handleStorage.cancelledError }
}
