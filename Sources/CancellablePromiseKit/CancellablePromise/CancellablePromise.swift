import Dispatch
import PromiseCore

/// A promise whose task can be cancelled, and the chain built on it with it.
///
/// `CancellablePromise` wraps a `Promise<T>` (``promise``) and, for the task that produces it, a
/// cancel closure. It is not a `Promise` subclass. Every operator (`then`, `map`, `done`,
/// `recover`, `ensure`, `catch`…) returns a `CancellablePromise` in the same ``CancelContext``,
/// so `cancel()` on any promise of the chain, or on `cancelContext`, cancels the whole chain:
///
/// - every pending promise of the chain is rejected with `CancellablePromiseError.cancelled`
///   before `cancel()` returns, and the cancel closure of every pending task is called once;
/// - no `then`/`map`/`compactMap`/`done`/`get`/`recover` body that has not started will run (a
///   body already running completes; its result is discarded; it sees the cancel through
///   ``CancellationToken/current`` and can stop early);
/// - `ensure`, `ensureThen`, `finally`, `tap` and `catch(policy: .allErrors)` still run, with the
///   cancellation error; the default `catch` policy skips it.
///
/// A body given no `on:` is a main-actor body and runs on the main queue; a body given a queue
/// runs there, and `on: nil` runs it synchronously on the thread that settles the promise (both
/// `@Sendable`). `cancel()`
/// is safe from any thread, any number of times; cancelling a settled chain does nothing.
///
/// ```swift
/// let download = CancellablePromise<Data> { resolver in
///     let task = session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
///     task.resume()
///     return { task.cancel() }
/// }
/// download.cancel()   // the task is cancelled, `download` rejects with .cancelled
/// ```
public final class CancellablePromise<T>: Thenable, CatchMixin, _CancelHandle, @unchecked Sendable {
    // @unchecked: every stored property is immutable but `_contextCache`, guarded by `promise`'s
    // lock; `T` need not be `Sendable`, as for `Promise` (values cross threads only through the
    // promise's own synchronisation).
    /// The wrapped promise: it settles exactly as this promise does. A chain continued from it
    /// with plain `Promise` operators is not cancellable.
    public let promise: Promise<T>

    /// The context shared by this promise's chain; cancel it to cancel the chain. Holding it
    /// keeps the chain cancellable (see ``CancelContext``). Every promise of a chain returns the
    /// same context while one is held; the context is made when first asked for (a chain that
    /// is never asked for it costs no context object: its promises are its handles).
    public var cancelContext: CancelContext {
        if let cached = promise._withLockForWrapper({ _contextCache }) { return cached }
        // Asked for outside the promise's lock: a storage lock is never taken under one.
        let context = _storage?.context() ?? CancelContext()
        // A context made by another thread meanwhile wins; this one is released after the lock.
        let (kept, unused) = promise._withLockForWrapper { () -> (CancelContext, CancelContext?) in
            if let cached = _contextCache { return (cached, context) }
            _contextCache = context
            return (context, nil)
        }
        _ = unused
        return kept
    }

    /// The storage of this promise's chain, which counts this promise as one of its handles
    /// (see `_CancelHandle`); `nil` for a promise made settled (`value(_:)`, `init(error:)`),
    /// which is in no chain until asked for its context: a returned `.value(x)` costs no
    /// storage.
    @usableFromInline let _storage: CancelStorage?

    /// The context this promise returns as `cancelContext`: the one it was made in, if given
    /// (`cancellize(cancelContext:)`), or the one made on first use. Guarded by `promise`'s lock.
    @exclusivity(unchecked) @usableFromInline var _contextCache: CancelContext?

    /// The storage of this promise's chain, made (with a context) for a promise made settled.
    @inlinable var _chainStorage: CancelStorage {
        if let storage = _storage { return storage }
        return cancelContext.storage
    }

    @usableFromInline var _handleStorage: CancelStorage { _chainStorage }
    @usableFromInline var _handleContext: CancelContext { cancelContext }

    /// The storage if there is one already (without making one).
    private var existingStorage: CancelStorage? {
        if let storage = _storage { return storage }
        return promise._withLockForWrapper { _contextCache }?.storage
    }

    /// This promise's place in its chain: its key in `cancelContext`'s storage (stale once it
    /// has left the chain).
    @usableFromInline let _key: SlotKey

    deinit {
        _storage?.releaseHandle()
    }

