import Dispatch
import Foundation
import PromiseCore

// The one family of waiting helpers that every test target shares. A test waits for:
//
// - a promise's result: `waitForResult`, and its `waitForValue` / `waitForError` shorthands;
// - a condition that nothing signals (an object freed on another thread): `eventually`;
// - another thread, by a handshake: a `Handshake` one side signals and the other waits for, and
//   `runWhenAwaited` / `waitUntilAwaited`, for "settle it once something waits on it" (the
//   waiting side attaches a handler to the promise before it blocks or suspends);
// - threads racing each other (and this thread): `runConcurrently`, which releases them together
//   and waits until every one has returned;
// - from `async` code: `Handshake.arrival()`, `untilAwaited` (the handshake above), `values(of:)`
//   for tasks, `awaitCallback` for a callback, `untilHolds` for a condition, and
//   `untilCancelled()` for an async body that waits for nothing but its cancellation.
//
// Each that waits for something else takes a deadline (`seconds`) after which it gives up and
// says so, so that a broken test fails instead of hanging; a passing test never waits for a
// deadline. On the main thread the blocking ones run the main run loop while they wait, so
// handlers queued on the main queue (the default `on:`) run meanwhile; only
// `Handshake.waitBlockingThisThread` does not, for a test that must keep the main queue's work
// from running. Code that only waits on the package's own timers needs none of
// them: it drives a `TestScheduler`. XCTest expectations are for XCTest APIs that need one;
// semaphores and groups belong inside this family, and in stress tests that release threads
// together.

// MARK: Promise results

/// Waits for `thenable` to settle, at most `seconds`; `nil` if it has not by then.
public func waitForResult<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> PromiseCore.Result<U.T>? {
    if let result = thenable.result { return result }
    let settled = Handshake()
    let box = SendableBox<PromiseCore.Result<U.T>?>(nil)
    thenable.pipe { result in
        box.value = result
        settled.signal()
    }
    settled.wait(seconds: seconds)
    return box.value
}

/// The value `thenable` is fulfilled with, waiting at most `seconds`; `nil` if it is rejected
/// or still pending by then.
public func waitForValue<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> U.T? {
    waitForResult(thenable, seconds: seconds)?.fulfilledValue
}

/// The error `thenable` is rejected with, waiting at most `seconds`; `nil` if it is fulfilled
/// or still pending by then.
public func waitForError<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> Error? {
    waitForResult(thenable, seconds: seconds)?.rejectedError
}

extension PromiseCore.Result {
    /// The value, if fulfilled.
    public var fulfilledValue: T? {
        if case .fulfilled(let value) = self { return value }
        return nil
    }

    /// The error, if rejected.
    public var rejectedError: Error? {
        if case .rejected(let error) = self { return error }
        return nil
    }
}

// MARK: A condition

/// Checks `condition` until it holds, at most `seconds`, every 2 ms (running the main run loop
/// meanwhile on the main thread). Returns whether it held. For effects nothing signals (an
/// object freed on another thread, a queue's handler that has run): where a promise settles, a
/// thread can signal a `Handshake` or a test scheduler drives the time, wait on that instead.
public func eventually(seconds: TimeInterval = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        if Thread.isMainThread {
            // Real clock: the polling interval, spent running the main run loop's queued work.
            _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.002))
        } else {
            Thread.sleep(forTimeInterval: 0.002)  // real clock: the polling interval of the condition
        }
    }
    return condition()
}

// MARK: A handshake with another thread

/// A one-way signal between threads: one side says it has reached a point (`signal()`), the
/// other waits until it has (`wait(seconds:)`, or `arrival(seconds:)` from `async` code). Once
/// signalled it stays signalled: a wait after the signal returns at once.
///
/// ```swift
/// let waiting = Handshake()
/// DispatchQueue.global().async { waiting.wait(); resolver.fulfill(1) }
/// waiting.signal()   // "I am about to wait", then block on the promise
/// ```
public final class Handshake: @unchecked Sendable {
    // @unchecked: the state is guarded by `condition`.
    private let condition = NSCondition()
    private var signalled = false
    private var onSignal: [@Sendable () -> Void] = []

    public init() {}

