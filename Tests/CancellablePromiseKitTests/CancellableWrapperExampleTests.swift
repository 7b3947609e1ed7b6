import CancellablePromiseKit
import Foundation
import XCTest

// The examples of the original CancellablePromiseKit README (the PromiseKit 6 add-on), as a user
// writes them: wrapping a callback-style task in a `CancellablePromise`, `race` and `when` with
// `autoCancel`, cancelling a `then` chain, `asPromise` / `asCancellable`, the other initialisers
// and the wrapper whose body receives a `cancelPromise`, with `when(_:while:)`.
//
// Adapted: `Task(…)` (Swift's `Task` since) → `StubTask` / `tasks.start(…)`; `let
// existingPromise, existingResolver = …` → `let (existingPromise, existingResolver) = …`;
// `task2. value!` → `task2.value!`; the first `cancelPromise` example's last `when` mixes a
// `Promise<String>` and a `Promise<Void>`, so it is `when(fulfilled: [any Thenable])` followed by
// `.map { $0[0] as! String }`. Swift 6 (the cancel closure runs on the cancelling thread, so its
// type is `@Sendable`): `let cancel = { … self.printed.append(…) }` → `let cancel: @Sendable () ->
// Void = { [printed] in printed.append(…) }`, `printed` a lock-protected `Recorder`; the
// examples' captured `var`s → `Flag`/`Recorder`.

/// The README's `Task(…)`: a callback-style task with `completion` and `cancel()`.
final class StubTask: @unchecked Sendable {
    var completion: ((String?, Error?) -> Void)?
    private(set) var cancelCount = 0
    func finish(_ value: String?, _ error: Error?) { completion?(value, error) }
    func cancel() { cancelCount += 1 }
}

final class CancellableWrapperExampleTests: XCTestCase {
    // MARK: Making cancellable Promises

    let printed = Recorder<String>()

    func startTask(_ task: StubTask) -> CancellablePromise<String> {
        return CancellablePromise<String> { resolver in
            task.completion = { (value, error) in
                resolver.resolve(value, error)
            }
            let cancel: @Sendable () -> Void = { [printed] in
                task.cancel()
                printed.append("Task was cancelled")
            }
            return cancel
        }
    }

    func testMakingCancellablePromiseResolvesFromTheTaskCompletion() {
        let task = StubTask()
        let runningTask = startTask(task)
        XCTAssertTrue(runningTask.isPending)
        task.finish("done", nil)
        XCTAssertEqual(runningTask.value, "done")
        runningTask.cancel()
        XCTAssertEqual(task.cancelCount, 0)  // settled: the cancel function is not called
        XCTAssertTrue(printed.all.isEmpty)
    }

    func testMakingCancellablePromiseRejectsFromTheTaskCompletion() {
        let task = StubTask()
        let runningTask = startTask(task)
        task.finish(nil, FakeTaskCancelled())
        XCTAssertEqual(runningTask.error as? FakeTaskCancelled, FakeTaskCancelled())
    }

    // MARK: Cancelling

    func testCancelAbortsTheUnderlyingTaskAndRejectsWithCancelled() {
        let task = StubTask()
        let runningTask = startTask(task)
        runningTask.cancel()
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertEqual(printed.all, ["Task was cancelled"])
        XCTAssertEqual(runningTask.error as? CancellablePromiseError, .cancelled)
        // The task finishing later does not change the outcome.
        task.finish("late", nil)
        XCTAssertEqual(runningTask.error as? CancellablePromiseError, .cancelled)
    }

    func testCatchWithAllErrorsPolicyReceivesCancelled() {
        let task = StubTask()
        let runningTask = startTask(task)
        let caught = Handshake()
        runningTask.catch(policy: .allErrors) { error in
            // Will be called with error being CancellablePromiseError.cancelled
            XCTAssertEqual(error as? CancellablePromiseError, .cancelled)
            caught.signal()
        }
        runningTask.cancel()
        XCTAssertTrue(caught.wait(seconds: 10))
    }

    func testCatchWithDefaultPolicyIsNotCalledForCancellation() {
        let task = StubTask()
        let runningTask = startTask(task)
        let called = Flag()
        let finished = Handshake()
        runningTask.catch { _ in called.raise() }.finally { finished.signal() }
        runningTask.cancel()
        XCTAssertTrue(finished.wait(seconds: 10))
        XCTAssertFalse(called.value)
    }

    // MARK: race and when with autoCancel

