import Foundation
import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// `retry`'s rules, one per test, checked on its state machine alone: `RetryState` is a value
// whose events return the actions to run, so each test drives the events in order, with no
// thread, no queue and no timer but a `TestScheduler`'s, and asserts the actions returned and
// the state left.

final class RetryMachineTests: XCTestCase {
    private struct Flaky: Error, Equatable {
        let attempt: Int
    }

    /// A retry's state whose attempts are pending promises, with the predicate `shouldRetry`.
    private func makeState(shouldRetry: @escaping (Error) -> Bool = { _ in true }) -> RetryState<Int> {
        let (_, resolver) = Promise<Int>.pending()
        return RetryState<Int>(
            resolver: resolver, body: { _ in (Promise<Int>.pending().promise, nil) }, shouldRetry: shouldRetry)
    }

    /// Starts attempt `attempt` as `runAttempt` does: begins it, records its stop function,
    /// and ends starting it.
    private func start(_ attempt: Int, in state: inout RetryState<Int>, stop: (() -> Void)? = nil) {
        XCTAssertNotNil(state.begin(attempt), "attempt \(attempt) is due")
        let actions = state.started(attempt, stop: stop)
        XCTAssertNil(actions.stopAttempt)
        XCTAssertNil(state.endStarting())
    }

    /// A state whose first attempt was rejected and that decided to retry it after a wait of
    /// one second (the wait's timer not yet reported).
    private func makeStateWaitingToRetryAfterAFailedFirstAttempt() -> RetryState<Int> {
        var state = makeState()
        start(1, in: &state)
        _ = state.settled(1, .rejected(Flaky(attempt: 1)), maxAttempts: 3)
        _ = state.decided(1, error: Flaky(attempt: 1), retry: true, wait: 1, hasQueue: false)
        return state
    }

    /// The error the result is settled with, if the actions settle it with one.
    private func rejection(_ actions: RetryActions<Int>) -> Error? {
        if case .rejected(let error)? = actions.settle?.1 { return error }
        return nil
    }

    // MARK: An attempt fails

    /// "When it fails with an error the caller deems transient, wait a while and run another":
    /// the failure asks the predicate, and a yes schedules the wait before the next attempt.
    func testFailedAttemptAsksThePredicateThenSchedulesTheWait() {
        var state = makeState()
        start(1, in: &state)
        let failed = state.settled(1, .rejected(Flaky(attempt: 1)), maxAttempts: 3)
        XCTAssertEqual(failed.decide?.attempt, 1)
        XCTAssertEqual(failed.decide?.error as? Flaky, Flaky(attempt: 1))
        XCTAssertNil(failed.settle)
        XCTAssertNil(failed.next)
        XCTAssertEqual(state.phase, .deciding(1))

        let decided = state.decided(1, error: Flaky(attempt: 1), retry: true, wait: 2.5, hasQueue: false)
        XCTAssertEqual(decided.next, .wait(2, 2.5))
        XCTAssertNil(decided.settle)
        XCTAssertEqual(state.phase, .due(2))

        let scheduler = TestScheduler()
        let timer = scheduler.schedule(after: 2.5) {}
        XCTAssertNil(state.timerStarted(timer, before: 2).stopTimer, "the state keeps the timer of its wait")
        XCTAssertNotNil(state.timer)
        XCTAssertNotNil(state.begin(2), "the timer's firing starts attempt 2")
        XCTAssertNil(state.timer, "a fired timer is done with")
        XCTAssertEqual(state.phase, .running(2))
    }

    /// With no wait, the next attempt starts at once; while a thread is still starting an
    /// attempt (a synchronous failure) it is left to that thread, so no thread loops.
    func testNextAttemptWithoutAWaitStartsAtOnceOrIsHandedToTheStartingThread() {
        var state = makeState()
        XCTAssertNotNil(state.begin(1))
        _ = state.settled(1, .rejected(Flaky(attempt: 1)), maxAttempts: 3)
        let whileStarting = state.decided(1, error: Flaky(attempt: 1), retry: true, wait: 0, hasQueue: false)
        XCTAssertNil(whileStarting.next)
        XCTAssertEqual(state.endStarting(), 2, "the starting thread hands attempt 2 over")

        start(2, in: &state)
        _ = state.settled(2, .rejected(Flaky(attempt: 2)), maxAttempts: 3)
        let later = state.decided(2, error: Flaky(attempt: 2), retry: true, wait: 0, hasQueue: false)
        XCTAssertEqual(later.next, .attempt(3), "a later failure starts the next attempt at once")
    }

    /// "Retrying only the errors `shouldRetry` accepts": a no rejects with the attempt's error.
    func testPredicateRefusalRejectsWithTheAttemptsError() {
        var state = makeState()
        start(1, in: &state)
        _ = state.settled(1, .rejected(Flaky(attempt: 1)), maxAttempts: 3)
        let refused = state.decided(1, error: Flaky(attempt: 1), retry: false, wait: 0, hasQueue: false)
        XCTAssertEqual(rejection(refused) as? Flaky, Flaky(attempt: 1))
        XCTAssertNil(refused.next)
        XCTAssertEqual(state.phase, .finished)
    }