    /// Whether `signal()` has been called.
    public var hasArrived: Bool {
        condition.lock()
        defer { condition.unlock() }
        return signalled
    }

    /// Says the point is reached: wakes every waiter, now and later. Safe from any thread.
    public func signal() {
        condition.lock()
        signalled = true
        let callbacks = onSignal
        onSignal = []
        condition.broadcast()
        condition.unlock()
        for callback in callbacks { callback() }
    }

    /// Blocks until `signal()` has been called, at most `seconds` (on the main thread, running
    /// the main run loop meanwhile). Returns whether it was.
    @discardableResult
    public func wait(seconds: TimeInterval = 10) -> Bool {
        if Thread.isMainThread { return eventually(seconds: seconds) { hasArrived } }
        return waitBlockingThisThread(seconds: seconds)
    }

    /// Blocks until `signal()` has been called, at most `seconds`, without running any run
    /// loop, even on the main thread: for a test that must keep the main queue's work from
    /// running meanwhile. Returns whether it was.
    @discardableResult
    public func waitBlockingThisThread(seconds: TimeInterval = 10) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while !signalled {
            // Real clock: the deadline after which the test gives up; the signal ends it early.
            if !condition.wait(until: deadline) { break }
        }
        return signalled
    }

    /// Suspends (without blocking a thread) until `signal()` has been called, at most
    /// `seconds`. Returns whether it was.
    public func arrival(seconds: TimeInterval = 10) async -> Bool {
        await awaitCallback(seconds: seconds) { done in self.whenSignalled { done(true) } } ?? false
    }

    /// Runs `body` once `signal()` has been called: at once on this thread if it has been,
    /// otherwise on the signalling thread.
    private func whenSignalled(_ body: @escaping @Sendable () -> Void) {
        condition.lock()
        guard signalled else {
            onSignal.append(body)
            condition.unlock()
            return
        }
        condition.unlock()
        body()
    }
}

/// How many handlers wait for `promise` (a task in `async()`, a thread in `wait()`, a step),
/// or `nil` once it has settled; read from its `debugDescription`,
/// `Promise<T>.pending(handlers: N)`.
public func waitingHandlers<T>(of promise: Promise<T>) -> Int? {
    let description = promise.debugDescription
    guard let open = description.range(of: ".pending(handlers: ", options: .backwards) else { return nil }
    return Int(description[open.upperBound...].dropLast())
}

/// Blocks until `promise` has at least `handlers` handlers waiting for it, or has settled, at
/// most `seconds`; returns whether it had. The waiting side of a handshake that a thread or a
/// task cannot signal itself: `async()` and `wait()` attach their handler before they suspend
/// or block.
@discardableResult
public func waitUntilAwaited<T>(_ promise: Promise<T>, handlers: Int = 1, seconds: TimeInterval = 10) -> Bool {
    eventually(seconds: seconds) { waitingHandlers(of: promise).map { $0 >= handlers } ?? true }
}

/// Runs `body` on another thread once `promise` has at least `handlers` handlers waiting for it,
/// or has settled (see `waitUntilAwaited`): "settle it later, from another thread, once it is awaited". If
/// that does not happen within `seconds`, `body` runs anyway and the test sees the difference.
///
/// ```swift
/// let (promise, resolver) = Promise<Int>.pending()
/// runWhenAwaited(promise) { resolver.fulfill(3) }
/// XCTAssertEqual(try promise.wait(), 3)
/// ```
public func runWhenAwaited<T>(
    _ promise: Promise<T>, handlers: Int = 1, seconds: TimeInterval = 10, _ body: @escaping @Sendable () -> Void
) {
    let promise = UncheckedBox(promise)
    DispatchQueue.global().async {
        waitUntilAwaited(promise.value, handlers: handlers, seconds: seconds)
        body()
    }
}

// MARK: Threads racing

