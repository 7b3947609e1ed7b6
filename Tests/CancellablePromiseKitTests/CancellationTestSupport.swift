import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// Stand-ins for the Apple-only pieces of the documented examples (URLSession, CLLocationManager,
// an HTTP client, UIKit views): tasks the test finishes itself, whose cancellation it can observe.

/// The error a `FakeTask` rejects its promise with when it is cancelled.
struct FakeTaskCancelled: Error, Equatable {}

/// An asynchronous task the test completes by hand. Its promise carries the task
/// (`attachedToPromise`), as PromiseFoundation's producers do, so `cancellize()` of that promise
/// cancels the task.
final class FakeTask<T>: @unchecked Sendable {
    let promise: Promise<T>
    private let resolver: Resolver<T>
    let cancelCount = Counter()

    /// `attachedToPromise: false` makes a task nothing can cancel through the promise (a plain
    /// `Promise` producer).
    init(attachedToPromise: Bool = true) {
        (promise, resolver) = Promise<T>.pending()
        if attachedToPromise {
            promise.attachCancellation { [weak self] in self?.cancel() }
        }
    }

    var isCancelled: Bool { cancelCount.value > 0 }

    func succeed(_ value: T) { resolver.fulfill(value) }
    func fail(_ error: Error) { resolver.reject(error) }

    /// What the task does when cancelled: stop, and reject with its own error.
    func cancel() {
        cancelCount.increment()
        resolver.reject(FakeTaskCancelled())
    }
}

/// A backend whose requests are `FakeTask`s, recorded in order so tests can finish them.
final class FakeBackend: @unchecked Sendable {
    private let lock = NSLock()
    private var started: [String: AnyObject] = [:]
    private var order: [String] = []
    /// Whether the promises produced carry their task (cancellable through `cancellize()`).
    let tasksAttached: Bool

    init(tasksAttached: Bool = true) {
        self.tasksAttached = tasksAttached
    }

    func start<T>(_ name: String, _ type: T.Type = T.self, attached: Bool? = nil) -> Promise<T> {
        let task = FakeTask<T>(attachedToPromise: attached ?? tasksAttached)
        lock.withLock {
            started[name] = task
            order.append(name)
        }
        return task.promise
    }

    /// The task started under `name`; fails the test if there is none.
    func task<T>(
        _ name: String, _ type: T.Type = T.self, file: StaticString = #filePath, line: UInt = #line
    )
        -> FakeTask<T>
    {
        let task = lock.withLock { started[name] } as? FakeTask<T>
        guard let task else {
            XCTFail("task \(name) was not started", file: file, line: line)
            return FakeTask<T>()
        }
        return task
    }

    func wasStarted(_ name: String) -> Bool { lock.withLock { started[name] != nil } }
    var startedNames: [String] { lock.withLock { order } }
}

/// An object that reports its deallocation, to observe leaks: capture one in a closure to see
/// the closure released.
final class DeinitProbe: @unchecked Sendable {
    let onDeinit: @Sendable () -> Void
    init(_ onDeinit: @escaping @Sendable () -> Void = {}) { self.onDeinit = onDeinit }
    deinit { onDeinit() }
    func touch() {}
    /// `touch()`, returning `true`: captures the probe in a `map` transform.
    func touchedTrue() -> Bool { true }
}

/// A pending cancellable promise made from a resolver body, that body's resolver, and how many
/// times the promise's cancel closure has run.
func pendingPromiseCountingCancels() -> (promise: CancellablePromise<Int>, resolver: Resolver<Int>, cancels: Counter) {
    let cancels = Counter()
    var kept: Resolver<Int>?
    let promise = CancellablePromise<Int> { resolver in
        kept = resolver
        return { cancels.increment() }
    }
    return (promise, kept!, cancels)
}

/// Two pending cancellable promises whose resolvers are dropped: nothing but a cancel settles
/// them.
func twoPendingCancellablePromises() -> (CancellablePromise<Int>, CancellablePromise<Int>) {
    (CancellablePromise<Int>.pending().promise, CancellablePromise<Int>.pending().promise)
}

/// `cancellable`, cancelled; checks that it rejected with `.cancelled`.
func cancelled<T>(_ cancellable: CancellablePromise<T>, line: UInt = #line) -> CancellablePromise<T> {
    cancellable.cancel()
    XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled, line: line)
    return cancellable
}

/// Cancels `cancellable`, which stands on a timer of `scheduler`, and checks that the cancel
/// unscheduled that timer: `outcome` holds right after the cancel and still holds once the
/// timer's time has passed.
func cancelStopsTheTimer<T>(
    _ cancellable: CancellablePromise<T>, of scheduler: TestScheduler, file: StaticString = #filePath,
    line: UInt = #line, outcome: () -> Void
) {
    cancellable.cancel()
    outcome()
    XCTAssertEqual(scheduler.pendingCount, 0, "the timer was unscheduled", file: file, line: line)
    scheduler.advance(by: 1)
    outcome()
}

/// Wraps a pending promise and its resolver, with a spy for its task, in the cancellable promise
/// `make` builds, and cancels that: checks that the task was cancelled once and that the
/// cancellation rejected both the wrapper and the promise.
func cancelCancelsTheTaskAndRejectsThePromise(
    file: StaticString = #filePath, line: UInt = #line,
    _ make: (TokenCancellableSpy, Promise<Int>, Resolver<Int>) -> CancellablePromise<Int>
) {
    let task = TokenCancellableSpy()
    let (promise, resolver) = Promise<Int>.pending()
    let cancellable = make(task, promise, resolver)
    cancellable.cancel()
    XCTAssertEqual(task.cancelCount, 1, file: file, line: line)
    XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled, file: file, line: line)
    XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled, file: file, line: line)
}

extension XCTestCase {
    /// Runs `work` on a background thread and fails if it does not finish within `timeout`
    /// seconds (a deadlock), instead of hanging the test run.
    func runWithoutDeadlock(timeout: TimeInterval = 10, _ work: @escaping @Sendable () -> Void) {
        let finished = Handshake()
        DispatchQueue.global().async {
            work()
            finished.signal()
        }
        XCTAssertTrue(finished.wait(seconds: timeout))
    }

    /// Lets the main queue run the work queued on it, and the work that this work queues there in
    /// turn, up to `hops` steps deep: each pass queues a marker behind what is queued and waits for
    /// it (the main queue is serial, so the marker runs after everything queued before it). A
    /// synchronisation point, not a delay: call it before checking that a handler running on the
    /// main queue (the default queue of every step) did *not* run.
    func drainMainQueue(hops: Int = 10) {
        for _ in 0..<hops {
            let done = Handshake()
            DispatchQueue.main.async { done.signal() }
            XCTAssertTrue(done.wait(seconds: 10))
        }
    }
}
