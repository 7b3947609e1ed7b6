import Dispatch
import Foundation
import PromiseCore

// Retry with backoff: run an attempt, and when it fails with an error the caller deems
// transient, wait a while and run another, up to a maximum number of attempts.
//
// One `RetryMachine` drives a retry. Its state sits behind one lock and changes only through
// events (an attempt begins, started, settled; the predicate decided; the delay timer started
// or fired; the result was cancelled or abandoned). Each event decides under the lock and
// returns the actions to run once the lock is released: call the attempt body, the predicate,
// a cancel function, settle the result, arm or stop the timer, and release closures. No user
// code and no other lock is ever entered while the machine's lock is held.
//
// Who keeps the machine alive: the running attempt (its `pipe` handler), the delay timer, a
// queue hop, and the handle behind the result's cancel function. The machine holds the running
// attempt's cancel function only while the result can still be cancelled: when the result's
// last cancel handle goes away, the handle's `deinit` tells the machine, which drops it, so an
// abandoned retry runs to its end without any cycle keeping it alive.

// MARK: - retry

/// Runs `body` until an attempt succeeds, at most `maxAttempts` times, waiting as `delay` says
/// between attempts and retrying only the errors `shouldRetry` accepts. The returned promise is
/// cancellable: cancelling it stops the attempt that is running and the wait in progress.
///
/// ```swift
/// let feed = retry(
///     maxAttempts: 5,
///     delay: .exponential(initial: 0.1, multiplier: 2, maximum: 5, jitter: 0.1),
///     if: { $0 is URLError }
/// ) { attempt in
///     URLSession.shared.dataTask(.promise, with: feedURL).validate()
/// }
/// feed.done { data, _ in show(data) }.catch { error in report(error) }
///
/// feed.cancel()   // the request running now is cancelled, no retry is started
/// ```
///
/// **Outcome.** The promise is fulfilled with the first attempt's value that succeeds. It is
/// rejected with an attempt's error when that attempt was the last one allowed, when
/// `shouldRetry` returns `false` for it, or when it is a cancellation (`error.isCancelled`:
/// cancellations are never retried). If `maxAttempts` is less than 1 or `delay` is not
/// ``RetryDelay/isValid``, it is rejected with ``RetryConfigurationError`` and `body` never runs.
///
/// **Attempts.** `body` receives the attempt number, 1 for the first, and may return a `Promise`,
/// a `Guarantee` or a ``CancellablePromise``; if it throws, the attempt failed with that error.
/// Attempts never overlap: the next one starts only after the previous one failed and the wait
/// has passed.
///
/// **Queues.** The first attempt runs synchronously on the calling thread, before `retry`
/// returns; `retry` always returns after that one attempt has started, whatever it does.
/// `shouldRetry` runs synchronously on the thread that rejected the attempt. Later attempts run
/// on `queue` when one is given; with `nil` (the default) they run where `scheduler` ran the
/// timer that ended the wait (the default scheduler: a global queue; a `TestScheduler`: the
/// thread that advances its time) or, when there is no wait, on the thread that rejected the
/// previous attempt. An attempt that failed synchronously, while it was being started, is
/// followed by the next one on `queue` or, without one, handed to `scheduler` with no delay (a
/// `DispatchScheduler`, the default included, runs it on its queue; a `TestScheduler` when
/// its time is next advanced or run), never on the thread that started it: no thread runs
/// attempts in a loop, so `retry(maxAttempts: .max)` of attempts that fail at once ("retry
/// until cancelled") returns its promise at once and stops when it is cancelled. The returned
/// promise settles on the thread that settled the last attempt (or cancelled it); handlers
/// chained to it run where their `on:` says.
///
/// **Time.** Waits are measured and timed by `scheduler`, `DispatchScheduler.global` (the
/// wall clock) by default. With a `TestScheduler` (the `PromiseTesting` library) a test drives
/// the waits with `advance(by:)` and never waits for real: see "Testing time-based code".
///
/// **Cancellation.** `cancel()` on the returned promise (or its chain) rejects it with
/// `CancellablePromiseError.cancelled` at once and, before `cancel()` returns: cancels the
/// running attempt — the whole chain of a `CancellablePromise` attempt, or the attached task
/// of a `Promise` or `Guarantee` from a producer that attaches one (`after`, PromiseFoundation's
/// URLSession and Process promises; a guarantee whose task is stopped stays pending, as with
/// `cancellize().cancel()`); a plain promise's work goes on and its result is ignored — and
/// unschedules the wait's timer (or the hand-over to `scheduler`), which releases it. No
/// attempt starts afterwards, `shouldRetry` is not asked again, and
/// `body`, `shouldRetry` and the timer are released. (An attempt whose body another thread was
/// already calling when `cancel()` ran is cancelled as soon as that body returns.) If the
/// returned promise is dropped without being cancelled, the retry runs to its end.
///
/// **Jitter.** A ``RetryDelay/exponential(initial:multiplier:maximum:jitter:)`` delay with a
/// jitter draws each wait's factor from the system's random number generator; to pin the waits
/// (in a test), pass a generator of your own with
/// ``retry(maxAttempts:delay:on:scheduler:if:using:_:)``.
///
/// - Parameters:
///   - maxAttempts: the most attempts to run, the first included; at least 1.
///   - delay: how long to wait before each retry (``RetryDelay/immediately`` by default).
///   - queue: where attempts after the first run; see "Queues" above.
///   - scheduler: the clock of the waits, and where attempts are handed over; see "Queues" and
///     "Time" above.
///   - shouldRetry: whether an attempt's error is worth another attempt (every error but a
///     cancellation, by default).
///   - body: starts attempt number `attempt` (1, 2, …) and returns its promise.
@preconcurrency public func retry<R: Thenable>(
    maxAttempts: Int,
    delay: RetryDelay = .immediately,
    on queue: DispatchQueue? = nil,
    scheduler: any PromiseScheduler = DispatchScheduler.global,
    if shouldRetry: @escaping @Sendable (Error) -> Bool = { _ in true },
    _ body: @escaping @Sendable (_ attempt: Int) throws -> R
) -> CancellablePromise<R.T> {
    retry(
        maxAttempts: maxAttempts, delay: delay, on: queue, scheduler: scheduler, if: shouldRetry,
        random: nil, lifetimeProbe: nil, body)
}

