import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// `retry(maxAttempts:delay:on:scheduler:if:_:)`: attempts, delays, the predicate, bad input, and
// what cancelling the result does to the running attempt and to a pending delay. Delays and the
// hand-over after a synchronous failure run on virtual time (a `TestScheduler`).

/// A transient failure of attempt `attempt`.
private struct Flaky: Error, Equatable {
    let attempt: Int
}

/// A failure the predicate refuses to retry.
private struct Fatal: Error, Equatable {}

/// Attempts started by hand: each attempt is a pending promise the test settles.
private final class Attempts<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var resolvers: [Resolver<T>] = []
    private var numbers: [Int] = []
    private var cancels = 0

    /// The body of a retry whose attempts are cancellable promises.
    func cancellable(_ attempt: Int) -> CancellablePromise<T> {
        CancellablePromise<T> { resolver in
            lock.withLock {
                resolvers.append(resolver)
                numbers.append(attempt)
            }
            return { self.lock.withLock { self.cancels += 1 } }
        }
    }

    /// The body of a retry whose attempts are plain promises.
    func plain(_ attempt: Int) -> Promise<T> {
        let (promise, resolver) = Promise<T>.pending()
        lock.withLock {
            resolvers.append(resolver)
            numbers.append(attempt)
        }
        return promise
    }

    var started: [Int] { lock.withLock { numbers } }
    var cancelCount: Int { lock.withLock { cancels } }
    func resolver(_ attempt: Int) -> Resolver<T> { lock.withLock { resolvers[attempt - 1] } }
}

/// Attempts that fail at once, counting those that ran on the thread that called `retry` before
/// `retry` returned. A safety valve keeps a `retry` that loops on its caller from looping for
/// ever: the 100th such attempt fails with an error the tests' predicate refuses.
private final class SynchronousFailures: @unchecked Sendable {
    private let lock = NSLock()
    private var caller: pthread_t?
    private var returned = false
    private var attempts = 0
    private var onCallerBeforeReturn = 0

    /// Call on the thread that is about to call `retry`.
    func retryStarts() { lock.withLock { caller = pthread_self() } }
    /// Call as soon as `retry` returned.
    func retryReturned() { lock.withLock { returned = true } }

    var count: Int { lock.withLock { attempts } }
    var countOnCallerBeforeReturn: Int { lock.withLock { onCallerBeforeReturn } }

    /// The body of the retry: every attempt fails at once with a `Flaky` error.
    func attempt(_ attempt: Int) -> Promise<Int> {
        let valve = lock.withLock { () -> Bool in
            attempts += 1
            guard !returned, let caller, pthread_equal(caller, pthread_self()) != 0 else { return false }
            onCallerBeforeReturn += 1
            return onCallerBeforeReturn >= 100
        }
        return Promise(error: valve ? Fatal() : Flaky(attempt: attempt) as Error)
    }
}

final class RetryTests: XCTestCase {
    // MARK: Outcomes

    func testSucceedsOnTheThirdAttempt() {
        let attempts = Attempts<String>()
        let result = retry(maxAttempts: 5) { attempt in attempts.cancellable(attempt) }
        XCTAssertEqual(attempts.started, [1], "the first attempt starts at once")
        attempts.resolver(1).reject(Flaky(attempt: 1))
        XCTAssertEqual(attempts.started, [1, 2], "no delay: the second attempt follows the first failure")
        attempts.resolver(2).reject(Flaky(attempt: 2))
        attempts.resolver(3).fulfill("third time lucky")
        XCTAssertEqual(result.value, "third time lucky")
        XCTAssertEqual(attempts.started, [1, 2, 3])
        XCTAssertEqual(attempts.cancelCount, 0)
    }

