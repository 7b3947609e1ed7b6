import Dispatch

/// A promise: a value of type `T` that will be available later, or an error.
///
/// `Promise` is source-compatible with PromiseKit 8's `Promise`. It is thread-safe: it can be
/// resolved, observed and inspected from any thread. Handlers added with `then`, `map`, `done`…
/// run on the queue passed as `on:` (by default `conf.Q.map` or `conf.Q.return`, the main queue
/// unless configured otherwise); `on: nil` runs them synchronously on the thread that resolves
/// the promise (or that adds the handler, when the promise is already resolved).
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
    // The lock word must remain the first stored property: see Lock.swift.
    private final var lockWord = makeLockWord()
    /// `nil` while pending. Written once, under the lock.
    private final var storedResult: Result<T>?
    /// `storedResult != nil`, kept as a plain flag: testing it needs no generic metadata, while
    /// testing `storedResult` looks up `Result<T>?`'s metadata at run time on every call (the
    /// core's generic code is not specialized in client modules). Written with `storedResult`.
    private final var isSettled = false
    /// Steps waiting for this promise; moved out when it settles.
    private final var handlers = Handlers()
    /// A producer's task (`PromiseCancellation`) or a cancellable wrapper; released on settling.
    private final var attachment: (any PromiseAttachment)?

    /// Creates a pending promise; used by subclasses that are also steps of a chain.
    init(pending: ()) {}

    /// Creates a settled promise.
    init(settled result: Result<T>) {
        storedResult = result
        isSettled = true
    }

    /// Creates a promise rejected with `error`.
    public convenience init(error: Error) {
        self.init(settled: .rejected(error))
    }

    /// Creates a promise that resolves as `bridge` does.
    ///
    /// Handlers of `bridge` are not involved: the new promise follows `bridge` synchronously
    /// on the thread that resolves it.
    public convenience init<U: Thenable>(_ bridge: U) where U.T == T {
        self.init(pending: ())
        drain(bridge.asPromise().follow(self))
    }

    /// Creates a pending promise and calls `body` with its resolver, at once, on this thread.
    ///
    /// If `body` throws, the promise is rejected with the error.
    public convenience init(resolver body: (Resolver<T>) throws -> Void) {
        self.init(pending: ())
        let resolver = Resolver(self)
        do {
            try body(resolver)
        } catch {
            resolver.reject(error)
        }
    }

    /// Returns a fulfilled promise.
    public static func value(_ value: T) -> Promise<T> {
        Promise(settled: .fulfilled(value))
    }

    /// Returns a pending promise, without a resolver (the caller settles it with `resolve`).
    package static func makePending() -> Promise<T> {
        Promise(pending: ())
    }

    /// Returns a pending promise and the resolver that settles it.
    public static func pending() -> (promise: Promise<T>, resolver: Resolver<T>) {
        let promise = Promise(pending: ())
        return (promise, Resolver(promise))
    }

    deinit {
        // A pending promise may hold a long chain of pending steps: release it iteratively.
        if !handlers.isEmpty {
            teardown(&handlers)
        }
        lockWordDestroy(lockWordPointer(self))
    }

    // MARK: State

    @inline(__always) private final func lock() { lockWordLock(lockWordPointer(self)) }
    @inline(__always) private final func unlock() { lockWordUnlock(lockWordPointer(self)) }

    /// The result, or `nil` while pending. Safe from any thread.
    public final var result: Result<T>? {
        lock()
        let r = storedResult
        unlock()
        return r
    }

    /// The result of a promise known to be settled, read without the lock. Only valid in a
    /// step that was resumed for this promise (settling happened-before the resume).
    @inline(__always) package final var settledResult: Result<T> {
        storedResult!
    }

    /// Settles the promise if it is pending and returns the handlers to run; returns nothing
    /// when it had already settled (the call is then a no-op).
    @inline(__always)
    package final func settle(_ result: Result<T>) -> Unblocked {
        lock()
        guard !isSettled else {
            unlock()
            return .none
        }
        storedResult = result
        isSettled = true
        let released = handlers
        handlers = Handlers()
        let attached = attachment
        attachment = nil
        unlock()
        // The attachment is notified (and released) by `drain`, outside every lock.
        return Unblocked(source: self, handlers: released, attachment: attached)
    }

    /// Settles the promise and runs the released handlers.
    @inline(__always)
    package final func resolve(_ result: Result<T>) {
        drain(settle(result))
    }

    /// Attaches `continuation`; returns `false` (without attaching) if already settled, in which
    /// case the caller resumes the continuation itself.
    @inline(__always)
    package final func attach(_ continuation: any Continuation) -> Bool {
        lock()
        guard !isSettled else {
            unlock()
            return false
        }
        handlers.append(continuation)
        unlock()
        return true
    }

    /// Attaches `continuation`, or resumes it at once if already settled; returns what it released.
    @inline(__always)
    package final func observe(_ continuation: any Continuation) -> Unblocked {
        if attach(continuation) { return .none }
        return continuation.resume(from: self)
    }

    /// Makes `target` settle as this promise does. Returns what settling released, when this
    /// promise was already settled.
    package final func follow(_ target: Promise<T>) -> Unblocked {
        observe(ClosureContinuation<T> { target.settle($0) })
    }

    /// Moves out this promise's handlers; only while the caller holds its last reference.
    package final func takeHandlersForTeardown() -> Handlers {
        let taken = handlers
        handlers = Handlers()
        return taken
    }

    // MARK: Attached tasks (for producers of promises; see PromiseCancellation)

    /// Attaches the task producing this promise, so a cancellable wrapper can cancel it.
    /// Ignored (and returns `false`) if the promise has already settled.
    @discardableResult
    package final func attachCancellation(_ cancellation: PromiseCancellation) -> Bool {
        lock()
        guard !isSettled else {
            unlock()
            return false
        }
        attachment = cancellation
        unlock()
        return true
    }

    /// The task attached by this promise's producer, while it is pending.
    package final var attachedCancellation: PromiseCancellation? {
        lock()
        let a = attachment
        unlock()
        return a as? PromiseCancellation
    }

    /// Replaces the attachment while pending. Returns `false` (attaching nothing) once settled,
    /// and the previous attachment.
    package final func replaceAttachment(
        with new: any PromiseAttachment
    ) -> (attached: Bool, previous: (any PromiseAttachment)?) {
        lock()
        guard !isSettled else {
            unlock()
            return (false, nil)
        }
        let previous = attachment
        attachment = new
        unlock()
        return (true, previous)
    }

    /// `true` while pending; takes the lock (use it where a step must not start once settled).
    @inline(__always) package final var isPendingLocked: Bool {
        lock()
        let pending = !isSettled
        unlock()
        return pending
    }

    // MARK: Thenable

    /// Calls `to` with the result once the promise settles: synchronously on the resolving
    /// thread, or at once if already settled.
    public final func pipe(to: @escaping (Result<T>) -> Void) {
        drain(observe(ClosureContinuation<T> { result in
            to(result)
            return .none
        }))
    }

    /// Returns `self`.
    public final func asPromise() -> Promise<T> { self }

    /// Blocks the calling thread until the promise settles, and returns its value or throws its
    /// error. Logs `LogEvent.waitOnMainThread` when called on the main thread; never call it on
    /// a queue the promise's chain needs, or it deadlocks.
    public final func wait() throws -> T {
        try waitForResult().get()
    }

    final func waitForResult() -> Result<T> {
        if let result { return result }
        if isMainThread { conf.logHandler(.waitOnMainThread) }
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
        self.init(settled: .fulfilled(()))
    }

    /// A promise fulfilled with `()`.
    public static var value: Promise<Void> {
        Promise(settled: .fulfilled(()))
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

    /// Like `description`, with the state spelled out.
    public var debugDescription: String {
        switch result {
        case nil: return "Promise<\(T.self)>.pending"
        case .rejected(let error)?: return "Promise<\(T.self)>.rejected(\(error))"
        case .fulfilled(let value)?: return "Promise<\(T.self)>.fulfilled(\(value))"
        }
    }
}

/// A task attached to a promise by the code that produced it (a timer, a network request, a
/// child process…). `CancellablePromiseKit` uses it so that `cancellize()` stops the real work.
package final class PromiseCancellation: PromiseAttachment, @unchecked Sendable {
    private let body: @Sendable () -> Void

    /// `body` stops the task and, if it can, rejects the promise with a cancellation error.
    package init(_ body: @escaping @Sendable () -> Void) {
        self.body = body
    }

    package func cancel() { body() }

    package func promiseDidSettle() {}
}

#if canImport(Foundation)
import Foundation
@inline(__always) var isMainThread: Bool { Thread.isMainThread }
#else
@inline(__always) var isMainThread: Bool { false }
#endif
