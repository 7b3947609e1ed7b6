import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

final class TokenTests: XCTestCase {
    /// A queue named `label` that carries `value` under the returned key, so that a closure can
    /// check that it runs on it.
    private func makeMarkedQueue(label: String, value: Int) -> (DispatchQueue, DispatchSpecificKey<Int>) {
        let key = DispatchSpecificKey<Int>()
        let queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: value)
        return (queue, key)
    }

    // MARK: State

    func testNewTokenIsPendingAndCancelCompletesItCancelled() {
        let request = CancellationRequest()
        XCTAssertFalse(request.token.isCancelled)
        XCTAssertFalse(request.token.isCompleted)
        XCTAssertFalse(request.isCancelled)
        request.cancel()
        XCTAssertTrue(request.token.isCancelled)
        XCTAssertTrue(request.token.isCompleted)
        XCTAssertTrue(request.isCancelled)
        XCTAssertEqual("\(request.token)", "CancellationToken(cancelled)")
        XCTAssertEqual("\(request)", "CancellationRequest(cancelled)")
    }

    func testReleasingRequestCompletesTokenNotCancelled() {
        var request: CancellationRequest? = CancellationRequest()
        let token = request!.token
        XCTAssertEqual("\(token)", "CancellationToken(pending)")
        request = nil
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
        XCTAssertEqual("\(token)", "CancellationToken(not cancelled)")
    }

    func testCheckCancellationThrowsOnlyOnceCancelled() throws {
        let request = CancellationRequest()
        try request.token.checkCancellation()
        request.cancel()
        XCTAssertThrowsError(try request.token.checkCancellation()) { error in
            XCTAssertEqual(error as? CancellablePromiseError, .cancelled)
        }
    }

    // MARK: onCancel

    func testOnCancelRunsOnceSynchronouslyOnCancellingThread() {
        let request = CancellationRequest()
        let runs = Counter()
        let ranOnThisThread = Flag()
        let thread = pthread_self()
        request.token.onCancel {
            runs.increment()
            if pthread_equal(pthread_self(), thread) != 0 { ranOnThisThread.raise() }
        }
        request.cancel()
        XCTAssertEqual(runs.value, 1)  // before cancel() returned
        XCTAssertTrue(ranOnThisThread.value)
        request.cancel()
        XCTAssertEqual(runs.value, 1)
    }

    func testOnCancelRegisteredAfterCancellationRunsAtOnceExactlyOnce() {
        let request = CancellationRequest()
        request.cancel()
        let runs = Counter()
        let registration = request.token.onCancel { runs.increment() }
        XCTAssertEqual(runs.value, 1)
        request.cancel()
        XCTAssertFalse(registration.remove())
        XCTAssertEqual(runs.value, 1)
    }

    func testOnCancelHandlersRunInRegistrationOrder() {
        let request = CancellationRequest()
        let order = Recorder<Int>()
        for index in 0..<5 { request.token.onCancel { order.append(index) } }
        request.cancel()
        XCTAssertEqual(order.all, [0, 1, 2, 3, 4])
    }

    func testOnCancelWithQueueRunsOnThatQueue() {
        let (queue, key) = makeMarkedQueue(label: "token.handler", value: 42)
        let request = CancellationRequest()
        let ran = Handshake()
        request.token.onCancel(on: queue) {
            XCTAssertEqual(DispatchQueue.getSpecific(key: key), 42)
            ran.signal()
        }
        request.cancel()
        XCTAssertTrue(ran.wait(seconds: 5), "handler ran on its queue")
        let late = Handshake()
        request.token.onCancel(on: queue) {
            XCTAssertEqual(DispatchQueue.getSpecific(key: key), 42)
            late.signal()
        }
        XCTAssertTrue(late.wait(seconds: 5), "late handler ran on its queue")
    }

    func testOnCancelIsSkippedWhenTokenCompletesNotCancelled() {
        var request: CancellationRequest? = CancellationRequest()
        let runs = Counter()
        request!.token.onCancel { runs.increment() }
        request = nil
        XCTAssertEqual(runs.value, 0)
    }

    // MARK: onComplete

    func testOnCompleteReceivesTrueWhenCancelled() {
        let request = CancellationRequest()
        let values = Recorder<Bool>()
        request.token.onComplete { values.append($0) }
        request.cancel()
        request.token.onComplete { values.append($0) }
        XCTAssertEqual(values.all, [true, true])
    }

    func testOnCompleteReceivesFalseWhenRequestIsReleased() {
        var request: CancellationRequest? = CancellationRequest()
        let token = request!.token
        let values = Recorder<Bool>()
        token.onComplete { values.append($0) }
        request = nil
        token.onComplete { values.append($0) }
        XCTAssertEqual(values.all, [false, false])
    }

    func testOnCompleteWithQueueRunsOnThatQueue() {
        let (queue, key) = makeMarkedQueue(label: "token.complete", value: 7)
        let request = CancellationRequest()
        let ran = Handshake()
        request.token.onComplete(on: queue) { cancelled in
            XCTAssertTrue(cancelled)
            XCTAssertEqual(DispatchQueue.getSpecific(key: key), 7)
            ran.signal()
        }
        request.cancel()
        XCTAssertTrue(ran.wait(seconds: 5), "onComplete ran on its queue")
    }

    // MARK: Removing registrations

    func testRemovedHandlerNeverRunsAndIsReleased() {
        let request = CancellationRequest()
        let released = Counter()
        let runs = Counter()
        var registration: CancellationRegistration?
        do {
            let probe = DeinitProbe { released.increment() }
            registration = request.token.onCancel {
                probe.touch()
                runs.increment()
            }
        }
        XCTAssertEqual(released.value, 0)
        XCTAssertTrue(registration!.remove())
        XCTAssertEqual(released.value, 1)
        XCTAssertFalse(registration!.remove())
        request.cancel()
        XCTAssertEqual(runs.value, 0)
    }

    func testRegisterAndRemoveCyclesDoNotAccumulateHandlers() {
        let request = CancellationRequest()
        for _ in 0..<10_000 {
            let registration = request.token.onCancel {}
            registration.remove()
        }
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
        var kept: [CancellationRegistration] = []
        for _ in 0..<100 { kept.append(request.token.onComplete { _ in }) }
        for registration in kept.reversed() { XCTAssertTrue(registration.remove()) }
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
    }

    func testRemovingAMiddleRegistrationKeepsTheOthers() {
        let request = CancellationRequest()
        let order = Recorder<Int>()
        let registrations = (0..<5).map { index in request.token.onCancel { order.append(index) } }
        registrations[1].remove()
        registrations[3].remove()
        request.cancel()
        XCTAssertEqual(order.all, [0, 2, 4])
    }

    // MARK: Completion releases handlers (no leaks)

    func testCompletionReleasesHandlersAndWhatTheyCaptured() {
        let released = Counter()
        let request = CancellationRequest()
        do {
            let probeA = DeinitProbe { released.increment() }
            let probeB = DeinitProbe { released.increment() }
            request.token.onCancel { probeA.touch() }
            request.token.onComplete { _ in probeB.touch() }
        }
        XCTAssertEqual(released.value, 0)
        request.cancel()
        XCTAssertEqual(released.value, 2)
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
    }

    func testReleasingRequestReleasesHandlersOfTokenKeptByTheTask() {
        let released = Counter()
        var request: CancellationRequest? = CancellationRequest()
        let token = request!.token  // the task keeps its token
        do {
            let probe = DeinitProbe { released.increment() }
            token.onCancel { probe.touch() }
            token.onComplete { _ in probe.touch() }
        }
        request = nil
        XCTAssertEqual(released.value, 1)
        XCTAssertEqual(token.pendingHandlerCount, 0)
    }

    func testTokenAndRequestAreFreedWithTheirHandlers() {
        weak var weakToken: CancellationToken?
        weak var weakRequest: CancellationRequest?
        do {
            let request = CancellationRequest()
            weakRequest = request
            weakToken = request.token
            request.token.onCancel { [weak request] in _ = request }
        }
        XCTAssertNil(weakRequest)
        XCTAssertNil(weakToken)
    }

    // MARK: register(_:) holds weakly

    func testRegisteredCancellableIsCancelledOnce() {
        let request = CancellationRequest()
        let spy = TokenCancellableSpy()
        request.token.register(spy)
        XCTAssertEqual(spy.cancelCount, 0)
        request.cancel()
        request.cancel()
        XCTAssertEqual(spy.cancelCount, 1)
        XCTAssertTrue(spy.isCancelled)
    }

    func testRegisterHoldsTheCancellableWeakly() {
        let request = CancellationRequest()
        let freed = Counter()
        weak var weakSpy: TokenCancellableSpy?
        do {
            let spy = TokenCancellableSpy { freed.increment() }
            weakSpy = spy
            request.token.register(spy)
        }
        XCTAssertNil(weakSpy)
        XCTAssertEqual(freed.value, 1)
        request.cancel()  // nothing to cancel, no crash
    }

    func testRegisterAfterCancellationCancelsAtOnce() {
        let request = CancellationRequest()
        request.cancel()
        let spy = TokenCancellableSpy()
        request.token.register(spy)
        XCTAssertEqual(spy.cancelCount, 1)
    }

    func testRegisterWithQueueCallsCancelOnThatQueue() {
        let queue = TokenCancellableSpy.queue(labelled: "token.register")
        let request = CancellationRequest()
        let spy = TokenCancellableSpy.registered(with: request.token, on: queue)
        request.cancel()
        XCTAssertEqual(spy.cancelQueueLabels(after: queue), ["token.register"])

        let late = TokenCancellableSpy.registered(with: request.token, on: queue)
        XCTAssertEqual(late.cancelQueueLabels(after: queue), ["token.register"])
    }

    func testRegisterWithoutQueueCallsCancelSynchronously() {
        let request = CancellationRequest()
        let spy = TokenCancellableSpy()
        request.token.register(spy)
        request.cancel()
        XCTAssertEqual(spy.cancelQueueLabels, [nil])
    }

    func testReleasedCancellablesAreSweptFromLongLivedToken() {
        let request = CancellationRequest()
        for _ in 0..<10_000 {
            let spy = TokenCancellableSpy()
            request.token.register(spy)
        }
        XCTAssertLessThan(request.token.pendingHandlerCount, 64)
        let alive = (0..<100).map { _ in TokenCancellableSpy() }
        for spy in alive { request.token.register(spy) }
        for _ in 0..<1_000 { request.token.register(TokenCancellableSpy()) }
        request.cancel()
        XCTAssertTrue(alive.allSatisfy { $0.cancelCount == 1 })
    }

    /// A list of handlers only is never swept (there is nothing to drop); registered objects
    /// added to it later are swept as it grows, and the handlers all still run.
    func testReleasedCancellablesAddedAfterManyHandlersAreSwept() {
        let request = CancellationRequest()
        let ran = Counter()
        for _ in 0..<1_000 { request.token.onCancel { ran.increment() } }
        XCTAssertEqual(request.token.pendingHandlerCount, 1_000)
        for _ in 0..<10_000 { request.token.register(TokenCancellableSpy()) }
        // Swept each time the list doubles: at most about twice the 1,000 live handlers.
        XCTAssertLessThanOrEqual(request.token.pendingHandlerCount, 2_048)
        request.cancel()
        XCTAssertEqual(ran.value, 1_000)
    }

    func testRequestIsCancellableSoTokensCanBeLinked() {
        let parent = CancellationRequest()
        let child = CancellationRequest()
        parent.token.register(child)
        parent.cancel()
        XCTAssertTrue(child.token.isCancelled)
    }

    // MARK: Reentrancy (no handler runs under the lock)

    func testHandlerThatCancelsTheSameRequestDoesNotDeadlock() {
        let request = CancellationRequest()
        let runs = Counter()
        let box = UncheckedBox(request)
        request.token.onCancel {
            box.value.cancel()
            runs.increment()
        }
        runWithoutDeadlock { box.value.cancel() }
        XCTAssertEqual(runs.value, 1)
    }

    func testHandlerThatRegistersOnTheSameTokenDoesNotDeadlock() {
        let request = CancellationRequest()
        let inner = Counter()
        let token = request.token
        token.onCancel {
            XCTAssertTrue(token.isCancelled)
            XCTAssertTrue(token.isCompleted)
            token.onCancel { inner.increment() }  // runs at once
            token.onComplete { _ in inner.increment() }
        }
        let box = UncheckedBox(request)
        runWithoutDeadlock { box.value.cancel() }
        XCTAssertEqual(inner.value, 2)
    }

    func testHandlerThatRemovesRegistrationsDoesNotDeadlock() {
        let request = CancellationRequest()
        let token = request.token
        let later = SendableBox<CancellationRegistration?>(nil)
        let laterRan = Flag()
        token.onCancel { XCTAssertFalse(later.value!.remove()) }  // already taken out: runs anyway
        later.value = token.onCancel { laterRan.raise() }
        let box = UncheckedBox(request)
        runWithoutDeadlock { box.value.cancel() }
        XCTAssertTrue(laterRan.value)
    }

    func testHandlerReleasingTheRequestDuringDeinitCompletionDoesNotDeadlock() {
        var request: CancellationRequest? = CancellationRequest()
        let token = request!.token
        let seen = Recorder<Bool>()
        token.onComplete { cancelled in
            seen.append(cancelled)
            token.onComplete { seen.append($0) }
            _ = token.isCompleted
        }
        request = nil
        XCTAssertEqual(seen.all, [false, false])
    }

    // MARK: Each token has its own lock and runs its own handlers

    func testSlowHandlerOfOneTokenDoesNotDelayAnotherToken() {
        let slow = CancellationRequest()
        let fast = CancellationRequest()
        let release = Handshake()
        let slowStarted = Handshake()
        slow.token.onCancel {
            slowStarted.signal()
            release.wait()
        }
        let fastRan = Counter()
        fast.token.onCancel { fastRan.increment() }
        let slowBox = UncheckedBox(slow)
        DispatchQueue.global().async { slowBox.value.cancel() }
        XCTAssertTrue(slowStarted.wait(seconds: 5))
        fast.cancel()  // runs its handler at once although the other token's handler blocks
        XCTAssertEqual(fastRan.value, 1)
        XCTAssertTrue(slow.token.isCancelled)  // and the blocked token is still queryable
        release.signal()
    }
}
