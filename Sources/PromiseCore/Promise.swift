import Dispatch

/// A promise: a value of type `T` that will be available later, or an error.
///
/// `Promise` is source-compatible with PromiseKit 8's `Promise`. It is thread-safe: it can be
/// resolved, observed and inspected from any thread. A body given to `then`, `map`, `done`…
/// with no `on:` is a main-actor body (`@MainActor`) and runs on the main queue; a body given a
/// queue as `on:` is `@Sendable` and runs there; `on: nil` runs it, `@Sendable` too,
/// synchronously on the thread that resolves the promise (or that adds the handler, when the
/// promise is already resolved). See <doc:Swift6AndDataRaces>.
///
/// A promise settles once: later resolutions are ignored. A plain `Promise` cannot be cancelled;
/// wrap it with `cancellize()` from `CancellablePromiseKit` for that. Cancellation is otherwise a
/// kind of rejection (see ``CancellableError``), skipped by the default ``CatchPolicy``.
///
/// ```swift
/// firstly {
///     fetchUser()
/// }.map { user in
///     user.name
/// }.done { name in
///     print(name)
/// }.catch { error in
///     print(error)
/// }
/// ```
///
/// The class cannot be subclassed outside this module.
public class Promise<T>: Thenable, CatchMixin, @unchecked Sendable {
    // @unchecked: fields change under the lock word or before sharing; the outcome is read unlocked once settled.
    // The lock word must remain the first stored property: see Lock.swift.
    private final var lockWord = makeLockWord()
    // The outcome is kept as a value buffer and an error field rather than as a `Result<T>?`:
    // the core's generic code is not specialized in client modules, and every copy or test of a
    // `Result<T>`, of a `Result<T>?` or even of a `T?` there looks up that type's metadata at run
    // time (a few hundred instructions each), while `T`'s comes with the class. The value lives
    // in `valueBuffer` (or, for a large `T`, in an allocation it points to), addressed through
    // the object pointer like the lock word, and is accessed only through `valuePointer`: it is
    // initialized when the promise is fulfilled and destroyed by `deinit`. The fields are written
    // once, under the lock, before `isSettled`.
    /// The value's storage; must remain the second stored property (see `valueBufferOffset`).
    @exclusivity(unchecked) private final var valueBuffer: ValueBuffer = (0, 0, 0)
    /// The error, once rejected. Settled with no error means fulfilled: `valuePointer` holds
    /// the value.
    @exclusivity(unchecked) private final var storedError: (any Error)?
    /// `true` once settled; a plain flag, so testing it needs no generic metadata.
    @exclusivity(unchecked) final var isSettled = false
    /// What the attachment knows this promise by (a cancel storage's slot); passed back to it
    /// with every notification. Stored after `isSettled`, in the padding before `handlers`: no
    /// size cost.
    @exclusivity(unchecked) final var attachmentKey: UInt32 = 0
    /// Handlers waiting for this promise; moved out when it settles.
    @exclusivity(unchecked) private final var handlers = Handlers()
    /// A producer's task (`PromiseCancellation`) or the storage of a cancellable chain the
    /// promise is a member of (which knows it by `attachmentKey`); released on settling.
    @exclusivity(unchecked) final var attachment: (any PromiseAttachment)?

    /// Creates a pending promise; used by subclasses that are also steps of a chain.
    @usableFromInline init(pending: ()) {}

    /// Creates a settled promise.
    init(settled result: Result<T>) {
        switch result {
        case .fulfilled(let value): initializeValue(value)
        case .rejected(let error): storedError = error
        }
        isSettled = true
    }

    /// Creates a fulfilled promise.
    @usableFromInline init(fulfilled value: T) {
        initializeValue(value)
        isSettled = true
    }

    /// Creates a rejected promise.
    @usableFromInline init(rejected error: any Error) {
        storedError = error
        isSettled = true
    }

    /// Creates a promise rejected with `error`.
    @inlinable public convenience init(error: Error) {
        self.init(rejected: error)
    }