/// ``retry(maxAttempts:delay:on:scheduler:if:_:)`` drawing the jitter of its waits from
/// `generator` (a copy of it, which this retry alone uses, from its first wait to its last):
/// with a seeded generator the waits are the same on every run.
///
/// Wait `n` (the one after attempt `n` failed) is
/// `delay.seconds(after: n, using: &copy)` for the generator's copy, drawn in attempt order, so
/// a test computes the exact waits with ``RetryDelay/seconds(after:using:)`` on another copy:
///
/// ```swift
/// let scheduler = TestScheduler()
/// var expected = SeededGenerator(seed: 7)           // a generator of the test's own
/// let firstWait = delay.seconds(after: 1, using: &expected)
/// let result = retry(maxAttempts: 3, delay: delay, scheduler: scheduler, using: SeededGenerator(seed: 7)) { _ in
///     fetch()
/// }
/// // once attempt 1 failed: scheduler.nextDueTime == scheduler.now + firstWait
/// ```
///
/// Everything else (outcome, queues, time, cancellation) is as for
/// ``retry(maxAttempts:delay:on:scheduler:if:_:)``. The generator is called on the thread that
/// rejected a failed attempt, after `shouldRetry` accepted its error, under a lock of the
/// retry's own: never twice at once.
@preconcurrency public func retry<R: Thenable, G: RandomNumberGenerator & Sendable>(
    maxAttempts: Int,
    delay: RetryDelay = .immediately,
    on queue: DispatchQueue? = nil,
    scheduler: any PromiseScheduler = DispatchScheduler.global,
    if shouldRetry: @escaping @Sendable (Error) -> Bool = { _ in true },
    using generator: G,
    _ body: @escaping @Sendable (_ attempt: Int) throws -> R
) -> CancellablePromise<R.T> {
    retry(
        maxAttempts: maxAttempts, delay: delay, on: queue, scheduler: scheduler, if: shouldRetry,
        random: generator, lifetimeProbe: nil, body)
}

