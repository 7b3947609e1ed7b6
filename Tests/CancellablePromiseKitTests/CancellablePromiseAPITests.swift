import CancellablePromiseKit
import Foundation
import XCTest

// The API a cancellable chain offers: every operator returns a `CancellablePromise` of the same
// chain, factories, conversions, firstly/hang/after.

final class CancellablePromiseAPITests: XCTestCase {
    // MARK: Operators return a CancellablePromise in the same context

    func testEveryOperatorReturnsCancellablePromiseInTheSameContext() {
        let (head, _) = CancellablePromise<[Int]>.pending()
        let context = head.cancelContext
        let steps: [CancelContext] = [
            head.map(on: nil) { $0 }.cancelContext,
            head.compactMap(on: nil) { $0 }.cancelContext,
            head.done(on: nil) { _ in }.cancelContext,
            head.get(on: nil) { _ in }.cancelContext,
            head.tap(on: nil) { _ in }.cancelContext,
            head.asVoid().cancelContext,
            head.then(on: nil) { CancellablePromise.value($0) }.cancelContext,
            head.then(on: nil) { Promise.value($0) }.cancelContext,
            head.recover(on: nil) { _ in Promise.value([]) }.cancelContext,
            head.recover(on: nil) { _ in Guarantee.value([]) }.cancelContext,
            head.ensure(on: nil) {}.cancelContext,
            head.ensureThen(on: nil) { Guarantee() }.cancelContext,
            head.ensureThen(on: nil) { CancellablePromise() }.cancelContext,
            head.catch(on: nil) { _ in }.cancelContext,
            head.cauterize().cancelContext,
            head.mapValues(on: nil) { $0 }.cancelContext,
            head.flatMapValues(on: nil) { [$0] }.cancelContext,
            head.compactMapValues(on: nil) { $0 }.cancelContext,
            head.thenMap(on: nil) { CancellablePromise.value($0) }.cancelContext,
            head.thenMap(on: nil) { Promise.value($0) }.cancelContext,
            head.thenFlatMap(on: nil) { CancellablePromise.value([$0]) }.cancelContext,
            head.thenFlatMap(on: nil) { Promise.value([$0]) }.cancelContext,
            head.filterValues(on: nil) { _ in true }.cancelContext,
            head.firstValue.cancelContext,
            head.firstValue(on: nil) { _ in true }.cancelContext,
            head.lastValue.cancelContext,
            head.sortedValues(on: nil).cancelContext,
        ]
        for (index, step) in steps.enumerated() {
            XCTAssertTrue(step === context, "operator #\(index) left the context")
        }
    }