/// Runs each of `bodies` on another thread (a global queue), released together once all are
/// queued, runs `meanwhile` on this thread as they are released, then waits until every body
/// has returned, at most `seconds` (on the main thread, running the main run loop meanwhile).
/// Returns whether they all had. For races: two threads settling and cancelling the same promise,
/// a thread fulfilling while this one fires a timer.
///
/// ```swift
/// XCTAssertTrue(runConcurrently([{ resolver.fulfill(1) }, { promise.cancel() }]))
/// ```
@discardableResult
public func runConcurrently(
    seconds: TimeInterval = 60, _ bodies: [@Sendable () -> Void], meanwhile: () -> Void = {}
) -> Bool {
    let start = Handshake()
    let finished = Handshake()
    let group = DispatchGroup()
    for body in bodies {
        DispatchQueue.global().async(group: group) {
            start.wait(seconds: seconds)
            body()
        }
    }
    start.signal()
    meanwhile()
    group.notify(queue: .global()) { finished.signal() }
    return finished.wait(seconds: seconds)
}

// MARK: From async code

/// Suspends until `promise` has at least `handlers` handlers waiting for it, at most `seconds`
/// (see `waitUntilAwaited`); returns whether it had. For "cancel the task once it awaits".
@discardableResult
public func untilAwaited<T>(_ promise: Promise<T>, handlers: Int = 1, seconds: TimeInterval = 10) async -> Bool {
    let promise = UncheckedBox(promise)
    return await awaitCallback(seconds: seconds + 1) { done in
        DispatchQueue.global().async { done(waitUntilAwaited(promise.value, handlers: handlers, seconds: seconds)) }
    } ?? false
}

/// The values of `tasks` in their order, awaiting them at most `seconds` in all; `nil` if one
/// has not finished by then (a task that never ends fails the test instead of hanging it).
public func values<T: Sendable>(of tasks: [Task<T, Never>], seconds: TimeInterval = 120) async -> [T]? {
    await awaitCallback(seconds: seconds) { done in
        Task {
            var values: [T] = []
            for task in tasks { values.append(await task.value) }
            done(values)
        }
    }
}

/// Checks `condition` until it holds, at most `seconds`, suspending 1 ms between checks (so that
/// the tasks it waits for get a thread, even on a busy machine). Returns whether it held. The
/// `async` counterpart of `eventually`, for effects of other tasks that nothing signals.
public func untilHolds(seconds: TimeInterval = 5, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(nanoseconds: 1_000_000)  // real clock: the polling interval of the condition
    }
    return condition()
}

/// Suspends until the current task is cancelled, then throws `CancellationError`: the body of a
/// task that waits for nothing but its cancellation (a cancelled task throws at once).
public func untilCancelled() async throws -> Never {
    let once = ResumeOnce<Void>()
    await withTaskCancellationHandler {
        await withUnsafeContinuation { once.install($0) }
    } onCancel: {
        once.resume(with: ())
    }
    throw CancellationError()
}

/// Awaits the value `start` hands to its callback, at most `seconds`; `nil` if none has come by
/// then. The callback may be called on any thread, and more than once (the first call counts).
public func awaitCallback<T: Sendable>(
    seconds: TimeInterval = 10, _ start: (@escaping @Sendable (T) -> Void) -> Void
) async -> T? {
    let once = ResumeOnce<T?>()
    // DispatchWorkItem is thread-safe, though not marked Sendable.
    let giveUp = UncheckedBox(DispatchWorkItem { once.resume(with: nil) })
    return await withUnsafeContinuation { continuation in
        once.install(continuation)
        // Real clock: the deadline after which the test gives up; cancelled when the value comes.
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: giveUp.value)
        start { value in
            giveUp.value.cancel()
            once.resume(with: value)
        }
    }
}

/// Resumes a continuation once, with the first value it is given, whether that comes before or
/// after the continuation is installed.
private final class ResumeOnce<T: Sendable>: @unchecked Sendable {
    // @unchecked: the state is guarded by `lock`.
    private let lock = NSLock()
    private var continuation: UnsafeContinuation<T, Never>?
    private var early: T?
    private var resumed = false

    func install(_ continuation: UnsafeContinuation<T, Never>) {
        lock.lock()
        if resumed, let early {
            self.early = nil
            lock.unlock()
            continuation.resume(returning: early)
            return
        }
        self.continuation = continuation
        lock.unlock()
    }

    func resume(with value: T) {
        lock.lock()
        guard !resumed else {
            lock.unlock()
            return
        }
        resumed = true
        guard let continuation else {
            early = value
            lock.unlock()
            return
        }
        self.continuation = nil
        lock.unlock()
        continuation.resume(returning: value)
    }
}