/// `retry`, with `lifetimeProbe` held by the retry's machinery (its state, timer and attempt
/// handlers) and released only when all of it is: tests observe with it that nothing outlives
/// a cancelled or finished retry.
package func retry<R: Thenable>(
    maxAttempts: Int,
    delay: RetryDelay = .immediately,
    on queue: DispatchQueue? = nil,
    scheduler: any PromiseScheduler = DispatchScheduler.global,
    if shouldRetry: @escaping @Sendable (Error) -> Bool = { _ in true },
    random: (any RandomNumberGenerator & Sendable)? = nil,
    lifetimeProbe: AnyObject?,
    _ body: @escaping @Sendable (_ attempt: Int) throws -> R
) -> CancellablePromise<R.T> {
    guard maxAttempts >= 1 else {
        return CancellablePromise(error: RetryConfigurationError.invalidMaxAttempts(maxAttempts))
    }
    guard delay.isValid else {
        return CancellablePromise(error: RetryConfigurationError.invalidDelay(delay))
    }
    let (promise, resolver) = Promise<R.T>.pending()
    let machine = RetryMachine<R.T>(
        maxAttempts: maxAttempts, delay: delay, queue: queue, scheduler: scheduler, resolver: resolver,
        shouldRetry: shouldRetry, random: random, lifetimeProbe: lifetimeProbe
    ) { attempt in
        let returned = try body(attempt)
        return (returned.asPromise(), stopFunction(of: returned))
    }
    let handle = RetryHandle(machine)
    let output = CancellablePromise(using: promise, cancel: { handle.cancel() })
    machine.runAttempt(1)
    return output
}

// MARK: - The machine

/// How to stop an attempt's work: cancel a cancellable promise's chain, or the task a producer
/// attached to a plain promise or guarantee. `nil` when nothing can stop it.
private func stopFunction<R: Thenable>(of attempt: R) -> (() -> Void)? {
    if let cancellable = attempt as? CancellablePromise<R.T> {
        let context = cancellable.cancelContext
        return { context.cancel() }
    }
    // A guarantee whose task is stopped stays pending for good, as `cancellize().cancel()`
    // leaves it: the retry was cancelled, so nothing waits on it any more.
    guard let task = attempt.asPromise()._attachedCancellation else { return nil }
    return task
}

/// The cancel side of a retry: what the result's cancel function holds. When the result can no
/// longer be cancelled (it settled, or its last handle went away), the function and this handle
/// are released, and the machine stops holding the running attempt's cancel function.
private final class RetryHandle<T>: @unchecked Sendable {
    // @unchecked: `machine` is immutable and internally synchronised.
    private let machine: RetryMachine<T>

    init(_ machine: RetryMachine<T>) {
        self.machine = machine
    }

    func cancel() {
        machine.cancel()
    }

    deinit {
        machine.abandon()
    }
}

private final class RetryMachine<T>: @unchecked Sendable {
    // @unchecked: mutable state is in `state`, behind its lock; the rest is immutable.
    typealias Body = RetryState<T>.Body
    typealias Predicate = (Error) -> Bool

    let maxAttempts: Int
    let delay: RetryDelay
    let queue: DispatchQueue?
    let scheduler: any PromiseScheduler
    private let state: Locked<RetryState<T>>
    /// Where the jitter of the waits comes from, drawn once per wait: the caller's generator,
    /// or (`nil`) the system's, which has no state to guard.
    private let random: Locked<any RandomNumberGenerator & Sendable>?
    /// Released with the machine (see `retry(…lifetimeProbe:…)`).
    private let lifetimeProbe: AnyObject?

    init(
        maxAttempts: Int, delay: RetryDelay, queue: DispatchQueue?, scheduler: any PromiseScheduler,
        resolver: Resolver<T>, shouldRetry: @escaping Predicate, random: (any RandomNumberGenerator & Sendable)?,
        lifetimeProbe: AnyObject?, body: @escaping Body
    ) {
        self.random = random.map { Locked($0) }
        self.scheduler = scheduler
        self.lifetimeProbe = lifetimeProbe
        self.maxAttempts = maxAttempts
        self.delay = delay
        self.queue = queue
        self.state = Locked(RetryState(resolver: resolver, body: body, shouldRetry: shouldRetry))
    }

    /// Starts attempt `attempt` on this thread. An attempt that becomes due while this one is
    /// being started (it failed synchronously, with no wait) is not started here: it is handed
    /// to `queue` or the scheduler, so no thread, the caller of `retry` included, ever runs
    /// attempts in a loop or a recursion, and `cancel()` stops a retry of attempts that fail at
    /// once between any two of them.
    func runAttempt(_ attempt: Int) {
        guard let body = state.withLock({ $0.begin(attempt) }) else { return }
        do {
            let (returned, stop) = try body(attempt)
            perform(state.withLock { $0.started(attempt, stop: stop) })
            returned.pipe { [self] result in settled(attempt, result) }
        } catch {
            settled(attempt, .rejected(error))
        }
        if let next = state.withLock({ $0.endStarting() }) {
            handOver(next)
        }
    }