    func testSucceedsOnTheThirdAttemptWithExponentialBackoff() {
        let scheduler = TestScheduler()
        let started = Recorder<TimeInterval>()
        let result = retry(
            maxAttempts: 5, delay: .exponential(initial: 0.02, multiplier: 2, maximum: 1), scheduler: scheduler
        ) { attempt -> Promise<Int> in
            started.append(scheduler.now)
            return attempt < 3 ? Promise(error: Flaky(attempt: attempt)) : .value(attempt)
        }
        XCTAssertEqual(started.all, [0])
        scheduler.advance(by: 0.019)
        XCTAssertEqual(started.all, [0], "not before the first wait is over")
        scheduler.advance(by: 0.001)
        XCTAssertEqual(started.all, [0, 0.02], "20 ms after the 1st failure")
        scheduler.advance(by: 0.04)
        XCTAssertEqual(started.all, [0, 0.02, 0.06], "40 ms after the 2nd failure")
        XCTAssertEqual(result.value, 3)
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    // Real time: the default scheduler is the wall clock.
    func testBackoffOnTheDefaultSchedulerWaitsForReal() {
        let start = DispatchTime.now()
        let result = retry(maxAttempts: 3, delay: .fixed(0.02)) { attempt -> Promise<Int> in
            attempt < 2 ? Promise(error: Flaky(attempt: attempt)) : .value(attempt)
        }
        XCTAssertEqual(waitForResult(result)?.fulfilledValue, 2)
        XCTAssertGreaterThanOrEqual(Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9, 0.02)
    }

    func testGivesUpAfterMaxAttemptsWithTheLastError() {
        let scheduler = TestScheduler()
        let asked = Locked<[Int]>([])
        let result = retry(
            maxAttempts: 4, scheduler: scheduler,
            if: { error in
                asked.withLock { $0.append((error as? Flaky)?.attempt ?? -1) }
                return true
            }
        ) { attempt -> Promise<Int> in
            Promise(error: Flaky(attempt: attempt))
        }
        XCTAssertTrue(result.isPending, "a synchronous failure hands the next attempt to the scheduler")
        scheduler.run()
        XCTAssertEqual(result.error as? Flaky, Flaky(attempt: 4), "rejected with the last attempt's error")
        XCTAssertEqual(asked.withLock { $0 }, [1, 2, 3], "not asked about the last attempt")
    }

    func testAThrowingBodyIsAFailedAttempt() {
        let scheduler = TestScheduler()
        let calls = Counter()
        let result = retry(maxAttempts: 3, scheduler: scheduler) { attempt -> Promise<Int> in
            calls.increment()
            if attempt < 3 { throw Flaky(attempt: attempt) }
            return .value(42)
        }
        scheduler.run()
        XCTAssertEqual(result.value, 42)
        XCTAssertEqual(calls.value, 3)
    }

    func testAnErrorThePredicateRefusesIsNotRetried() {
        let attempts = Attempts<Int>()
        let result = retry(maxAttempts: 5, if: { $0 is Flaky }) { attempt in attempts.plain(attempt) }
        attempts.resolver(1).reject(Flaky(attempt: 1))
        attempts.resolver(2).reject(Fatal())
        XCTAssertEqual(result.error as? Fatal, Fatal())
        XCTAssertEqual(attempts.started, [1, 2])
    }

    func testACancellationIsNeverRetried() {
        for cancellation in [CancellablePromiseError.cancelled as Error, URLError(.cancelled), PMKError.cancelled] {
            let asked = Flag()
            let calls = Counter()
            let result = retry(
                maxAttempts: 5,
                if: { _ in
                    asked.raise()
                    return true
                }
            ) { _ -> Promise<Int> in
                calls.increment()
                return Promise(error: cancellation)
            }
            XCTAssertTrue(result.error?.isCancelled ?? false, "\(cancellation)")
            XCTAssertEqual(calls.value, 1, "\(cancellation) is not retried")
            XCTAssertFalse(asked.value, "the predicate is not asked about \(cancellation)")
            XCTAssertFalse(result.isCancelled, "the retry itself was not cancelled")
        }
    }

    func testAGuaranteeAttemptFulfils() {
        let result = retry(maxAttempts: 2) { _ in Guarantee.value("fine") }
        XCTAssertEqual(result.value, "fine")
    }

    /// Cancelling the retry unschedules the timer attached to a running `Guarantee` attempt, as it
    /// does a `Promise` attempt's: nothing is left on the scheduler.
    func testCancellingUnschedulesTheTimerOfAGuaranteeAttempt() {
        let scheduler = TestScheduler()
        let result = retry(maxAttempts: 2, scheduler: scheduler) { _ in after(seconds: 3, scheduler: scheduler) }
        XCTAssertEqual(scheduler.pendingCount, 1, "the attempt's timer")
        result.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0, "the attempt's timer was unscheduled")
        XCTAssertTrue(result.error?.isCancelled ?? false)
        scheduler.advance(by: 10)
        XCTAssertEqual(scheduler.pendingCount, 0, "no attempt started afterwards")
    }