    /// Creates a promise that resolves as `bridge` does.
    ///
    /// Handlers of `bridge` are not involved: the new promise settles as `bridge` does,
    /// synchronously on the thread that resolves it.
    @inlinable public convenience init<U: Thenable>(_ bridge: U) where U.T == T {
        self.init(pending: ())
        drain(bridge.asPromise().relay(to: self))
    }

    /// Creates a pending promise and calls `body` with its resolver, at once, on this thread.
    ///
    /// If `body` throws, the promise is rejected with the error.
    @inlinable public convenience init(resolver body: (Resolver<T>) throws -> Void) {
        self.init(pending: ())
        let resolver = Resolver(self)
        do {
            try body(resolver)
        } catch {
            resolver.reject(error)
        }
    }

    /// Returns a fulfilled promise.
    @inlinable public static func value(_ value: T) -> Promise<T> {
        Promise(fulfilled: value)
    }

    /// Returns a pending promise, without a resolver (the caller settles it with `resolve`).
    @inlinable package static func _makePending() -> Promise<T> {
        Promise(pending: ())
    }

    // The public entry points that create promises are inlinable: specialized in the caller's
    // module, they take `Promise<T>`'s and `Resolver<T>`'s metadata from static caches instead
    // of looking them up at run time on every call.

    /// Returns a pending promise and the resolver that settles it.
    @inlinable public static func pending() -> (promise: Promise<T>, resolver: Resolver<T>) {
        let promise = Promise(pending: ())
        return (promise, Resolver(promise))
    }

    deinit {
        // A pending promise may hold a long chain of pending steps: release it iteratively.
        if !handlers.isEmpty {
            teardown(&handlers)
        }
        if isSettled && storedError == nil {
            destroyValue()
        }
        lockWordDestroy(lockWordPointer(self))
    }

    // MARK: Value storage

    /// Whether a `T` fits in `valueBuffer`; otherwise the buffer holds a pointer to it.
    @inline(__always) private static var storesValueInline: Bool {
        MemoryLayout<T>.size <= MemoryLayout<ValueBuffer>.size
            && MemoryLayout<T>.alignment <= MemoryLayout<ValueBuffer>.alignment
    }

    /// The address of `valueBuffer`.
    @inline(__always) private final var valueBufferPointer: UnsafeMutableRawPointer {
        UnsafeMutableRawPointer(Unmanaged.passUnretained(self).toOpaque()).advanced(by: valueBufferOffset)
    }

    /// The address of the value; only once `initializeValue` has run.
    @inline(__always) private final var valuePointer: UnsafeMutablePointer<T> {
        let buffer = valueBufferPointer
        if Self.storesValueInline { return buffer.assumingMemoryBound(to: T.self) }
        return buffer.load(as: UnsafeMutablePointer<T>.self)
    }

    /// Stores the value; once, before the promise is marked settled.
    @inline(__always) final func initializeValue(_ value: T) {
        let buffer = valueBufferPointer
        if Self.storesValueInline {
            buffer.bindMemory(to: T.self, capacity: 1).initialize(to: value)
        } else {
            let pointer = UnsafeMutablePointer<T>.allocate(capacity: 1)
            pointer.initialize(to: value)
            buffer.storeBytes(of: pointer, as: UnsafeMutablePointer<T>.self)
        }
    }

    /// The addresses of the stored lock word and value buffer as Swift sees them; used by tests
    /// to check the offsets.
    final func _storedFieldAddresses() -> (
        lockWord: UnsafeMutableRawPointer, valueBuffer: UnsafeMutableRawPointer
    ) {
        (
            withUnsafeMutablePointer(to: &lockWord) { UnsafeMutableRawPointer($0) },
            withUnsafeMutablePointer(to: &valueBuffer) { UnsafeMutableRawPointer($0) }
        )
    }

    /// The address `valuePointer` uses for `valueBuffer`; used by tests.
    final func _valueBufferAddress() -> UnsafeMutableRawPointer { valueBufferPointer }