    /// Starts `attempt` asynchronously: on `queue` when there is one; else on a dispatch
    /// scheduler's queue; else through the scheduler with no delay, as a wait that `cancel()`
    /// unschedules (a test scheduler runs it when the test advances its time).
    private func handOver(_ attempt: Int) {
        if let queue = queue ?? (scheduler as? DispatchScheduler)?.queue {
            queue.async { self.runAttempt(attempt) }
        } else {
            wait(0, before: attempt)
        }
    }

    /// Arms the timer of the wait before `attempt`.
    private func wait(_ seconds: TimeInterval, before attempt: Int) {
        let timer = scheduler.scheduleTimer(seconds: seconds) { self.timerFired(attempt) }
        perform(state.withLock { $0.timerStarted(timer, before: attempt) })
    }

    private func settled(_ attempt: Int, _ result: Result<T>) {
        perform(state.withLock { $0.settled(attempt, result, maxAttempts: maxAttempts) })
    }

    func cancel() {
        perform(state.withLock { $0.cancel() })
    }

    func abandon() {
        perform(state.withLock { $0.abandon() })
    }

    private func timerFired(_ attempt: Int) {
        if let queue {
            queue.async { self.runAttempt(attempt) }
        } else {
            runAttempt(attempt)
        }
    }

    /// The wait after attempt `attempt` failed, its jitter drawn from the retry's generator.
    private func nextWait(after attempt: Int) -> TimeInterval {
        guard let random else { return delay.seconds(after: attempt) }
        return random.withLock { delay.seconds(after: attempt, using: &$0) }
    }

    /// Runs what an event decided, outside the lock. Whatever `actions` holds (closures taken
    /// from the state) is released when it goes out of scope, still outside the lock.
    private func perform(_ actions: RetryActions<T>) {
        if let settle = actions.settle {
            settle.0.resolve(settle.1)
        }
        actions.stopAttempt?()
        actions.stopTimer?.cancel()
        if let decide = actions.decide {
            let again = decide.shouldRetry(decide.error)
            let wait = again ? nextWait(after: decide.attempt) : 0
            perform(
                state.withLock {
                    $0.decided(decide.attempt, error: decide.error, retry: again, wait: wait, hasQueue: queue != nil)
                })
        }
        switch actions.next {
        case nil:
            break
        case .attempt(let attempt)?:
            if let queue {
                queue.async { self.runAttempt(attempt) }
            } else {
                runAttempt(attempt)
            }
        case .wait(let attempt, let seconds)?:
            wait(seconds, before: attempt)
        }
    }
}

/// What to do once the machine's lock is released.
struct RetryActions<T> {
    enum Next: Equatable {
        /// Start this attempt now.
        case attempt(Int)
        /// Start this attempt after a wait of so many seconds.
        case wait(Int, TimeInterval)
    }

    /// Settle the result.
    var settle: (Resolver<T>, Result<T>)?
    /// Ask the predicate whether this attempt's error is worth a retry.
    var decide: (attempt: Int, error: Error, shouldRetry: (Error) -> Bool)?
    /// Stop the running attempt's work.
    var stopAttempt: (() -> Void)?
    /// Stop the wait.
    var stopTimer: (any ScheduledWork)?
    /// What comes next.
    var next: Next?
    /// Closures taken out of the state, released with the actions (outside the lock).
    var released: [Any] = []
}

/// The state of one retry, a value: each event decides (under the machine's lock) and returns
/// the actions to run after it, so the rules can be checked by driving the events directly.
struct RetryState<T> {
    /// Starts an attempt: its promise, and how to stop its work.
    typealias Body = (_ attempt: Int) throws -> (promise: Promise<T>, stop: (() -> Void)?)

    enum Phase: Equatable {
        /// Attempt `n` is due: starts when it begins (now, after a queue hop, or when the
        /// timer fires).
        case due(Int)
        /// Attempt `n` is running.
        case running(Int)
        /// Attempt `n` failed; the predicate is deciding whether to retry.
        case deciding(Int)
        /// Settled or cancelled: nothing happens any more.
        case finished
    }

    var phase = Phase.due(1)
    /// Released when finished.
    var resolver: Resolver<T>?
    var body: Body?
    var shouldRetry: ((Error) -> Bool)?
    /// Stops the running attempt; held only while the result can be cancelled.
    var stopAttempt: (() -> Void)?
    /// The wait in progress.
    var timer: (any ScheduledWork)?
    /// `false` once the result's last cancel handle went away: nothing can cancel any more.
    var isCancellable = true
    /// The result was cancelled.
    var isCancelled = false
    /// A thread is starting an attempt (between `begin` and `endStarting`).
    var isStarting = false
    /// An attempt that became due, with no wait, while a thread was starting one: that thread
    /// hands it to a queue once it is done starting.
    var deferred: Int?

