import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

// `when(_:while:)`: `isEnsured` (CancellablePromiseKit 0.3) and the bounded registrations on a
// long-lived `cancelPromise`.

final class WhenWhileTests: XCTestCase {
    // MARK: isEnsured

    func testEnsuredValueIsNotDeliveredWhenTheConditionRejectsBeforeTheHandlerRuns() {
        let outcome = outcomeWhenTheConditionRejectsRightAfterTheValue(isEnsured: true)
        XCTAssertEqual(outcome.error as? CancellablePromiseError, .cancelled)
        XCTAssertNil(outcome.value)
    }

    func testEnsuredCancellableFormIsNotDeliveredWhenTheConditionRejectsBeforeTheHandlerRuns() {
        let (cp, resolver) = CancellablePromise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let result = when(cp, while: condition, isEnsured: true, autoCancel: true)
        let outcome = mainQueueOutcome(of: result)
        resolver.fulfill(1)
        conditionResolver.reject(CancellablePromiseError.cancelled)
        XCTAssertTrue(outcome.arrived.wait(seconds: 10))
        XCTAssertEqual(outcome.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(cp.isCancelled, "the promise had fulfilled: there was nothing to cancel")
        XCTAssertEqual(cp.value, 1)
    }

    func testWithoutEnsuredAValueThatArrivedFirstIsDelivered() {
        let outcome = outcomeWhenTheConditionRejectsRightAfterTheValue(isEnsured: false)
        XCTAssertEqual(outcome.value, 1)
    }

    func testEnsuredValueWaitsForItsDeliveryOnTheMainQueue() {
        let (result, resolver, conditionResolver) = whenWhilePending(isEnsured: true)
        let deliveredOnMain = Flag()
        let delivered = Handshake()
        result.pipe { _ in
            if Thread.isMainThread { deliveredOnMain.raise() }
            delivered.signal()
        }
        let fulfilled = Handshake()
        DispatchQueue.global().async {
            resolver.fulfill(2)
            fulfilled.signal()
        }
        fulfilled.waitBlockingThisThread()  // the main queue's delivery block cannot run meanwhile
        XCTAssertTrue(result.isPending, "the value waits for its delivery block")
        XCTAssertTrue(delivered.wait(seconds: 10))
        XCTAssertEqual(result.value, 2)
        XCTAssertTrue(deliveredOnMain.value)
        conditionResolver.fulfill(())
    }

    func testEnsuredValueIsDeliveredAtOnceWhenTheMapQueueIsNil() {
        let saved = conf
        conf.Q = (map: nil, return: nil)
        defer { conf = saved }
        let (result, resolver, conditionResolver) = whenWhilePending(isEnsured: true)
        resolver.fulfill(3)
        XCTAssertEqual(result.value, 3)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertEqual(result.value, 3, "a rejection after the delivery changes nothing")
    }

    func testEnsuredConditionRejectingWhileThePromiseIsPendingRejectsWithItsOwnError() {
        let (result, resolver, conditionResolver) = whenWhilePending(isEnsured: true)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
        resolver.fulfill(1)
        drainMainQueue()
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
    }

    func testEnsuredConditionRejectedBeforeTheCallWinsOverAFulfilledPromise() {
        let condition = Promise<Void>(error: FakeTaskCancelled())
        let result = when(Promise.value(1), while: condition, isEnsured: true)
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
        let plain = when(Promise.value(1), while: condition)
        XCTAssertEqual(plain.value, 1, "without isEnsured the value that is there wins")
    }

    func testEnsuredRejectionOfThePromiseIsPassedOnAtOnce() {
        let (result, resolver, conditionResolver) = whenWhilePending(isEnsured: true)
        resolver.reject(FakeTaskCancelled())
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
        conditionResolver.fulfill(())
    }

    func testEnsuredConditionRejectingAfterTheDeliveryChangesNothing() {
        let (result, resolver, conditionResolver) = whenWhilePending(isEnsured: true)
        resolver.fulfill(4)
        _ = waitForResult(result)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertEqual(result.value, 4)
    }

    func testEnsuredCancellableFormWithAutoCancelCancelsAPendingPromise() {
        let (cp, resolver) = CancellablePromise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let result = when(cp, while: condition, isEnsured: true, autoCancel: true)
        conditionResolver.reject(FakeTaskCancelled())
        resolver.fulfill(0)  // too late: the cancellation settled it
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertTrue(cp.isCancelled)
        XCTAssertEqual(cp.error as? CancellablePromiseError, .cancelled)
    }

    func testEnsuredCancellableFormWithoutAutoCancelLeavesThePromiseAlone() {
        let (cp, resolver) = CancellablePromise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        let result: Promise<Int> = when(cp, while: condition, isEnsured: true)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertTrue(result.isRejected)
        XCTAssertFalse(cp.isCancelled)
        resolver.fulfill(1)
        XCTAssertEqual(cp.value, 1)
    }

    func testEnsuredFormInsideAWrapperDropsAValueWhenTheWrapperIsCancelledFirst() {
        let (task, taskResolver) = Promise<Int>.pending()
        let inner = Locked<Promise<Int>?>(nil)
        let wrapper = CancellablePromise<Int> { cancelPromise in
            let waiting = when(task, while: cancelPromise, isEnsured: true)
            inner.withLock { $0 = waiting }
            return waiting
        }
        let outcome = mainQueueOutcome(of: inner.withLock { $0 }!)
        taskResolver.fulfill(5)
        wrapper.cancel()
        XCTAssertTrue(outcome.arrived.wait(seconds: 10))
        XCTAssertEqual(outcome.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(wrapper.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: Registrations on a long-lived cancelPromise

    func testManyDroppedOutputsOverALongLivedCancelPromiseAreAllFreed() {
        var captured: Promise<Void>?
        let (work, workResolver) = Promise<Int>.pending()
        let wrapper = CancellablePromise<Int> { cancelPromise in
            captured = cancelPromise
            return work
        }
        let cancelPromise = captured!
        let freed = Counter()
        let rounds = 200_000
        withoutLogging {
            for round in 0..<rounds {
                let (watched, resolver) = Promise<Int>.pending()
                let probe = DeinitProbe { freed.increment() }
                _ = when(watched, while: cancelPromise).map(on: nil) { _ in probe }
                // Half the tasks finish; the other half are abandoned, never to settle.
                if round % 2 == 0 { resolver.fulfill(round) }
            }
        }
        XCTAssertEqual(freed.value, rounds, "every captured object is freed")
        XCTAssertTrue(cancelPromise.isPending)
        XCTAssertEqual(cancelPromise.waitingHandlerCount, 0)
        let storage = cancelPromise.handlerStorage
        XCTAssertLessThanOrEqual(storage.capacity, 64, "handler storage: \(storage)")
        workResolver.fulfill(1)
        XCTAssertEqual(wrapper.value, 1)
    }

    func testSettledOutputReleasesItsRegistrationAtOnce() {
        let (condition, conditionResolver) = Promise<Void>.pending()
        let (watched, resolver) = Promise<Int>.pending()
        weak var weakOutput: Promise<Int>?
        do {
            let output = when(watched, while: condition)
            weakOutput = output
            XCTAssertEqual(condition.waitingHandlerCount, 1)
            resolver.fulfill(1)
            XCTAssertEqual(output.value, 1)
            XCTAssertEqual(condition.waitingHandlerCount, 0, "the registration is released on settling")
        }
        XCTAssertNil(weakOutput, "the condition does not keep a settled output")
        XCTAssertTrue(condition.isPending)
        conditionResolver.fulfill(())
    }

    func testAutoCancelRegistrationReleasesTheSettledPromiseAtOnce() {
        let (condition, conditionResolver) = Promise<Void>.pending()
        weak var weakInput: CancellablePromise<Int>?
        var resolver: Resolver<Int>?
        var output: Promise<Int>?
        do {
            let (input, inputResolver) = CancellablePromise<Int>.pending()
            weakInput = input
            resolver = inputResolver
            output = when(input, while: condition, autoCancel: true)
        }
        XCTAssertNotNil(weakInput, "autoCancel keeps a pending input, to cancel it")
        resolver?.fulfill(2)
        resolver = nil
        XCTAssertEqual(output?.value, 2)
        XCTAssertEqual(condition.waitingHandlerCount, 0)
        XCTAssertNil(weakInput, "a settled input is released at once")
        conditionResolver.fulfill(())
    }

    func testDroppedPendingOutputWhoseTaskIsGoneIsFreedWhileTheConditionLivesOn() {
        let (condition, conditionResolver) = Promise<Void>.pending()
        weak var weakOutput: Promise<Int>?
        withoutLogging {
            let (watched, _) = Promise<Int>.pending()
            let output = when(watched, while: condition)
            weakOutput = output
        }
        XCTAssertNil(weakOutput)
        XCTAssertEqual(condition.waitingHandlerCount, 0)
        conditionResolver.fulfill(())
    }

    func testHeldOutputIsStillRejectedOnceItsTaskIsGone() {
        let (condition, conditionResolver) = Promise<Void>.pending()
        var output: Promise<Int>?
        withoutLogging {
            let (watched, _) = Promise<Int>.pending()
            output = when(watched, while: condition)
        }
        XCTAssertEqual(condition.waitingHandlerCount, 1, "a held output stays registered")
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertEqual(output?.error as? FakeTaskCancelled, FakeTaskCancelled())
    }

    func testConditionRejectingRejectsEveryLiveOutputInOrder() {
        let (condition, conditionResolver) = Promise<Void>.pending()
        var resolvers: [Resolver<Int>] = []
        var outputs: [Promise<Int>] = []
        let order = Recorder<Int>()
        let freed = Counter()
        withoutLogging {
            for index in 0..<1_000 {
                let (watched, resolver) = Promise<Int>.pending()
                resolvers.append(resolver)
                let output = when(watched, while: condition)
                output.catch(on: nil, policy: .allErrors) { _ in order.append(index) }
                outputs.append(output)
                for _ in 0..<10 {
                    let (dropped, _) = Promise<Int>.pending()
                    let probe = DeinitProbe { freed.increment() }
                    _ = when(dropped, while: condition).map(on: nil) { _ in probe }
                }
            }
        }
        XCTAssertEqual(freed.value, 10_000)
        XCTAssertEqual(condition.waitingHandlerCount, 1_000)
        XCTAssertLessThanOrEqual(condition.handlerStorage.capacity, 4_096)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertEqual(outputs.filter { $0.error as? FakeTaskCancelled == FakeTaskCancelled() }.count, 1_000)
        XCTAssertEqual(order.all, Array(0..<1_000))
        for resolver in resolvers { resolver.fulfill(0) }
    }

    // MARK: Threads

    func testResultSettlesOnceWhenTheConditionRejectsWhileThePromiseFulfilsOnOtherThreads() {
        let saved = conf
        conf.Q.map = DispatchQueue.global()
        conf.logHandler = { _ in }  // the abandoned resolvers below report pending promises
        defer { conf = saved }
        for round in 0..<2_000 {
            let (watched, resolver) = Promise<Int>.pending()
            let (condition, conditionResolver) = Promise<Void>.pending()
            let ensured = round % 2 == 0
            let result = when(watched, while: condition, isEnsured: ensured)
            let settlements = Counter()
            let settled = Handshake()
            result.pipe { _ in
                settlements.increment()
                settled.signal()
            }
            DispatchQueue.concurrentPerform(iterations: 3) { index in
                switch index {
                case 0: resolver.fulfill(1)
                case 1: conditionResolver.reject(FakeTaskCancelled())
                default:
                    // Registering meanwhile sweeps the condition's list while it settles.
                    for _ in 0..<4 { _ = when(Promise<Int>.pending().promise, while: condition) }
                }
            }
            settled.wait()
            XCTAssertEqual(settlements.value, 1)
            switch result.result {
            case .fulfilled(let value)?: XCTAssertEqual(value, 1)
            case .rejected(let error)?:
                XCTAssertTrue(
                    error is FakeTaskCancelled || (ensured && error as? CancellablePromiseError == .cancelled),
                    "\(error)")
            case nil: XCTFail("pending")
            }
        }
    }

    // MARK: Helpers

    /// `when(watched, while: condition, isEnsured:)` of a pending promise and a pending
    /// condition, with the resolvers of both.
    private func whenWhilePending(
        isEnsured: Bool
    ) -> (result: Promise<Int>, resolver: Resolver<Int>, conditionResolver: Resolver<Void>) {
        let (watched, resolver) = Promise<Int>.pending()
        let (condition, conditionResolver) = Promise<Void>.pending()
        return (when(watched, while: condition, isEnsured: isEnsured), resolver, conditionResolver)
    }

    /// What a handler of `promise` running on the main queue (the default) saw.
    private final class MainQueueOutcome<T>: @unchecked Sendable {
        let arrived = Handshake()
        var value: T?
        var error: Error?
    }

    /// What the main-queue handler of `whenWhilePending(isEnsured:)` saw when the value (1)
    /// arrived and the condition then rejected, both before that handler ran (this thread is
    /// the main thread).
    private func outcomeWhenTheConditionRejectsRightAfterTheValue(isEnsured: Bool) -> MainQueueOutcome<Int> {
        let (result, resolver, conditionResolver) = whenWhilePending(isEnsured: isEnsured)
        let outcome = mainQueueOutcome(of: result)
        resolver.fulfill(1)
        conditionResolver.reject(FakeTaskCancelled())
        XCTAssertTrue(outcome.arrived.wait(seconds: 10))
        return outcome
    }

    private func mainQueueOutcome<T>(of promise: Promise<T>) -> MainQueueOutcome<T> {
        let outcome = MainQueueOutcome<T>()
        promise.done { value in
            outcome.value = value
            outcome.arrived.signal()
        }.catch(policy: .allErrors) { error in
            outcome.error = error
            outcome.arrived.signal()
        }
        return outcome
    }

    /// Runs `body` with `conf.logHandler` silenced: abandoned resolvers report pending promises.
    private func withoutLogging(_ body: () -> Void) {
        let previous = conf.logHandler
        conf.logHandler = { _ in }
        defer { conf.logHandler = previous }
        body()
    }
}