    /// Makes `promise` a member of `storage`'s chain, following `upstream` (a member of the same
    /// chain), if any; `cancel` stops its task. If `promise` has settled already there is
    /// nothing to cancel and nothing is listed. `newChain`: `storage` was just made for this
    /// promise, its first handle; otherwise this promise is a new handle of it. `context`: the
    /// context to return as `cancelContext` (a user's, of `cancellize(cancelContext:)`).
    @inlinable
    init(
        member promise: Promise<T>, storage: CancelStorage, newChain: Bool, context: CancelContext? = nil,
        upstream: SlotKey? = nil, cancel: (() -> Void)?
    ) {
        self.promise = promise
        self._storage = storage
        self._contextCache = context
        self._key = storage._add(promise, upstream: upstream, cancel: cancel, addingHandle: !newChain)
    }

    /// Makes `promise` the first member of a new chain; `cancel` stops its task.
    @inlinable
    convenience init(newChain promise: Promise<T>, cancel: (() -> Void)?) {
        self.init(member: promise, storage: CancelStorage.make(), newChain: true, cancel: cancel)
    }

    /// Makes `promise` a member of `context`'s chain (a new handle of it), returning `context`
    /// as its `cancelContext`.
    @inlinable
    convenience init(member promise: Promise<T>, context: CancelContext, cancel: (() -> Void)?) {
        self.init(member: promise, storage: context.storage, newChain: false, context: context, cancel: cancel)
    }

    /// Wraps `promise`, made settled: nothing to cancel, nothing listed, and no chain until a
    /// context is asked for.
    @inlinable
    init(settled promise: Promise<T>) {
        self.promise = promise
        self._storage = nil
        self._key = .none
    }

    /// Wraps `promise`, a step that `storage` listed as `key`, counting the handle this promise
    /// is (`_addStep`, or `_reserveStep` then `_listStep`).
    @inlinable
    init(listedStep promise: Promise<T>, storage: CancelStorage, key: SlotKey) {
        self.promise = promise
        self._storage = storage
        self._key = key
    }

    // MARK: Creating

    /// Starts a task: `body` runs at once with the resolver and returns the function that
    /// cancels the task. If `body` throws, the promise is rejected and there is nothing to
    /// cancel.
    ///
    /// The cancel function is called at most once, synchronously on the thread that calls
    /// `cancel()`, and only if the promise is still pending then; it is released once the
    /// promise settles. Inside `body`, ``CancellationToken/current`` is the token of this
    /// promise: cancelled when it is cancelled while pending, completed "not cancelled" once it
    /// settled, so a token-taking API started in `body` can be handed that token.
    @inlinable @preconcurrency
    public convenience init(resolver body: (Resolver<T>) throws -> (@Sendable () -> Void)) {
        let (promise, resolver) = Promise<T>.pending()
        let storage = CancelStorage.make()
        var cancel: (() -> Void)?
        do {
            try storage._runFirstBody { cancel = try body(resolver) }
        } catch {
            resolver.reject(error)
        }
        self.init(member: promise, storage: storage, newChain: true, cancel: cancel)
    }

    /// Wraps an existing promise and the function that cancels its task.
    ///
    /// `asPromise()` returns a promise that settles as this one does: on `cancel()` it is
    /// rejected with `CancellablePromiseError.cancelled` even if `cancel` goes on to reject
    /// `promise` with an error of its own.
    @inlinable @preconcurrency
    public convenience init(using promise: Promise<T>, cancel: @escaping @Sendable () -> Void) {
        self.init(newChain: promise._mirror(), cancel: cancel)
    }

    /// Builds a cancellable task out of other promises. `body` runs at once with
    /// `cancelPromise`, a promise that rejects with `CancellablePromiseError.cancelled` when this
    /// promise is cancelled (race sub-tasks against it, for example with `when(_:while:)`), and
    /// that is fulfilled once this promise settles otherwise, so it never stays pending.
    ///
    /// If `body` returns a `CancellablePromise`, it is cancelled with this one.
    ///
    /// ```swift
    /// let task = CancellablePromise<String> { cancelPromise in
    ///     when(fulfilled: [task1, task2], while: cancelPromise).then { values in
    ///         when(task3(values), while: cancelPromise)
    ///     }
    /// }
    /// ```
    public convenience init<R: Thenable>(wrapper body: (_ cancelPromise: Promise<Void>) throws -> R) where R.T == T {
        let (cancelPromise, cancelResolver) = Promise<Void>.pending()
        // Rejects `cancelPromise` when called; fulfils it when released uncalled (this promise
        // settled, or its last cancel handle went away), so it never stays pending.
        let signal = CancelSignal(cancelResolver)
        let output: Promise<T>
        var inner: CancellablePromise<T>?
        do {
            let returned = try body(cancelPromise)
            inner = returned as? CancellablePromise<T>
            output = returned.asPromise()._mirror()
        } catch {
            output = Promise(error: error)
        }
        self.init(newChain: output) { signal.cancel() }
        if let inner, let storage = _storage {
            _ChainMember(storage: storage, key: _key).link(inner, whileBodyRuns: false)
        }
    }