    /// Destroys the value stored by `initializeValue`.
    private final func destroyValue() {
        if Self.storesValueInline {
            // A trivial value (an `Int`, a struct of them) needs no destroying; asking costs one
            // load where the generic `deinitialize` costs three calls.
            guard !_isPOD(T.self) else { return }
            valueBufferPointer.assumingMemoryBound(to: T.self).deinitialize(count: 1)
        } else {
            let pointer = valueBufferPointer.load(as: UnsafeMutablePointer<T>.self)
            pointer.deinitialize(count: 1)
            pointer.deallocate()
        }
    }

    // MARK: State

    // Internal so that the aggregates (`when`, `race`), which are promises, keep their own state
    // under their promise's lock and settle without taking it twice.
    @inline(__always) final func lock() { lockWordLock(lockWordPointer(self)) }
    @inline(__always) final func unlock() { lockWordUnlock(lockWordPointer(self)) }

    /// The result, or `nil` while pending. Safe from any thread.
    public final var result: Result<T>? {
        lock()
        defer { unlock() }
        guard isSettled else { return nil }
        if let storedError { return .rejected(storedError) }
        return .fulfilled(valuePointer.pointee)
    }

    // The state queries below answer from the flags under the lock. `Thenable`'s versions build
    // the `Result` first, which costs a generic metadata lookup on every call in client code.

    /// `true` while pending; takes the lock (use it where a step must not start once settled).
    @inline(__always) final var isPendingLocked: Bool {
        lock()
        let pending = !isSettled
        unlock()
        return pending
    }

    /// `true` while not settled. Safe from any thread.
    public final var isPending: Bool { isPendingLocked }

    /// `true` once settled. Safe from any thread.
    public final var isResolved: Bool { !isPendingLocked }

    /// `true` if fulfilled. Safe from any thread.
    public final var isFulfilled: Bool {
        lock()
        defer { unlock() }
        return isSettled && storedError == nil
    }

    /// `true` if rejected. Safe from any thread.
    public final var isRejected: Bool {
        lock()
        defer { unlock() }
        return isSettled && storedError != nil
    }

    /// The error, if rejected. Safe from any thread.
    public final var error: (any Error)? {
        lock()
        defer { unlock() }
        return isSettled ? storedError : nil
    }

    /// The result of a promise known to be settled, read without the lock. Only valid in a
    /// handler run for this promise (settling happened-before the run).
    @inline(__always) final var settledResult: Result<T> {
        if let storedError { return .rejected(storedError) }
        return .fulfilled(valuePointer.pointee)
    }

    /// The error of a promise known to be settled (`nil` if it was fulfilled), read without the
    /// lock; same rule as `settledResult`.
    @inline(__always) @usableFromInline final var settledError: (any Error)? {
        storedError
    }

    /// The value of a promise known to be fulfilled, read without the lock; same rule as
    /// `settledResult`.
    @inline(__always) @usableFromInline final var settledValue: T {
        valuePointer.pointee
    }

    /// Settles the promise if it is pending and returns the handlers to run; returns nothing
    /// when it had already settled (the call is then a no-op).
    @inline(__always)
    final func settle(_ result: Result<T>) -> ReleasedHandlers {
        switch result {
        case .fulfilled(let value): return settle(fulfilled: value)
        case .rejected(let error): return settle(rejected: error)
        }
    }

    /// `settle(.fulfilled(value))`, without building a `Result`.
    @usableFromInline final func settle(fulfilled value: T) -> ReleasedHandlers {
        lock()
        guard !isSettled else {
            unlock()
            return .none
        }
        initializeValue(value)
        return settleLocked()
    }

    /// `settle(.rejected(error))`, without building a `Result`.
    @usableFromInline package final func settle(rejected error: any Error) -> ReleasedHandlers {
        lock()
        guard !isSettled else {
            unlock()
            return .none
        }
        return settleLocked(rejected: error)
    }