    func testRaceAutoCancelCancelsTheOthersWhenOneFulfils() {
        let (cancellablePromise1, r1) = CancellablePromise<Int>.pending()
        let (cancellablePromise2, _) = CancellablePromise<Int>.pending()
        let (cancellablePromise3, _) = CancellablePromise<Int>.pending()
        let winner = race([cancellablePromise1, cancellablePromise2, cancellablePromise3], autoCancel: true)
        r1.fulfill(1)
        XCTAssertEqual(winner.value, 1)
        XCTAssertFalse(cancellablePromise1.isCancelled)
        XCTAssertTrue(cancellablePromise2.isCancelled)
        XCTAssertTrue(cancellablePromise3.isCancelled)
        XCTAssertEqual(cancellablePromise2.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancellablePromise3.error as? CancellablePromiseError, .cancelled)
    }

    func testRaceWithoutAutoCancelBehavesAsPromiseKit() {
        let (cancellablePromise1, r1) = CancellablePromise<Int>.pending()
        let (cancellablePromise2, r2) = CancellablePromise<Int>.pending()
        let winner = race([cancellablePromise1, cancellablePromise2])
        r1.fulfill(1)
        XCTAssertEqual(winner.value, 1)
        XCTAssertFalse(cancellablePromise2.isCancelled)
        XCTAssertTrue(cancellablePromise2.isPending)
        r2.fulfill(2)
        XCTAssertEqual(cancellablePromise2.value, 2)
    }