    /// "Cancellations are never retried": a cancelled attempt rejects the result at once,
    /// without asking the predicate.
    func testCancelledAttemptIsNeverRetried() {
        var state = makeState()
        start(1, in: &state)
        let cancelled = state.settled(1, .rejected(CancellablePromiseError.cancelled), maxAttempts: 5)
        XCTAssertNil(cancelled.decide)
        XCTAssertEqual(rejection(cancelled) as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(state.phase, .finished)
    }

    // MARK: Cancelling

    /// "Unschedules the wait's timer … and rejects": cancelling during a wait stops its timer
    /// (the scheduler then holds nothing) and rejects the result with `.cancelled`.
    func testCancelDuringTheWaitUnschedulesTheTimerAndRejects() {
        let scheduler = TestScheduler()
        var state = makeStateWaitingToRetryAfterAFailedFirstAttempt()
        let timer = scheduler.schedule(after: 1) {}
        _ = state.timerStarted(timer, before: 2)

        let cancelled = state.cancel()
        XCTAssertTrue((cancelled.stopTimer as AnyObject) === (timer as AnyObject), "the wait's timer is stopped")
        cancelled.stopTimer?.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0)
        XCTAssertEqual(rejection(cancelled) as? CancellablePromiseError, .cancelled)
        XCTAssertNil(cancelled.stopAttempt, "no attempt was running")
        XCTAssertEqual(state.phase, .finished)
        XCTAssertNil(state.timer)
        XCTAssertNil(state.begin(2), "no attempt starts afterwards")
    }

    /// A timer armed after the cancel (the cancel ran while it was being made) is stopped as
    /// soon as it is reported.
    func testTimerReportedAfterTheCancelIsStoppedAtOnce() {
        let scheduler = TestScheduler()
        var state = makeStateWaitingToRetryAfterAFailedFirstAttempt()
        _ = state.cancel()
        let timer = scheduler.schedule(after: 1) {}
        let reported = state.timerStarted(timer, before: 2)
        XCTAssertTrue((reported.stopTimer as AnyObject) === (timer as AnyObject))
        XCTAssertNil(state.timer)
    }

    /// "Cancels the running attempt": cancelling during an attempt returns its stop function
    /// and rejects; the attempt's own settling afterwards changes nothing.
    func testCancelDuringAnAttemptStopsTheAttempt() {
        let stopped = Flag()
        var state = makeState()
        start(1, in: &state, stop: { stopped.raise() })

        let cancelled = state.cancel()
        cancelled.stopAttempt?()
        XCTAssertTrue(stopped.value)
        XCTAssertEqual(rejection(cancelled) as? CancellablePromiseError, .cancelled)
        XCTAssertNil(state.stopAttempt)
        let late = state.settled(1, .rejected(CancellablePromiseError.cancelled), maxAttempts: 3)
        XCTAssertNil(late.settle, "the result settled once, with the cancel")
        XCTAssertNil(late.decide)
    }

    /// "An attempt whose body another thread was already calling when `cancel()` ran is
    /// cancelled as soon as that body returns."
    func testCancelWhileTheBodyRunsStopsWhatItStarted() {
        let stopped = Flag()
        var state = makeState()
        XCTAssertNotNil(state.begin(1))
        _ = state.cancel()
        let started = state.started(1, stop: { stopped.raise() })
        started.stopAttempt?()
        XCTAssertTrue(stopped.value)
        XCTAssertNil(state.stopAttempt)
    }

    /// A second cancel, or a cancel after the result settled, does nothing.
    func testCancelAfterTheEndDoesNothing() {
        var state = makeState()
        start(1, in: &state)
        _ = state.settled(1, .fulfilled(1), maxAttempts: 1)
        let cancelled = state.cancel()
        XCTAssertNil(cancelled.settle)
        XCTAssertFalse(state.isCancelled)
    }

    /// "If the returned promise is dropped without being cancelled, the retry runs to its end":
    /// once nothing can cancel, the running attempt's stop function is no longer held.
    func testAbandonedRetryStopsHoldingTheAttemptsStopFunction() {
        var state = makeState()
        start(1, in: &state, stop: {})
        XCTAssertNotNil(state.stopAttempt)
        _ = state.abandon()
        XCTAssertNil(state.stopAttempt)
        XCTAssertFalse(state.isCancellable)
        _ = state.settled(1, .rejected(Flaky(attempt: 1)), maxAttempts: 3)
        XCTAssertEqual(state.phase, .deciding(1), "the retry goes on")
    }

    // MARK: The end

    /// "It is rejected with an attempt's error when that attempt was the last one allowed":
    /// the predicate is not asked.
    func testFailureOfTheLastAllowedAttemptRejectsWithItsError() {
        var state = makeState()
        start(1, in: &state)
        _ = state.settled(1, .rejected(Flaky(attempt: 1)), maxAttempts: 2)
        _ = state.decided(1, error: Flaky(attempt: 1), retry: true, wait: 0, hasQueue: true)
        start(2, in: &state)
        let last = state.settled(2, .rejected(Flaky(attempt: 2)), maxAttempts: 2)
        XCTAssertNil(last.decide)
        XCTAssertNil(last.next)
        XCTAssertEqual(rejection(last) as? Flaky, Flaky(attempt: 2))
        XCTAssertEqual(state.phase, .finished)
        XCTAssertNil(state.body)
        XCTAssertNil(state.shouldRetry)
    }

    /// "The promise is fulfilled with the first attempt's value that succeeds", and the
    /// body, predicate and resolver are let go.
    func testSuccessFulfilsAndLetsGoOfTheClosures() {
        var state = makeState()
        start(1, in: &state)
        let succeeded = state.settled(1, .fulfilled(7), maxAttempts: 3)
        guard case .fulfilled(let value)? = succeeded.settle?.1 else { return XCTFail("not fulfilled") }
        XCTAssertEqual(value, 7)
        XCTAssertNil(succeeded.decide)
        XCTAssertEqual(state.phase, .finished)
        XCTAssertNil(state.resolver)
        XCTAssertNil(state.body)
        XCTAssertNil(state.shouldRetry)
        XCTAssertEqual(succeeded.released.count, 3, "the stop function, body and predicate go with the actions")
    }
}