    /// Stores `error`, marks the promise settled, unlocks and returns what settling released;
    /// only with the lock held, while pending.
    @inline(__always)
    final func settleLocked(rejected error: any Error) -> ReleasedHandlers {
        storedError = error
        return settleLocked()
    }

    /// Settles as `source`, a promise known to be settled (see `settledResult`).
    @inline(__always)
    final func settle(as source: Promise<T>) -> ReleasedHandlers {
        if let error = source.storedError { return settle(rejected: error) }
        return settle(fulfilled: source.valuePointer.pointee)
    }

    /// Marks the promise settled (the value or error is stored), unlocks, and returns what
    /// settling released.
    @inline(__always)
    final func settleLocked() -> ReleasedHandlers {
        isSettled = true
        if handlers.isEmpty && attachment == nil {
            unlock()
            return .settled
        }
        let released = handlers
        handlers = Handlers()
        let attached = attachment
        attachment = nil
        unlock()
        // The attachment is notified (and released) by `drain`, outside every lock.
        return .released(source: self, handlers: released, attachment: attached, key: attachmentKey)
    }

    /// Settles the promise and runs the released handlers.
    @inline(__always)
    @usableFromInline package final func resolve(_ result: Result<T>) {
        drain(settle(result))
    }

    /// Adds `handler` while the promise is pending; returns `false` (adding nothing) if it has
    /// settled already, in which case the caller runs the handler itself.
    @usableFromInline
    final func addHandlerIfPending(_ handler: any PromiseHandler) -> Bool {
        lock()
        guard !isSettled else {
            unlock()
            return false
        }
        handlers.append(handler)
        unlock()
        return true
    }

    /// Adds `handler`, or runs it at once if the promise has settled already; returns what
    /// running it released.
    @usableFromInline
    final func addHandler(_ handler: any PromiseHandler) -> ReleasedHandlers {
        if addHandlerIfPending(handler) { return .none }
        return handler.handle(settled: self)
    }

    /// Adds `handler`, or, if the promise has settled already, runs it at once and drains what
    /// it releases. The common case, a pending promise, leaves nothing to drain or destroy.
    @usableFromInline
    final func addHandlerAndDrain(_ handler: any PromiseHandler) {
        if !addHandlerIfPending(handler) { drain(consuming: handler.handle(settled: self)) }
    }

    // `Resolver.fulfill` and `reject` call these rather than `drain(settle(…))` themselves:
    // inlined into a client, settling and draining destroys the `ReleasedHandlers` value in between
    // through generic value witnesses (about 130 instructions per call, measured with callgrind);
    // `@inline(never)` keeps cross-module optimization from inlining them again.

    /// `drain(settle(fulfilled: value))`.
    @inline(never) @usableFromInline final func _fulfillAndDrain(_ value: T) {
        drain(consuming: settle(fulfilled: value))
    }

    /// `drain(settle(rejected: error))`.
    @inline(never) @usableFromInline final func _rejectAndDrain(_ error: any Error) {
        drain(consuming: settle(rejected: error))
    }

    /// Makes `target` settle as this promise does. Returns what settling released, when this
    /// promise was already settled.
    @usableFromInline final func relay(to target: Promise<T>) -> ReleasedHandlers {
        addHandler(Relay<T>(target))
    }

    /// Appends a settle listener; only with the lock held, while pending. Listeners whose
    /// owner is gone may be dropped meanwhile: they go to `releasedAfterUnlock`, for the caller
    /// to release once it has unlocked.
    final func appendListenerLocked(_ listener: SettleListener, releasedAfterUnlock: inout [AnyObject]) {
        handlers.append(listener: listener, releasedAfterUnlock: &releasedAfterUnlock)
    }

    /// The number of handlers waiting for this promise, or `nil` once it has settled.
    final var waitingHandlerCount: Int? {
        var releasedAfterUnlock: [AnyObject] = []
        lock()
        let count = isSettled ? nil : handlers.waitingCount(releasedAfterUnlock: &releasedAfterUnlock)
        unlock()
        withExtendedLifetime(releasedAfterUnlock) {}
        return count
    }