    func testWhenFulfilledAutoCancelCancelsTheOthersWhenOneFails() {
        let (p1, r1) = CancellablePromise<Int>.pending()
        let (p2, _) = CancellablePromise<Int>.pending()
        let all = when(fulfilled: [p1, p2], autoCancel: true)
        r1.reject(FakeTaskCancelled())
        XCTAssertEqual(all.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertFalse(p1.isCancelled)
        XCTAssertTrue(p2.isCancelled)
        XCTAssertTrue(p2.isRejected)
    }

    func testWhenResolvedAutoCancelCancelsInputsWhenCancelled() {
        let (p1, _) = CancellablePromise<Int>.pending()
        let (p2, r2) = CancellablePromise<Int>.pending()
        let all = when(resolved: [p1, p2], autoCancel: true)
        r2.fulfill(2)
        XCTAssertTrue(all.isPending)
        all.cancel()
        XCTAssertTrue(p1.isCancelled)
        XCTAssertEqual(all.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellingCombinatorResultCancelsInputsOnlyWithAutoCancel() {
        let (a, b) = twoPendingCancellablePromises()
        let plain = race([a, b])
        plain.cancel()
        XCTAssertTrue(plain.isRejected)
        XCTAssertFalse(a.isCancelled)
        XCTAssertTrue(a.isPending)
        let auto = race([a, b], autoCancel: true)
        auto.cancel()
        XCTAssertTrue(a.isCancelled)
        XCTAssertTrue(b.isCancelled)
    }

    // MARK: then

    /// The README's example with `cancellablePromise1` still pending: the chain cancels it, and the
    /// body that would return `cancellablePromise2` never runs, so `cancellablePromise2` never
    /// joins the chain (no code can know about it before the body returns it).
    func testThenChainCancelWhileFirstPendingCancelsFirstAndNeverRunsBody() {
        let cancelled = Recorder<Int>()
        let bodyRan = Flag()
        let cancellablePromise1 = CancellablePromise<Int> { _ in { cancelled.append(1) } }
        let cancellablePromise2 = CancellablePromise<Int> { _ in { cancelled.append(2) } }
        let cancellableChain = cancellablePromise1.then { _ -> CancellablePromise<Int> in
            bodyRan.raise()
            return cancellablePromise2
        }
        cancellableChain.cancel()
        XCTAssertEqual(cancelled.all, [1])
        XCTAssertTrue(cancellablePromise1.isRejected)
        XCTAssertTrue(cancellableChain.isRejected)
        drainMainQueue()
        XCTAssertFalse(bodyRan.value)
    }

    /// Both included promises pending (the first has fulfilled and its body returned the
    /// second): cancelling the chain cancels the second too.
    func testThenChainCancelCancelsIncludedPendingPromises() {
        let cancelled = Recorder<Int>()
        let (cancellablePromise1, r1) = CancellablePromise<Int>.pending()
        let cancellablePromise2 = CancellablePromise<Int> { _ in { cancelled.append(2) } }
        let cancellableChain = cancellablePromise1.then(on: nil) { _ in
            cancellablePromise2
        }
        r1.fulfill(1)
        cancellableChain.cancel()
        XCTAssertEqual(cancelled.all, [2])
        XCTAssertTrue(cancellablePromise2.isCancelled)
        XCTAssertEqual(cancellablePromise2.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancellableChain.error as? CancellablePromiseError, .cancelled)
    }

    func testThenChainCancelWhileSecondRunsCancelsSecond() {
        let (cancellablePromise1, r1) = CancellablePromise<Int>.pending()
        let second = FakeTask<Int>()
        let cancellablePromise2 = second.promise.cancellize()
        let cancellableChain = cancellablePromise1.then(on: nil) { _ in
            cancellablePromise2
        }
        r1.fulfill(1)
        cancellableChain.cancel()
        XCTAssertTrue(second.isCancelled)
        XCTAssertEqual(cancellableChain.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(cancellablePromise1.value, 1)
    }

    // MARK: asPromise and asCancellable

    func testAsPromiseAndAsCancellableMixInOneExpression() {
        let (plain, plainResolver) = Promise<Int>.pending()
        let (cancellable, cancellableResolver) = CancellablePromise<Int>.pending()
        let both = when(fulfilled: [plain, cancellable.asPromise()])
        let bothCancellable = when(fulfilled: [plain.asCancellable(), cancellable])
        plainResolver.fulfill(1)
        cancellableResolver.fulfill(2)
        XCTAssertEqual(both.value, [1, 2])
        XCTAssertEqual(bothCancellable.value, [1, 2])
    }

    func testAsCancellableCancelRejectsButUnderlyingPromiseStaysPending() {
        let (promise, resolver) = Promise<String>.pending()
        let cancellable = cancelled(promise.asCancellable())
        XCTAssertTrue(promise.isPending)
        resolver.fulfill("later")
        XCTAssertEqual(promise.value, "later")
        XCTAssertTrue(cancellable.isRejected)
    }

    // MARK: Other initializers

    func testInitUsingPromiseAndCancelFunction() {
        let (existingPromise, existingResolver) = Promise<String>.pending()
        let cancelFunction: @Sendable () -> Void = { existingResolver.reject(FakeTaskCancelled()) }

        let cancellablePromise = CancellablePromise<String>(using: existingPromise, cancel: cancelFunction)
        cancellablePromise.cancel()
        XCTAssertEqual(cancellablePromise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(existingPromise.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertEqual(cancellablePromise.asPromise().error as? CancellablePromiseError, .cancelled)
    }

    func testInitUsingPromiseFollowsTheExistingPromise() {
        let (existingPromise, existingResolver) = Promise<String>.pending()
        let cancellablePromise = CancellablePromise<String>(using: existingPromise, cancel: {})
        existingResolver.fulfill("x")
        XCTAssertEqual(cancellablePromise.value, "x")
        XCTAssertEqual(cancellablePromise.asPromise().value, "x")
    }

    /// Task 1 and task 2 of the `cancelPromise` examples succeed, with "a" and "b".
    func finishTask1AndTask2(_ tasks: FakeBackend) {
        tasks.task("task1", String.self).succeed("a")
        tasks.task("task2", String.self).succeed("b")
    }

    /// The first `cancelPromise` example: sub-tasks combined with `when` and the cancelPromise.
    func cancelPromiseExample(_ tasks: FakeBackend) -> CancellablePromise<String> {
        let cancellablePromise = CancellablePromise<String> { cancelPromise in
            let task1 = tasks.start("task1", String.self)
            let task2 = tasks.start("task2", String.self)
            return when(fulfilled: [task1.asVoid(), task2.asVoid(), cancelPromise.asPromise().asVoid()]).then { _ in
                let values = [task1.value!, task2.value!]
                let task3 = tasks.start(values.joined(separator: "+"), String.self)
                return when(fulfilled: [task3, cancelPromise.asPromise().asVoid()]).map { $0[0] as! String }
            }
        }
        return cancellablePromise
    }

    /// As written, the example waits in `when(fulfilled:)` for `cancelPromise` to *fulfil*,
    /// which it only does once the wrapper has settled: it can only end by cancellation. The
    /// `when(_:while:)` rewrite below is the form that fulfils.
    func testCancelPromiseExampleAsWrittenWaitsForCancelPromiseAndEndsOnlyByCancel() {
        let tasks = FakeBackend()
        let cancellablePromise = cancelPromiseExample(tasks)
        finishTask1AndTask2(tasks)
        drainMainQueue()
        XCTAssertFalse(tasks.wasStarted("a+b"))
        XCTAssertTrue(cancellablePromise.isPending)
        cancellablePromise.cancel()
        XCTAssertEqual(cancellablePromise.error as? CancellablePromiseError, .cancelled)
    }

    func testCancelPromiseExampleCancelRejectsTheWholePromiseAndSkipsTask3() {
        let tasks = FakeBackend()
        let cancellablePromise = cancelPromiseExample(tasks)
        cancellablePromise.cancel()
        XCTAssertEqual(cancellablePromise.error as? CancellablePromiseError, .cancelled)
        finishTask1AndTask2(tasks)
        drainMainQueue()
        XCTAssertEqual(tasks.startedNames, ["task1", "task2"])
    }

    // MARK: when variants for cancelPromise

    func whileExample(_ tasks: FakeBackend) -> CancellablePromise<String> {
        let cancellablePromise = CancellablePromise<String> { cancelPromise in
            let task1 = tasks.start("task1", String.self)
            let task2 = tasks.start("task2", String.self)
            return when(fulfilled: [task1, task2], while: cancelPromise).then { values in
                let task3 = tasks.start(values.joined(separator: "+"), String.self)
                return when(task3, while: cancelPromise)
            }
        }
        return cancellablePromise
    }

    func testWhenWhileExampleFulfils() {
        let tasks = FakeBackend()
        let cancellablePromise = whileExample(tasks)
        finishTask1AndTask2(tasks)
        XCTAssertTrue(eventually(seconds: 10) { tasks.wasStarted("a+b") })
        tasks.task("a+b", String.self).succeed("c")
        XCTAssertTrue(eventually(seconds: 10) { !cancellablePromise.isPending })
        XCTAssertEqual(cancellablePromise.value, "c")
    }

    func testWhenWhileExampleCancelBeforeTask3NeverStartsIt() {
        let tasks = FakeBackend()
        let cancellablePromise = whileExample(tasks)
        tasks.task("task1", String.self).succeed("a")
        cancellablePromise.cancel()
        tasks.task("task2", String.self).succeed("b")
        drainMainQueue()
        XCTAssertEqual(tasks.startedNames, ["task1", "task2"])
        XCTAssertEqual(cancellablePromise.error as? CancellablePromiseError, .cancelled)
    }

    func testWhenWhileRejectsWithTheConditionsErrorAndKeepsTheType() {
        let (promise, _) = Promise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let waiting: Promise<Int> = when(promise, while: condition)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertEqual(waiting.error as? FakeTaskCancelled, FakeTaskCancelled())
    }

    func testWhenWhileFulfilsWithThePromiseWhenConditionFulfils() {
        let (promise, resolver) = Promise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let waiting = when(promise, while: condition)
        conditionResolver.fulfill(())
        resolver.fulfill(3)
        XCTAssertEqual(waiting.value, 3)
    }

    func testWhenFulfilledWhileRejectsWhenOneRejects() {
        let (p1, r1) = Promise<Int>.pending()
        let (p2, _) = Promise<Int>.pending()
        let (condition, _) = Promise<Void>.pending()
        let waiting = when(fulfilled: [p1, p2], while: condition)
        r1.reject(FakeTaskCancelled())
        XCTAssertEqual(waiting.error as? FakeTaskCancelled, FakeTaskCancelled())
    }

    func testWhenCancellableWhileAutoCancelCancelsThePromiseWhenConditionRejects() {
        let (cp, _) = CancellablePromise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let waiting = when(cp, while: condition, autoCancel: true)
        conditionResolver.reject(CancellablePromiseError.cancelled)
        XCTAssertEqual(waiting.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(cp.isCancelled)
        XCTAssertTrue(cp.isRejected)
    }

    func testWhenCancellableWhileWithoutAutoCancelLeavesThePromisePending() {
        let (cp, resolver) = CancellablePromise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let waiting = when(cp, while: condition)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertTrue(waiting.isRejected)
        XCTAssertFalse(cp.isCancelled)
        resolver.fulfill(1)
        XCTAssertEqual(cp.value, 1)
    }

    func testCancelPromiseIsFulfilledOnceTheWrapperSettles() {
        var captured: Promise<Void>?
        let (inner, innerResolver) = Promise<Int>.pending()
        let wrapper = CancellablePromise<Int> { cancelPromise in
            captured = cancelPromise
            return inner
        }
        innerResolver.fulfill(4)
        XCTAssertEqual(wrapper.value, 4)
        XCTAssertNotNil(captured?.value)  // fulfilled, never left pending
    }

    func testCancelPromiseRejectsWithCancelledOnCancel() {
        var captured: Promise<Void>?
        let wrapper = CancellablePromise<Int> { cancelPromise in
            captured = cancelPromise
            return Promise<Int>.pending().promise
        }
        wrapper.cancel()
        XCTAssertEqual(captured?.error as? CancellablePromiseError, .cancelled)
    }

    func testWrapperReturningCancellablePromiseCancelsIt() {
        let inner = CancellablePromise<Int>.pending()
        let wrapper = CancellablePromise<Int> { _ in inner.promise }
        wrapper.cancel()
        XCTAssertTrue(inner.promise.isCancelled)
        XCTAssertTrue(inner.promise.isRejected)
    }

    func testWrapperBodyThrowingRejects() {
        let wrapper = CancellablePromise<Int> { (_: Promise<Void>) -> Promise<Int> in throw FakeTaskCancelled() }
        XCTAssertEqual(wrapper.error as? FakeTaskCancelled, FakeTaskCancelled())
    }
}