    /// Makes a cancellable promise bound to `bridge`, in `cancelContext` (a new context by
    /// default): the same operation as `bridge.cancellize(cancelContext:)`, which returns a
    /// promise made by this initialiser.
    ///
    /// - A `Promise` whose producer attached its task (`after`, PromiseFoundation's URLSession,
    ///   Process and NotificationCenter promises, `Promise(cancellable:resolver:)`): cancelling
    ///   calls the task's cancel function, synchronously on the cancelling thread, and rejects
    ///   `bridge` itself with the cancellation error.
    /// - A `Guarantee` with an attached task: cancelling stops the task and rejects the new
    ///   promise; the guarantee cannot reject and stays pending.
    /// - A `CancellablePromise`: the new promise is a step of its chain (in its context, joined
    ///   with `cancelContext` if given), so cancelling either cancels both.
    /// - Any other thenable: cancelling rejects the new promise only; `bridge` and its work go
    ///   on.
    @inlinable
    public convenience init<U: Thenable>(_ bridge: U, cancelContext: CancelContext? = nil) where U.T == T {
        if let chain = bridge as? CancellablePromise<T> {
            let storage = chain._chainStorage
            if let cancelContext { cancelContext.storage.join(storage) }
            self.init(
                member: chain.promise._mirror(), storage: storage, newChain: false, upstream: chain._key, cancel: nil)
            return
        }
        let storage = cancelContext?.storage ?? CancelStorage.make()
        let newChain = cancelContext == nil
        if let guarantee = bridge as? Guarantee<T> {
            let task = guarantee.asPromise()._attachedCancellation
            self.init(
                member: guarantee.asPromise()._mirror(), storage: storage, newChain: newChain, context: cancelContext,
                cancel: task)
            return
        }
        let source = bridge.asPromise()
        if let task = source._attachedCancellation {
            self.init(
                member: source, storage: storage, newChain: newChain, context: cancelContext, cancel: task)
        } else {
            self.init(
                member: source._mirror(), storage: storage, newChain: newChain, context: cancelContext, cancel: nil)
        }
    }

    /// A cancellable promise rejected with `error` (cancelling it does nothing).
    @inlinable
    public convenience init(error: Error) {
        self.init(settled: Promise(error: error))
    }

    /// A cancellable promise fulfilled with `value` (cancelling it does nothing).
    @inlinable
    public static func value(_ value: T) -> CancellablePromise<T> {
        CancellablePromise(settled: .value(value))
    }

    /// A pending cancellable promise and its resolver. `cancel()` rejects it (unlike
    /// PromiseKit 7, where a `pending()` promise ignored cancellation).
    @inlinable
    public static func pending() -> (promise: CancellablePromise<T>, resolver: Resolver<T>) {
        let (promise, resolver) = Promise<T>.pending()
        return (CancellablePromise(newChain: promise, cancel: nil), resolver)
    }

    // MARK: Cancelling

    /// Cancels this promise's whole chain (see ``CancelContext``), rejecting pending promises
    /// with `CancellablePromiseError.cancelled`. Any thread, any number of times. `file` and
    /// `line` record where the chain was cancelled, shown by `debugDescription`.
    public func cancel(file: StaticString = #fileID, line: UInt = #line) {
        _chainStorage.cancel(with: boxedCancellation, at: CancelSite(file: file, line: line))
    }

    /// ``cancel(file:line:)`` without a call site: the `Cancellable` requirement.
    @_disfavoredOverload
    public func cancel() {
        _chainStorage.cancel(with: boxedCancellation, at: .library)
    }

    /// Cancels the chain, rejecting pending promises with `error`.
    public func cancel(with error: Error, file: StaticString = #fileID, line: UInt = #line) {
        _chainStorage.cancel(with: error, at: CancelSite(file: file, line: line))
    }

    /// ``cancel(with:file:line:)`` without a call site, for code that names the method
    /// exactly (a protocol requirement, a function reference).
    @_disfavoredOverload
    public func cancel(with error: Error) {
        _chainStorage.cancel(with: error, at: .library)
    }

    /// `true` once cancellation was requested for this promise or its chain, whether or not it
    /// was still pending (as `Task.isCancelled`).
    public var isCancelled: Bool { existingStorage?.cancelledError != nil }

    /// The same as `isCancelled` (PromiseKit 7's name).
    public var cancelAttempted: Bool { isCancelled }

    /// The error the chain was cancelled with, if it was.
    public var cancelledError: Error? { existingStorage?.cancelledError }

    // MARK: Thenable