    /// How many handlers this pending promise stores (spent listeners not yet dropped
    /// included) and the capacity of their storage; used by tests.
    final var handlerStorage: (stored: Int, capacity: Int) {
        lock()
        defer { unlock() }
        return handlers.storage
    }

    /// Runs the body of a step that hopped to its queue, for the source it stored when it
    /// queued the hop (see `queueHop`); returns what it released. Overridden by the steps that
    /// hop: a class method, so the queued block needs no protocol witness and captures the step
    /// alone.
    func runQueuedHop() -> ReleasedHandlers {
        preconditionFailure("Promise.runQueuedHop: only a step that hops to a queue runs a queued body")
    }

    /// Moves out this promise's handlers; only while the caller holds its last reference.
    @usableFromInline final func takeHandlersForTeardown() -> Handlers {
        let taken = handlers
        handlers = Handlers()
        return taken
    }

    // MARK: Thenable

    /// Calls `to` with the result once the promise settles: synchronously on the resolving
    /// thread, or at once if already settled.
    @preconcurrency public final func pipe(to: @escaping @Sendable (Result<T>) -> Void) {
        _pipe(to: to)
    }

    /// `pipe(to:)` for the library's own closures, whose captures it knows to be safe where the
    /// promise settles.
    package final func _pipe(to: @escaping (Result<T>) -> Void) {
        addHandlerAndDrain(
            ClosureHandler<T> { result in
                to(result)
                return .none
            })
    }

    /// Returns `self`.
    public final func asPromise() -> Promise<T> { self }

    /// Blocks the calling thread until the promise settles, and returns its value or throws its
    /// error. Every call made on the main thread logs `LogEvent.waitOnMainThread` first, even
    /// when the promise has already settled (as PromiseKit does); never call it on a queue the
    /// promise's chain needs, or it deadlocks. No handler is involved: nothing runs on a queue.
    public final func wait() throws -> T {
        try waitForResult().get()
    }

    final func waitForResult() -> Result<T> {
        // Logged on every call from the main thread, settled or not, as PromiseKit does.
        if isMainThread { conf.logHandler(.waitOnMainThread) }
        if let result { return result }
        let semaphore = DispatchSemaphore(value: 0)
        pipe { _ in semaphore.signal() }
        semaphore.wait()
        return settledResultAfterWait
    }

    private final var settledResultAfterWait: Result<T> {
        result!
    }
}

extension Promise where T == Void {
    /// Creates a promise fulfilled with `()`.
    public convenience init() {
        self.init(fulfilled: ())
    }

    /// A promise fulfilled with `()`.
    public static var value: Promise<Void> {
        Promise(fulfilled: ())
    }
}

extension Promise: CustomStringConvertible, CustomDebugStringConvertible {
    /// `Promise(…T)` while pending, otherwise `Promise(value)` or `Promise(error)`.
    public var description: String {
        switch result {
        case nil: return "Promise(…\(T.self))"
        case .rejected(let error)?: return "Promise(\(error))"
        case .fulfilled(let value)?: return "Promise(\(value))"
        }
    }

    /// The state spelled out as PromiseKit 8 does: `Promise<Int>.pending(handlers: 2)` with the
    /// number of handlers waiting, `Promise<Int>.fulfilled(3)`, or `Promise<Int>.rejected(E.e)`
    /// with the error's type before the error.
    public var debugDescription: String {
        if let count = waitingHandlerCount {
            return "Promise<\(T.self)>.pending(handlers: \(count))"
        }
        // Settled: taking the lock to count the handlers ordered this read after the outcome.
        switch settledResult {
        case .rejected(let error): return "Promise<\(T.self)>.rejected(\(type(of: error)).\(error))"
        case .fulfilled(let value): return "Promise<\(T.self)>.fulfilled(\(value))"
        }
    }
}

#if canImport(Foundation)
import Foundation
@inline(__always) var isMainThread: Bool { Thread.isMainThread }
#else
@inline(__always) var isMainThread: Bool { false }
#endif
