import CancellablePromiseKit
import Dispatch
import Foundation
import TestSupport
import XCTest

// The spellings of PromiseKit 7's cancellation guide and of CancelForPromiseKit that are
// deprecated aliases here, each used as those guides show and checked to behave as the name it
// forwards to. The test methods are marked deprecated themselves, so using the aliases inside
// them does not warn (the strict build treats warnings as errors).

private struct Stop: Error, Equatable {}

final class DeprecatedSpellingTests: XCTestCase {
    // MARK: Types

    @available(*, deprecated)
    func testCancellableTaskIsCancellable() {
        let item: CancellableTask = DispatchWorkItem {}
        let promise = CancellablePromise<Int>(task: item) { _ in }
        promise.cancel()
        XCTAssertTrue(item.isCancelled)
    }

    @available(*, deprecated)
    func testCancelItemListIsTheCancelContext() {
        let (promise, _) = CancellablePromise<Int>.pending()
        let list: CancelItemList = promise.cancelItemList
        XCTAssertTrue(list === promise.cancelContext)
        list.cancel()
        XCTAssertTrue(promise.isCancelled)
    }

    @available(*, deprecated)
    func testCancellizeWithAnUnlabelledContext() {
        let context = CancelContext()
        let timer = after(seconds: 0.2)
        let cancellable = timer.cancellize(context)
        XCTAssertTrue(cancellable.cancelContext === context)
        context.cancel()
        XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled)
        // Real clock: a stopped timer of the default scheduler shows only by not firing in time.
        XCTAssertNil(waitForResult(timer, seconds: 0.5), "the timer was stopped")
    }

    @available(*, deprecated)
    func testGlobalCancellize() {
        let task = TokenCancellableSpy()
        let promise = Promise<Int>(cancellable: task) { _ in }
        let chain = cancellize(promise).map(on: nil) { $0 + 1 }
        chain.cancel()
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    @available(*, deprecated)
    func testCancellableTaskSpellingsOfPromiseAndGuarantee() {
        let promiseTask = DispatchWorkItem {}
        let promise = Promise<Void>(cancellableTask: promiseTask) { _ in }
        CancellablePromise(promise).cancel()
        XCTAssertTrue(promiseTask.isCancelled)

        let laterTask = DispatchWorkItem {}
        let (later, resolver) = Promise<Void>.pending()
        later.setCancellableTask(laterTask, reject: resolver.reject)
        later.cancellize().cancel()
        XCTAssertTrue(laterTask.isCancelled)

        let guaranteeTask = DispatchWorkItem {}
        let guarantee = Guarantee<Void>(cancellableTask: guaranteeTask) { _ in }
        guarantee.cancellize().cancel()
        XCTAssertTrue(guaranteeTask.isCancelled)

        let otherTask = DispatchWorkItem {}
        let (other, _) = Guarantee<Void>.pending()
        other.setCancellableTask(otherTask)
        CancellablePromise(other).cancel()
        XCTAssertTrue(otherTask.isCancelled)
    }

    // MARK: Creating

    @available(*, deprecated)
    func testInitTaskForms() {
        cancelCancelsTheTaskAndRejectsThePromise { CancellablePromise(task: $0, promise: $1, resolver: $2) }

        XCTAssertEqual(CancellablePromise<Int>(task: nil, error: Stop()).error as? Stop, Stop())
        XCTAssertTrue(CancellablePromise(task: TokenCancellableSpy()).isFulfilled)
    }

    @available(*, deprecated)
    func testCancellableAfterSecondsStopsTheTimer() {
        let scheduler = TestScheduler()
        let fired = Flag()
        let timer = cancellableAfter(seconds: 0.1, scheduler: scheduler)
        timer.done(on: nil) { fired.raise() }.cauterize()
        timer.cancel()
        XCTAssertEqual(timer.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(scheduler.pendingCount, 0, "the timer is unscheduled")
        scheduler.advance(by: 1)
        XCTAssertFalse(fired.value)
    }

    @available(*, deprecated)
    func testCancellableAfterIntervalFulfils() {
        XCTAssertNotNil(waitForResult(cancellableAfter(.milliseconds(10)), seconds: 5)?.fulfilledValue)
    }

    // MARK: The delegate promise and cancelling

    @available(*, deprecated)
    func testThenableAndCatchableAreThePromise() {
        let (promise, _) = CancellablePromise<Int>.pending()
        XCTAssertTrue(promise.thenable === promise.promise)
        XCTAssertTrue(promise.catchable === promise.promise)
    }

    @available(*, deprecated)
    func testCancelErrorOnAPromise() {
        let (withError, _) = CancellablePromise<Int>.pending()
        withError.cancel(error: Stop())
        XCTAssertEqual(withError.error as? Stop, Stop())
        let (withoutError, _) = CancellablePromise<Int>.pending()
        withoutError.cancel(error: nil)
        XCTAssertEqual(withoutError.error as? CancellablePromiseError, .cancelled)
    }

    @available(*, deprecated)
    func testCancelErrorOnTheFinalizerAndTheContext() {
        let (first, _) = CancellablePromise<Int>.pending()
        let finalizer = first.catch(on: nil, policy: .allErrors) { _ in }
        finalizer.cancel(error: Stop())
        XCTAssertEqual(finalizer.cancelledError as? Stop, Stop())

        let (second, _) = CancellablePromise<Int>.pending()
        let context = second.cancelContext
        context.cancel(error: nil)
        XCTAssertEqual(context.cancelledError as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(second.error as? CancellablePromiseError, .cancelled)
    }

    @available(*, deprecated)
    func testAppendCancellableTaskAndTheLabelledSpelling() {
        let first = TokenCancellableSpy()
        let second = TokenCancellableSpy()
        let rejected = Counter()
        let (promise, _) = CancellablePromise<Int>.pending()
        promise.appendCancellableTask(first) { _ in rejected.increment() }
        promise.appendCancellable(cancellable: second, reject: nil)
        promise.cancel()
        XCTAssertEqual(first.cancelCount, 1)
        XCTAssertEqual(second.cancelCount, 1)
        XCTAssertEqual(rejected.value, 1)
    }

    // MARK: Operators with a `cancellable` prefix

    @available(*, deprecated)
    func testCancellableThenFollowsAPlainThenable() {
        let chain = CancellablePromise.value(2).cancellableThen(on: nil) { Promise.value($0 * 3) }
        XCTAssertEqual(chain.value, 6)
    }

    @available(*, deprecated)
    func testCancellableThenIsCancelledWithTheChain() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let ran = Flag()
        let chain = head.cancellableThen(on: nil) { _ -> Promise<Int> in
            ran.raise()
            return .value(1)
        }
        chain.cancel()
        resolver.fulfill(1)
        XCTAssertFalse(ran.value)
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
    }

    @available(*, deprecated)
    func testCancellableRecover() {
        let recovered = CancellablePromise<Int>(error: Stop()).cancellableRecover(on: nil) { _ in Promise.value(5) }
        XCTAssertEqual(recovered.value, 5)
        let (head, _) = CancellablePromise<Int>.pending()
        let cancelled = head.cancellableRecover(on: nil, policy: .allErrors) { _ in Promise.value(5) }
        cancelled.cancel()
        XCTAssertEqual(cancelled.error as? CancellablePromiseError, .cancelled, "a cancelled chain stays cancelled")
    }

    @available(*, deprecated)
    func testCancellableThenMapAndThenFlatMap() {
        let mapped = CancellablePromise.value([1, 2]).cancellableThenMap(on: nil) { Promise.value($0 * 10) }
        XCTAssertEqual(mapped.value, [10, 20])
        let flat = CancellablePromise.value([1, 2]).cancellableThenFlatMap(on: nil) { Promise.value([$0, $0]) }
        XCTAssertEqual(flat.value, [1, 1, 2, 2])
    }

    // MARK: Combinators

    @available(*, deprecated)
    func testCancellableWhenTuples() {
        let a = CancellablePromise.value(1), b = CancellablePromise.value("b"), c = CancellablePromise.value(3.0)
        let d = CancellablePromise.value(true), e = CancellablePromise.value([5])
        XCTAssertEqual(cancellableWhen(fulfilled: a, b).value.map { "\($0.0)\($0.1)" }, "1b")
        XCTAssertEqual(cancellableWhen(fulfilled: a, b, c).value?.2, 3.0)
        XCTAssertEqual(cancellableWhen(fulfilled: a, b, c, d).value?.3, true)
        XCTAssertEqual(cancellableWhen(fulfilled: a, b, c, d, e).value?.4, [5])
        XCTAssertEqual(cancellableWhen(fulfilled: [a, a]).value, [1, 1])
    }

    @available(*, deprecated)
    func testCancellingCancellableWhenRejectsIt() {
        let (a, _) = CancellablePromise<Int>.pending()
        let (b, _) = CancellablePromise<Int>.pending()
        let both = cancellableWhen(fulfilled: a, b)
        both.cancel()
        XCTAssertEqual(both.error as? CancellablePromiseError, .cancelled)
    }

    @available(*, deprecated)
    func testCancellableRace() {
        let (slow, _) = CancellablePromise<Int>.pending()
        XCTAssertEqual(cancellableRace(slow, .value(2)).value, 2)
        XCTAssertEqual(cancellableRace([slow, .value(3)]).value, 3)
    }

    // MARK: Timeouts

    @available(*, deprecated)
    func testGlobalTimeoutRejectsWithATimeoutThatMatchesPMKErrorTimedOut() {
        // Real clock: the deprecated global timeout is checked with its default, wall-clock scheduler.
        let result = waitForResult(race(after(seconds: 5).asPromise(), timeout(seconds: 0.05)), seconds: 5)
        guard case .rejected(let error)? = result else { return XCTFail("not rejected: \(String(describing: result))") }
        do {
            throw error
        } catch PMKError.timedOut {
            XCTAssertEqual((error as? PromiseTimeoutError)?.seconds, 0.05)
            XCTAssertFalse(error.isCancelled, "a timeout is not a cancellation here")
        } catch {
            XCTFail("not a timeout: \(error)")
        }
    }

    @available(*, deprecated)
    func testPMKErrorTimedOutMatchesOnlyTimeouts() {
        XCTAssertTrue(PMKError.timedOut ~= PromiseTimeoutError(seconds: 2))
        XCTAssertFalse(PMKError.timedOut ~= PMKError.cancelled)
        XCTAssertFalse(PromiseTimeoutError(seconds: 1) ~= PromiseTimeoutError(seconds: 2))
        XCTAssertTrue(PromiseTimeoutError(seconds: 1) ~= PromiseTimeoutError(seconds: 1))
        XCTAssertEqual("\(PMKError.timedOut)", "The promise timed out")
    }

    @available(*, deprecated)
    func testCancellingTheGlobalTimeoutStopsItsTimer() {
        let scheduler = TestScheduler()
        let timer = timeout(seconds: 0.1, scheduler: scheduler)
        cancelStopsTheTimer(timer.cancellize(), of: scheduler) {
            XCTAssertEqual(timer.error as? CancellablePromiseError, .cancelled)
        }
    }
}