    /// Calls `to` once with the result, synchronously on the settling thread (or at once, on the
    /// calling thread): `to` is `@Sendable`.
    @preconcurrency public func pipe(to: @escaping @Sendable (Result<T>) -> Void) {
        promise.pipe(to: to)
    }

    /// The result, or `nil` while pending.
    public var result: Result<T>? { promise.result }

    /// The wrapped promise (``promise``): it settles as this one does.
    public func asPromise() -> Promise<T> { promise }

    /// `true` while not settled. Safe from any thread.
    public var isPending: Bool { promise.isPending }

    /// `true` once settled. Safe from any thread.
    public var isResolved: Bool { promise.isResolved }

    /// `true` if fulfilled. Safe from any thread.
    public var isFulfilled: Bool { promise.isFulfilled }

    /// `true` if rejected (a cancelled promise is rejected). Safe from any thread.
    public var isRejected: Bool { promise.isRejected }

    /// The error, if rejected. Safe from any thread.
    public var error: (any Error)? { promise.error }

    /// Blocks until settled; see `Promise.wait()`.
    public func wait() throws -> T {
        try promise.wait()
    }
}

/// Settles a wrapper's `cancelPromise`: rejected by `cancel()`, fulfilled when released
/// without having been called.
private final class CancelSignal: Sendable {
    private let resolver: Resolver<Void>

    init(_ resolver: Resolver<Void>) {
        self.resolver = resolver
    }

    func cancel() {
        resolver.reject(CancellablePromiseError.cancelled)
    }

    deinit {
        resolver.fulfill(())
    }
}

extension CancellablePromise where T == Void {
    /// A cancellable promise fulfilled with `()`.
    public convenience init() {
        self.init(settled: Promise())
    }
}

extension CancellablePromise: CustomStringConvertible, CustomDebugStringConvertible {
    /// `CancellablePromise(…)` with the state, and `cancelled` once cancellation was requested.
    public var description: String {
        let state: String
        switch result {
        case nil: state = "…\(T.self)"
        case .fulfilled(let value)?: state = "\(value)"
        case .rejected(let error)?: state = "\(error)"
        }
        return "CancellablePromise(\(state))\(isCancelled ? " cancelled" : "")"
    }

    /// Like `description`, with the state spelled out: the promise's state, whether its chain
    /// was cancelled and, if so, where `cancel()` was called and with what error, and the number
    /// of the chain's promises still pending.
    public var debugDescription: String {
        let state = cancelContext.storage.debugState
        return "CancellablePromise<\(T.self)>(\(promise.debugDescription), isCancelled: \(state.error != nil), "
            + "\(CancelSite.describe(state)))"
    }
}

// MARK: - Converting plain promises

extension Thenable {
    /// Starts a cancellable chain from this thenable (PromiseKit 7's name; the same as
    /// `asCancellable()`), in `cancelContext` if given.
    ///
    /// If the promise's producer attached its task (`after`, the URLSession, Process and
    /// NotificationCenter promises of PromiseFoundation…), cancelling cancels that task and
    /// rejects this very promise. Otherwise cancelling rejects only the returned wrapper: the
    /// original promise stays pending and its work goes on. A `CancellablePromise` returns
    /// itself.
    @inlinable
    public func cancellize(cancelContext: CancelContext? = nil) -> CancellablePromise<T> {
        if let cancellable = self as? CancellablePromise<T> {
            if let cancelContext { cancelContext.storage.join(cancellable._chainStorage) }
            return cancellable
        }
        return CancellablePromise(self, cancelContext: cancelContext)
    }
}

extension Promise {
    /// A cancellable promise for this promise; see `cancellize()`.
    @inlinable public func asCancellable() -> CancellablePromise<T> {
        cancellize()
    }
}

extension Guarantee {
    /// A cancellable promise for this guarantee. Cancelling rejects the returned promise; the
    /// guarantee cannot reject, so it stays pending, but an attached task (the timer of
    /// `after`) is stopped.
    @inlinable
    public func cancellize(cancelContext: CancelContext? = nil) -> CancellablePromise<T> {
        CancellablePromise(self, cancelContext: cancelContext)
    }

    /// A cancellable promise for this guarantee; see `cancellize()`.
    @inlinable public func asCancellable() -> CancellablePromise<T> {
        cancellize()
    }
}

/// Starts a cancellable chain from `thenable`: the same as `thenable.cancellize(cancelContext:)`
/// (the global-function spelling of PromiseKit 7's first cancellation API).
@inlinable
public func cancellable<U: Thenable>(_ thenable: U, cancelContext: CancelContext? = nil) -> CancellablePromise<U.T> {
    thenable.cancellize(cancelContext: cancelContext)
}