    init(resolver: Resolver<T>, body: @escaping Body, shouldRetry: @escaping (Error) -> Bool) {
        self.resolver = resolver
        self.body = body
        self.shouldRetry = shouldRetry
    }

    /// Attempt `attempt` is about to start: returns its body, or `nil` if it is no longer due
    /// (cancelled, or started by another thread).
    mutating func begin(_ attempt: Int) -> Body? {
        guard phase == .due(attempt), let body else { return nil }
        phase = .running(attempt)
        isStarting = true
        // The timer has fired (or is being overtaken): it is done with.
        timer = nil
        return body
    }

    /// The thread that started an attempt is done starting it: returns an attempt that became
    /// due meanwhile, for that thread to start.
    mutating func endStarting() -> Int? {
        isStarting = false
        defer { deferred = nil }
        return deferred
    }

    /// Attempt `attempt`'s body returned; `stop` stops its work.
    mutating func started(_ attempt: Int, stop: (() -> Void)?) -> RetryActions<T> {
        var actions = RetryActions<T>()
        if isCancelled {
            // Cancelled while the body ran: stop what it started.
            actions.stopAttempt = stop
        } else if phase == .running(attempt), isCancellable {
            stopAttempt = stop
        } else {
            actions.released.append(stop as Any)
        }
        return actions
    }

    /// Attempt `attempt` settled with `result`.
    mutating func settled(_ attempt: Int, _ result: Result<T>, maxAttempts: Int) -> RetryActions<T> {
        var actions = RetryActions<T>()
        guard phase == .running(attempt) else { return actions }
        actions.released.append(stopAttempt as Any)
        stopAttempt = nil
        switch result {
        case .fulfilled:
            finish(with: result, into: &actions)
        case .rejected(let error):
            if error.isCancelled || attempt >= maxAttempts {
                finish(with: result, into: &actions)
            } else if let shouldRetry {
                phase = .deciding(attempt)
                actions.decide = (attempt, error, shouldRetry)
            }
        }
        return actions
    }

    /// The predicate answered for attempt `attempt`'s `error`; `wait` is the delay before the
    /// next attempt.
    mutating func decided(
        _ attempt: Int, error: Error, retry: Bool, wait: TimeInterval, hasQueue: Bool
    ) -> RetryActions<T> {
        var actions = RetryActions<T>()
        guard phase == .deciding(attempt) else { return actions }
        guard retry else {
            finish(with: .rejected(error), into: &actions)
            return actions
        }
        let next = attempt + 1
        phase = .due(next)
        if wait > 0 {
            actions.next = .wait(next, wait)
        } else if isStarting, !hasQueue {
            // The thread starting an attempt right now hands this one to a queue after it.
            deferred = next
        } else {
            actions.next = .attempt(next)
        }
        return actions
    }

    /// The timer of the wait before `attempt` was made (and armed).
    mutating func timerStarted(_ timer: any ScheduledWork, before attempt: Int) -> RetryActions<T> {
        var actions = RetryActions<T>()
        if phase == .due(attempt), self.timer == nil {
            self.timer = timer
        } else {
            // Cancelled meanwhile (or it fired already): stop it.
            actions.stopTimer = timer
        }
        return actions
    }

    /// The result was cancelled: stop everything, reject, release.
    mutating func cancel() -> RetryActions<T> {
        var actions = RetryActions<T>()
        guard phase != .finished else { return actions }
        isCancelled = true
        actions.stopAttempt = stopAttempt
        stopAttempt = nil
        actions.stopTimer = timer
        timer = nil
        finish(with: .rejected(CancellablePromiseError.cancelled), into: &actions)
        return actions
    }

    /// The result can no longer be cancelled: stop holding the running attempt's cancel
    /// function (it may hold the attempt's chain, which holds this retry).
    mutating func abandon() -> RetryActions<T> {
        var actions = RetryActions<T>()
        isCancellable = false
        actions.released.append(stopAttempt as Any)
        stopAttempt = nil
        return actions
    }

    private mutating func finish(with result: Result<T>, into actions: inout RetryActions<T>) {
        phase = .finished
        if let resolver { actions.settle = (resolver, result) }
        resolver = nil
        actions.released.append(body as Any)
        actions.released.append(shouldRetry as Any)
        body = nil
        shouldRetry = nil
        deferred = nil
    }
}