    /// A `Guarantee` attempt with a timer still fulfils the retry when it is not cancelled.
    func testAGuaranteeAttemptWithATimerFulfilsWhenItsTimeComes() {
        let scheduler = TestScheduler()
        let result = retry(maxAttempts: 2, scheduler: scheduler) { _ in after(seconds: 3, scheduler: scheduler) }
        scheduler.advance(by: 3)
        XCTAssertTrue(result.isFulfilled)
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    // MARK: Bad input

    func testFewerThanOneAttemptIsAClearErrorAndRunsNothing() {
        for count in [0, -1, Int.min] {
            let ran = Flag()
            let result = retry(maxAttempts: count) { _ -> Promise<Int> in
                ran.raise()
                return .value(1)
            }
            XCTAssertEqual(result.error as? RetryConfigurationError, .invalidMaxAttempts(count))
            XCTAssertFalse(ran.value)
        }
    }

    func testAnImpossibleDelayIsAClearErrorAndRunsNothing() {
        let bad: [RetryDelay] = [
            .fixed(-1), .fixed(.nan), .fixed(.infinity),
            .exponential(initial: -0.1), .exponential(initial: .nan), .exponential(initial: 0.1, multiplier: 0.5),
            .exponential(initial: 0.1, multiplier: -2), .exponential(initial: 0.1, maximum: -1),
            .exponential(initial: 0.1, maximum: .nan), .exponential(initial: 0.1, jitter: -0.1),
            .exponential(initial: 0.1, jitter: 1.5),
        ]
        for delay in bad {
            XCTAssertFalse(delay.isValid, "\(delay)")
            let ran = Flag()
            let result = retry(maxAttempts: 3, delay: delay) { _ -> Promise<Int> in
                ran.raise()
                return .value(1)
            }
            // (NaN is not equal to itself: compare the descriptions.)
            guard case .invalidDelay(let reported)? = result.error as? RetryConfigurationError else {
                XCTFail("\(delay): rejected with \(String(describing: result.error))")
                continue
            }
            XCTAssertEqual(reported.description, delay.description)
            XCTAssertFalse(ran.value, "\(delay)")
            XCTAssertFalse("\(result.error!)".isEmpty)
        }
        XCTAssertTrue(RetryDelay.exponential(initial: 0, multiplier: 1, maximum: .infinity, jitter: 1).isValid)
        XCTAssertTrue(RetryDelay.fixed(0).isValid)
    }

    // MARK: Delay policy

    func testExponentialDelaysGrowUpToTheCap() {
        let delay = RetryDelay.exponential(initial: 0.1, multiplier: 2, maximum: 0.5)
        let waits = (1...6).map { delay.seconds(after: $0) }
        for (wait, expected) in zip(waits, [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]) {
            XCTAssertEqual(wait, expected, accuracy: 1e-12)
        }
        XCTAssertEqual(RetryDelay.fixed(0.3).seconds(after: 7), 0.3)
        XCTAssertEqual(RetryDelay.immediately.seconds(after: 1), 0)
        XCTAssertEqual(RetryDelay.exponential(initial: 1).seconds(after: 10_000), .infinity, "no cap: unbounded")
    }

    func testJitterStaysWithinItsSpreadAndUnderTheCap() {
        let delay = RetryDelay.exponential(initial: 0.1, multiplier: 2, maximum: 0.5, jitter: 0.2)
        var low = Double.infinity
        var high = 0.0
        for _ in 0..<2_000 {
            let wait = delay.seconds(after: 2)  // 0.2 ± 20%
            low = min(low, wait)
            high = max(high, wait)
            XCTAssertLessThanOrEqual(delay.seconds(after: 5), 0.5, "never above the cap")
        }
        XCTAssertGreaterThanOrEqual(low, 0.16 - 1e-12)
        XCTAssertLessThanOrEqual(high, 0.24 + 1e-12)
        XCTAssertLessThan(low, 0.19, "the jitter spreads the waits")
        XCTAssertGreaterThan(high, 0.21, "the jitter spreads the waits")
    }

    // MARK: Cancellation

    func testCancelDuringAnAttemptCancelsItAndStartsNoOther() {
        let attempts = Attempts<Int>()
        weak var machinery: DeinitProbe?
        let released = Handshake()
        var result: CancellablePromise<Int>?
        do {
            let probe = DeinitProbe { released.signal() }
            machinery = probe
            result = retry(maxAttempts: 5, lifetimeProbe: probe) { attempt in attempts.cancellable(attempt) }
        }
        attempts.resolver(1).reject(Flaky(attempt: 1))
        XCTAssertEqual(attempts.started, [1, 2])

        result!.cancel()
        XCTAssertEqual(result!.error as? CancellablePromiseError, .cancelled, "rejected before cancel() returns")
        XCTAssertEqual(attempts.cancelCount, 1, "the running attempt's cancel closure ran once")
        XCTAssertNil(machinery, "nothing of the retry is left")
        XCTAssertTrue(released.wait(seconds: 1))

        // The attempt's own outcome, coming late, changes nothing and starts nothing.
        attempts.resolver(2).reject(Flaky(attempt: 2))
        XCTAssertEqual(attempts.started, [1, 2])
        XCTAssertEqual(result!.error as? CancellablePromiseError, .cancelled)
    }

    func testCancelDuringAnAttemptStopsAPlainPromisesAttachedTask() {
        let backend = FakeBackend()
        let count = Counter()
        let result = retry(maxAttempts: 3) { _ -> Promise<Int> in
            let attempt = count.increment()
            return backend.start("attempt \(attempt)")
        }
        result.cancel()
        XCTAssertEqual(backend.task("attempt 1", Int.self).cancelCount.value, 1)
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(count.value, 1, "its rejection (FakeTaskCancelled) is not retried")
    }

    func testCancelDuringADelayStopsTheTimerAndStartsNoOtherAttempt() {
        let scheduler = TestScheduler()
        let attempts = Attempts<Int>()
        weak var machinery: DeinitProbe?
        var result: CancellablePromise<Int>?
        do {
            let probe = DeinitProbe()
            machinery = probe
            result = retry(maxAttempts: 5, delay: .fixed(0.2), scheduler: scheduler, lifetimeProbe: probe) {
                attempt in attempts.cancellable(attempt)
            }
        }
        // Rejecting on this thread decides and arms the timer before `reject` returns.
        attempts.resolver(1).reject(Flaky(attempt: 1))
        XCTAssertNotNil(machinery, "the timer holds the retry while it waits")
        XCTAssertEqual(scheduler.pendingCount, 1)

        result!.cancel()
        XCTAssertEqual(result!.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(scheduler.pendingCount, 0, "the wait was unscheduled")
        XCTAssertNil(machinery, "the timer was stopped and released everything at once")
        scheduler.advance(by: 1)
        XCTAssertEqual(attempts.started, [1])
        XCTAssertEqual(attempts.cancelCount, 0, "the failed attempt had settled: nothing to cancel")
    }

    // Real time: the default scheduler's dispatch timer, cancelled, releases the retry at once.
    func testCancelDuringADelayOnTheDefaultSchedulerReleasesEverythingAtOnce() {
        weak var machinery: DeinitProbe?
        var result: CancellablePromise<Int>?
        do {
            let probe = DeinitProbe()
            machinery = probe
            result = retry(maxAttempts: 5, delay: .fixed(600), lifetimeProbe: probe) { attempt -> Promise<Int> in
                Promise(error: Flaky(attempt: attempt))
            }
        }
        XCTAssertNotNil(machinery, "the 600 s wait holds the retry")
        result!.cancel()
        XCTAssertNil(machinery, "the dispatch timer was cancelled and released the retry")
        XCTAssertEqual(result!.error as? CancellablePromiseError, .cancelled)
    }

    func testCancelWhileTheBodyRunsCancelsWhatItReturns() {
        let (first, firstResolver) = Promise<Int>.pending()
        let cancelled = Counter()
        let second = CancellablePromise<Int> { _ in { cancelled.increment() } }
        let resultBox = SendableBox<CancellablePromise<Int>?>(nil)
        let result = retry(maxAttempts: 3) { attempt -> CancellablePromise<Int> in
            if attempt == 1 { return first.cancellize() }
            resultBox.value?.cancel()  // cancelled while this body runs
            return second
        }
        resultBox.value = result
        firstResolver.reject(Flaky(attempt: 1))
        XCTAssertEqual(cancelled.value, 1, "what the body returned is cancelled once it has returned")
        XCTAssertTrue(second.isCancelled)
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
    }

    func testCancelDuringThePredicateStartsNoOtherAttempt() {
        let attempts = Attempts<Int>()
        let resultBox = SendableBox<CancellablePromise<Int>?>(nil)
        let result = retry(
            maxAttempts: 5,
            if: { _ in
                resultBox.value?.cancel()
                return true
            }
        ) { attempt in attempts.cancellable(attempt) }
        resultBox.value = result
        attempts.resolver(1).reject(Flaky(attempt: 1))
        XCTAssertEqual(attempts.started, [1])
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellingTheChainAfterTheRetryCancelsTheRetry() {
        let attempts = Attempts<Int>()
        let tail = retry(maxAttempts: 3) { attempt in attempts.cancellable(attempt) }.map(on: nil) { $0 + 1 }
        tail.cancel()
        XCTAssertEqual(attempts.cancelCount, 1)
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: Queues

    func testLaterAttemptsRunOnTheGivenQueue() {
        let key = DispatchSpecificKey<String>()
        let queue = DispatchQueue(label: "retry-attempts")
        queue.setSpecific(key: key, value: "retry-attempts")
        let onQueue = Locked<[Bool]>([])
        let done = Handshake()
        retry(maxAttempts: 3, on: queue) { attempt -> Promise<Int> in
            onQueue.withLock { $0.append(DispatchQueue.getSpecific(key: key) != nil) }
            return attempt < 3 ? Promise(error: Flaky(attempt: attempt)) : .value(attempt)
        }.done(on: nil) { _ in done.signal() }.cauterize()
        XCTAssertTrue(done.wait(seconds: 5))
        XCTAssertEqual(
            onQueue.withLock { $0 }, [false, true, true], "the first runs in `retry`, the others on the queue")
    }

    // MARK: Lifetime

    func testAnAbandonedRetryRunsToItsEnd() {
        let attempts = Attempts<Int>()
        weak var machinery: DeinitProbe?
        do {
            let probe = DeinitProbe()
            machinery = probe
            _ = retry(maxAttempts: 3, lifetimeProbe: probe) { attempt in attempts.cancellable(attempt) }
        }
        XCTAssertNotNil(machinery, "the running attempt keeps the retry going")
        attempts.resolver(1).reject(Flaky(attempt: 1))
        XCTAssertEqual(attempts.started, [1, 2], "it goes on retrying with nobody holding the result")
        attempts.resolver(2).fulfill(7)
        XCTAssertNil(machinery, "released once finished")
        XCTAssertEqual(attempts.cancelCount, 0)
    }

    func testAnAbandonedRetryWhoseAttemptCanNeverSettleIsFreed() {
        weak var machinery: DeinitProbe?
        let attempt = SendableBox(WeakRef())
        do {
            let probe = DeinitProbe()
            machinery = probe
            _ = retry(maxAttempts: 3, lifetimeProbe: probe) { _ -> CancellablePromise<Int> in
                // The resolver is dropped: nothing can ever settle this attempt.
                let running = CancellablePromise<Int> { _ in {} }
                attempt.value = WeakRef(object: running)
                return running
            }
        }
        XCTAssertNil(attempt.value.object, "no cycle keeps the abandoned attempt")
        XCTAssertNil(machinery, "no cycle keeps the abandoned retry")
    }

    func testAFinishedRetryHoldsNothing() {
        let scheduler = TestScheduler()
        weak var machinery: DeinitProbe?
        var result: CancellablePromise<Int>?
        do {
            let probe = DeinitProbe()
            machinery = probe
            result = retry(maxAttempts: 3, scheduler: scheduler, lifetimeProbe: probe) { attempt -> Promise<Int> in
                attempt < 2 ? Promise(error: Flaky(attempt: attempt)) : .value(attempt)
            }
        }
        scheduler.run()
        XCTAssertEqual(result?.value, 2)
        XCTAssertNil(machinery)
    }

    func testManySynchronousFailuresLoopWithoutRecursing() {
        let scheduler = TestScheduler()
        let calls = Counter()
        let result = retry(maxAttempts: 50_000, scheduler: scheduler) { attempt -> Promise<Int> in
            calls.increment()
            throw Flaky(attempt: attempt)
        }
        XCTAssertEqual(calls.value, 1, "retry returns after the first attempt")
        scheduler.run()  // one hand-over at a time, each from the scheduler's loop: no recursion
        XCTAssertEqual(result.error as? Flaky, Flaky(attempt: 50_000))
        XCTAssertEqual(calls.value, 50_000)
    }

    // MARK: Attempts that fail at once

    func testRetryUntilCancelledReturnsAfterOneAttemptAndStopsWhenCancelled() {
        let failures = SynchronousFailures()
        let freed = Flag()
        failures.retryStarts()
        let result = retry(maxAttempts: .max, if: { $0 is Flaky }, lifetimeProbe: DeinitProbe { freed.raise() }) {
            failures.attempt($0)
        }
        failures.retryReturned()
        XCTAssertEqual(failures.countOnCallerBeforeReturn, 1, "only the first attempt runs before `retry` returns")
        XCTAssertTrue(eventually { failures.count >= 100 }, "the attempts go on, off the caller's thread")
        result.cancel()
        let atCancel = failures.count
        XCTAssertEqual(waitForResult(result)?.rejectedError as? CancellablePromiseError, .cancelled)
        // Once the machinery is freed, no attempt can ever start again.
        XCTAssertTrue(eventually { freed.value }, "the retry's machinery is freed once cancelled")
        XCTAssertLessThanOrEqual(failures.count, atCancel + 1, "at most the attempt under way when `cancel()` ran")
        XCTAssertEqual(failures.countOnCallerBeforeReturn, 1)
    }

    func testAMillionAttemptsThatFailAtOnceLetRetryReturnAfterTheFirst() {
        let failures = SynchronousFailures()
        failures.retryStarts()
        let result = retry(maxAttempts: 1_000_000, if: { $0 is Flaky }) { failures.attempt($0) }
        failures.retryReturned()
        XCTAssertEqual(failures.countOnCallerBeforeReturn, 1, "only the first attempt runs before `retry` returns")
        XCTAssertLessThan(failures.count, 1_000_000, "`retry` returned before running every attempt")
        result.cancel()
        XCTAssertEqual(waitForResult(result)?.rejectedError as? CancellablePromiseError, .cancelled)
    }

    func testCancelRacingAttemptsThatFailAtOnceFromSeveralThreadsSettlesOnceAndStopsThem() {
        let rounds = 200
        let failures = (0..<rounds).map { _ in SynchronousFailures() }
        let settled = (0..<rounds).map { _ in Counter() }
        let freed = Counter()
        let results = Locked<[CancellablePromise<Int>]>([])
        let atCancel = Locked<[Int]>([])
        runWithoutDeadlock(timeout: 60) {
            for round in 0..<rounds {
                failures[round].retryStarts()
                let result = retry(
                    maxAttempts: .max, if: { $0 is Flaky }, lifetimeProbe: DeinitProbe { freed.increment() }
                ) { failures[round].attempt($0) }
                failures[round].retryReturned()
                result.pipe { _ in settled[round].increment() }
                // Let a few attempts fail on other threads first, in most rounds.
                while failures[round].count < round % 8 {}
                DispatchQueue.concurrentPerform(iterations: 4) { _ in result.cancel() }
                atCancel.withLock { $0.append(failures[round].count) }
                results.withLock { $0.append(result) }
            }
        }
        // Once every retry's machinery is freed, no attempt can ever start again.
        XCTAssertTrue(eventually(seconds: 30) { freed.value == rounds }, "every cancelled retry is freed")
        let cancelled = atCancel.withLock { $0 }
        XCTAssertEqual(cancelled.count, rounds)
        for (round, atCancel) in cancelled.enumerated() {
            XCTAssertEqual(failures[round].countOnCallerBeforeReturn, 1, "round \(round): one attempt before returning")
            XCTAssertLessThanOrEqual(failures[round].count, atCancel + 1, "round \(round): at most one under way")
            XCTAssertEqual(settled[round].value, 1, "round \(round): settles exactly once")
        }
        for result in results.withLock({ $0 }) {
            XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
        }
    }

    func testRetryUntilCancelledReturnsAtOnceAndCancelUnschedulesTheNextAttempt() {
        let scheduler = TestScheduler()
        weak var machinery: DeinitProbe?
        let calls = Counter()
        var result: CancellablePromise<Int>?
        do {
            let probe = DeinitProbe()
            machinery = probe
            result = retry(maxAttempts: .max, scheduler: scheduler, lifetimeProbe: probe) { attempt -> Promise<Int> in
                calls.increment()
                throw Flaky(attempt: attempt)
            }
        }
        XCTAssertEqual(calls.value, 1, "retry returned after one attempt")
        XCTAssertEqual(scheduler.pendingCount, 1, "the next attempt is handed to the scheduler")
        result!.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0, "cancel() unscheduled the hand-over")
        XCTAssertNil(machinery, "and released the retry")
        scheduler.run()
        XCTAssertEqual(calls.value, 1)
        XCTAssertEqual(result!.error as? CancellablePromiseError, .cancelled)
    }

    func testRetryUntilCancelledRunsOneAttemptPerHandOverUntilCancelled() {
        // Each hand-over is due at once, so one `advance()` runs attempts until the body cancels.
        let scheduler = TestScheduler()
        let calls = Counter()
        let resultBox = SendableBox<CancellablePromise<Int>?>(nil)
        resultBox.value = retry(maxAttempts: .max, scheduler: scheduler) { attempt -> Promise<Int> in
            if calls.increment() == 1_000 { resultBox.value?.cancel() }
            throw Flaky(attempt: attempt)
        }
        let result = resultBox.value
        scheduler.advance()
        XCTAssertEqual(calls.value, 1_000)
        XCTAssertEqual(scheduler.pendingCount, 0)
        XCTAssertEqual(scheduler.now, 0, "no time passed")
        XCTAssertEqual(result!.error as? CancellablePromiseError, .cancelled)
    }

    // Real time: with the default scheduler the hand-over goes to a global queue.
    func testSynchronousFailuresOnTheDefaultSchedulerAreHandedToAGlobalQueue() {
        let threads = Recorder<Bool>()
        let result = retry(maxAttempts: 3) { attempt -> Promise<Int> in
            threads.append(Thread.isMainThread)
            return attempt < 3 ? Promise(error: Flaky(attempt: attempt)) : .value(attempt)
        }
        XCTAssertEqual(waitForResult(result)?.fulfilledValue, 3)
        XCTAssertEqual(threads.all.count, 3)
        XCTAssertFalse(threads.all.dropFirst().contains(true), "later attempts ran on a global queue")
    }

    func testAnInfiniteOrNaNDelayIsAConfigurationError() {
        for seconds in [TimeInterval.infinity, .nan] {
            let result = retry(maxAttempts: 2, delay: .fixed(seconds)) { _ in Promise<Int>(error: Flaky(attempt: 1)) }
            guard case .invalidDelay? = result.error as? RetryConfigurationError else {
                return XCTFail("\(seconds): \(String(describing: result.error))")
            }
        }
    }

    // MARK: Threads

    func testCancelRacingFailuresFromOtherThreadsSettlesOnceAndStopsEveryLaterAttempt() {
        runWithoutDeadlock(timeout: 60) {
            for _ in 0..<1_000 {
                let attempts = Attempts<Int>()
                let settled = Counter()
                let cancelReturned = Flag()
                let startedAfterCancel = Counter()
                let result = retry(maxAttempts: 50) { attempt -> CancellablePromise<Int> in
                    if cancelReturned.value { startedAfterCancel.increment() }
                    return attempts.cancellable(attempt)
                }
                result.pipe { _ in settled.increment() }
                let finished = runConcurrently([
                    {
                        for attempt in 1...10 {
                            guard attempts.started.count >= attempt else { break }
                            attempts.resolver(attempt).reject(Flaky(attempt: attempt))
                        }
                    },
                    {
                        result.cancel()
                        cancelReturned.raise()
                    },
                ])
                XCTAssertTrue(finished)
                XCTAssertEqual(settled.value, 1)
                XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
                XCTAssertLessThanOrEqual(startedAfterCancel.value, 1, "at most one start already under way")
                if startedAfterCancel.value == 1 {
                    XCTAssertEqual(attempts.cancelCount, 1, "a start under way is cancelled once its body returns")
                }
            }
        }
    }
}