    func testCancellingTheHeadRejectsEveryOperatorsPromise() {
        let (head, _) = CancellablePromise<[Int]>.pending()
        let promises: [CancellablePromise<Void>] = [
            head.map(on: nil) { $0 }.asVoid(),
            head.done(on: nil) { _ in },
            head.get(on: nil) { _ in }.asVoid(),
            head.then(on: nil) { CancellablePromise.value($0) }.asVoid(),
            head.mapValues(on: nil) { $0 }.asVoid(),
            head.thenMap(on: nil) { Promise.value($0) }.asVoid(),
            head.sortedValues(on: nil).asVoid(),
            head.firstValue.asVoid(),
        ]
        head.cancel()
        for (index, promise) in promises.enumerated() {
            XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled, "#\(index)")
        }
    }

    func testSequenceOperatorsComputeValues() {
        let head = CancellablePromise.value([3, 1, 2])
        XCTAssertEqual(head.mapValues(on: nil) { $0 * 2 }.value, [6, 2, 4])
        XCTAssertEqual(head.flatMapValues(on: nil) { [$0, $0] }.value, [3, 3, 1, 1, 2, 2])
        XCTAssertEqual(head.compactMapValues(on: nil) { $0 == 1 ? nil : $0 }.value, [3, 2])
        XCTAssertEqual(head.thenMap(on: nil) { CancellablePromise.value($0 + 1) }.value, [4, 2, 3])
        XCTAssertEqual(head.thenFlatMap(on: nil) { Promise.value([$0]) }.value, [3, 1, 2])
        XCTAssertEqual(head.filterValues(on: nil) { $0 > 1 }.value, [3, 2])
        XCTAssertEqual(head.firstValue.value, 3)
        XCTAssertEqual(head.lastValue.value, 2)
        XCTAssertEqual(head.sortedValues(on: nil).value, [1, 2, 3])
        XCTAssertEqual(head.firstValue(on: nil) { $0 < 3 }.value, 1)
    }

    func testThenMapCancelCancelsTheMappedPromises() {
        let (head, resolver) = CancellablePromise<[Int]>.pending()
        let tasks = Recorder<FakeTask<Int>>()
        let mapped = head.thenMap(on: nil) { _ -> CancellablePromise<Int> in
            let task = FakeTask<Int>()
            tasks.append(task)
            return task.promise.cancellize()
        }
        resolver.fulfill([1, 2])
        mapped.cancel()
        XCTAssertEqual(tasks.all.count, 2)
        XCTAssertTrue(tasks.all.allSatisfy { $0.isCancelled })
        XCTAssertEqual(mapped.error as? CancellablePromiseError, .cancelled)
    }

    func testStateAccessors() {
        let (pending, resolver) = CancellablePromise<Int>.pending()
        XCTAssertTrue(pending.isPending)
        XCTAssertFalse(pending.isResolved)
        XCTAssertNil(pending.value)
        XCTAssertNil(pending.result)
        resolver.fulfill(1)
        XCTAssertTrue(pending.isResolved)
        XCTAssertTrue(pending.isFulfilled)
        XCTAssertEqual(pending.value, 1)
        let rejected = CancellablePromise<Int>(error: FakeTaskCancelled())
        XCTAssertTrue(rejected.isRejected)
        XCTAssertEqual(rejected.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertNil(rejected.cancelledError)
    }

    // MARK: Factories

    func testValueFactoryIsFulfilledAndCancelIsANoOp() {
        let promise = CancellablePromise.value(5)
        promise.cancel()
        XCTAssertEqual(promise.value, 5)
        XCTAssertTrue(promise.isCancelled)  // requested, as Task.isCancelled
    }

    func testPendingFactoryIsRejectedByCancel() {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        promise.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        resolver.fulfill(1)
        XCTAssertTrue(promise.isRejected)
    }

    func testVoidInitIsFulfilled() {
        XCTAssertNotNil(CancellablePromise<Void>().value)
    }

    func testBridgeInitFollowsTheThenableInTheGivenContext() {
        let context = CancelContext()
        let (plain, resolver) = Promise<Int>.pending()
        let bridged = CancellablePromise(plain, cancelContext: context)
        XCTAssertTrue(bridged.cancelContext === context)
        resolver.fulfill(2)
        XCTAssertEqual(bridged.value, 2)
        let second = CancellablePromise(Promise<Int>.pending().promise, cancelContext: context)
        context.cancel()
        XCTAssertEqual(second.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: firstly, Guarantee.asCancellable, asVoid

    func testFirstlyReturnsTheCancellablePromiseOfTheBody() {
        let (inner, _) = CancellablePromise<Int>.pending()
        let result = firstly { inner }
        XCTAssertTrue(result === inner)
        let failing = firstly { () throws -> CancellablePromise<Int> in throw FakeTaskCancelled() }
        XCTAssertEqual(failing.error as? FakeTaskCancelled, FakeTaskCancelled())
    }

    func testGuaranteeAsCancellableCancelRejectsButGuaranteeStaysPending() {
        let (guarantee, resolve) = Guarantee<Int>.pending()
        _ = cancelled(guarantee.asCancellable())
        XCTAssertTrue(guarantee.isPending)
        resolve(1)
        XCTAssertEqual(guarantee.value, 1)
    }

    func testGuaranteeAsCancellableFulfils() {
        let (guarantee, resolve) = Guarantee<Int>.pending()
        let cancellable = guarantee.asCancellable()
        resolve(3)
        XCTAssertEqual(cancellable.value, 3)
    }

    func testAsVoidKeepsTheChain() {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        let void: CancellablePromise<Void> = promise.asVoid()
        XCTAssertTrue(void.cancelContext === promise.cancelContext)
        resolver.fulfill(1)
        XCTAssertNotNil(void.value)
    }

    // MARK: cancellable(_:) / cancellize()

    func testCancellableGlobalFunctionIsCancellize() {
        let task = FakeTask<Int>()
        let promise = cancellable(task.promise)
        promise.cancel()
        XCTAssertTrue(task.isCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellizeOfCancellablePromiseReturnsItself() {
        let (promise, _) = CancellablePromise<Int>.pending()
        XCTAssertTrue(promise.cancellize() === promise)
        XCTAssertTrue(cancellable(promise) === promise)
    }

    func testCancellizeIntoAGivenContextJoinsIt() {
        let context = CancelContext()
        let a = Promise<Int>.pending().promise.cancellize(cancelContext: context)
        let b = cancellable(Promise<Int>.pending().promise, cancelContext: context)
        context.cancel()
        XCTAssertTrue(a.isRejected)
        XCTAssertTrue(b.isRejected)
    }

    func testCancellizeOfPlainPromiseLeavesItPending() {
        let (plain, resolver) = Promise<Int>.pending()
        let wrapper = plain.cancellize()
        wrapper.cancel()
        XCTAssertTrue(plain.isPending)
        XCTAssertTrue(wrapper.isRejected)
        resolver.fulfill(1)
        XCTAssertEqual(plain.value, 1)
        XCTAssertEqual(wrapper.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellizeOfPromiseWithAttachedTaskCancelsTheTaskAndRejectsThePromise() {
        let task = FakeTask<Int>()
        let wrapper = task.promise.cancellize()
        wrapper.cancel()
        XCTAssertEqual(task.cancelCount.value, 1)
        // The promise itself is rejected with the cancellation, not the task's own error.
        XCTAssertEqual(task.promise.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: after, hang

    func testCancellizedAfterStopsTheTimerAndTheGuaranteeStaysPending() {
        let scheduler = TestScheduler()
        let timer = after(seconds: 0.1, scheduler: scheduler)
        let cancellable = timer.cancellize()
        cancelStopsTheTimer(cancellable, of: scheduler) {
            XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled)
            XCTAssertTrue(timer.isPending)  // the timer never fired
        }
    }

    func testCancellableAfterIntervalStopsTheTimer() {
        let scheduler = TestScheduler()
        let timer = after(.milliseconds(100), scheduler: scheduler)
        let cancellable = cancellable(timer)
        cancelStopsTheTimer(cancellable, of: scheduler) {
            XCTAssertTrue(timer.isPending)
            XCTAssertTrue(cancellable.isRejected)
        }
    }

    // Real time: the default scheduler's timer, cancelled, releases the guarantee at once.
    func testCancellizedAfterOnTheDefaultSchedulerReleasesItsTimer() {
        weak var weakTimer: Promise<Void>?
        do {
            let timer = after(seconds: 600)
            weakTimer = timer.asPromise()
            timer.cancellize().cancel()
        }
        XCTAssertNil(weakTimer, "the cancelled dispatch timer released the guarantee")
    }

    func testCancellizedAfterFulfilsWhenNotCancelled() {
        let scheduler = TestScheduler()
        let cancellable = after(seconds: 0.01, scheduler: scheduler).cancellize()
        scheduler.advance(by: 0.01)
        XCTAssertNotNil(cancellable.value)
    }

    func testHangWaitsForACancellablePromise() throws {
        // Real time: `hang` waits on this thread, so the timer must run elsewhere.
        let promise = after(seconds: 0.01).cancellize().map(on: nil) { 7 }
        XCTAssertEqual(try hang(promise), 7)
        let cancelled = after(seconds: 10, scheduler: TestScheduler()).cancellize()
        cancelled.cancel()
        XCTAssertThrowsError(try hang(cancelled)) { XCTAssertTrue($0.isCancelled) }
    }

    func testWaitReturnsTheValue() throws {
        // Real time: `wait()` blocks this thread, so the timer must run elsewhere.
        let promise = after(seconds: 0.01).cancellize().map(on: nil) { 8 }
        XCTAssertEqual(try promise.wait(), 8)
    }

    func testDescriptionMentionsCancellation() {
        let (promise, _) = CancellablePromise<Int>.pending()
        promise.cancel()
        XCTAssertTrue(promise.description.contains("cancelled"))
        XCTAssertTrue(promise.debugDescription.contains("isCancelled: true"))
    }

    /// A guarantee continued with a step returning a cancellable promise: the result is
    /// cancellable from there, and cancelling it cancels the promise the body returned.
    func testAGuaranteeContinuedWithACancellableStepIsCancellableFromThere() {
        let (inner, innerResolver) = CancellablePromise<Int>.pending()
        let (guarantee, resolve) = Guarantee<Int>.pending()
        let result = guarantee.then(on: nil) { _ in inner }
        resolve(1)
        result.cancel()
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(inner.promise.isRejected, "the promise the body returned is cancelled")
        withExtendedLifetime(innerResolver) {}

        let tripled = Guarantee.value(2).then(on: nil) { CancellablePromise.value($0 * 3) }
        XCTAssertEqual(tripled.value, 6)
    }
}
