import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

/// Thread races on tokens. Each runs ≥ 10,000 rounds; run them under ThreadSanitizer too.
final class TokenStressTests: XCTestCase {
    /// Runs `body(threadIndex)` on `count` dedicated threads and waits for all of them.
    /// All threads are started first and then released together, so their rounds overlap.
    private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        let ready = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        for index in 0..<count {
            group.enter()
            let thread = Thread {
                ready.signal()
                // Real threads: each waits at the gate so that all are released together.
                gate.wait()
                body(index)
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        // Real threads: every thread must have started before the gate opens.
        for _ in 0..<count { ready.wait() }
        for _ in 0..<count { gate.signal() }
        // Real clock: the deadline that turns a deadlock into a failure instead of a hang.
        XCTAssertEqual(group.wait(timeout: .now() + 300), .success, "threads did not finish (deadlock?)")
    }

    func testEightThreadsCancelWhileOthersRegisterAndRemoveHandlers() {
        let rounds = 10_000
        let threads = 8
        let requests = (0..<rounds).map { _ in CancellationRequest() }
        let runs = (0..<rounds).map { _ in Counter() }
        let expected = (0..<rounds).map { _ in Counter() }
        let spies = (0..<rounds).map { _ in TokenCancellableSpy() }
        let box = UncheckedBox((requests, runs, expected, spies))
        onThreads(threads) { thread in
            let (requests, runs, expected, spies) = box.value
            for round in 0..<rounds {
                let token = requests[round].token
                switch thread {
                case 0, 1:
                    requests[round].cancel()
                case 2, 3, 4:
                    token.onCancel { runs[round].increment() }
                    expected[round].increment()
                case 5:
                    token.onComplete { cancelled in
                        XCTAssertTrue(cancelled)
                        runs[round].increment()
                    }
                    expected[round].increment()
                case 6:
                    // Removed before the cancellation: never runs; too late: it runs.
                    let registration = token.onCancel { runs[round].increment() }
                    if !registration.remove() { expected[round].increment() }
                default:
                    // Registered before the cancellation, the spy is cancelled by the cancelling
                    // thread, which may still be running handlers while `isCancelled` already
                    // reads `true` here (state is decided under the lock, handlers run after
                    // it); registered after, it is cancelled at once, on this thread. Either
                    // way exactly once, checked below once every thread is done.
                    token.register(spies[round])
                    _ = token.isCancelled
                    _ = token.isCompleted
                }
            }
        }
        for round in 0..<rounds {
            XCTAssertTrue(requests[round].token.isCancelled)
            XCTAssertEqual(runs[round].value, expected[round].value, "round \(round)")
            XCTAssertEqual(requests[round].token.pendingHandlerCount, 0)
            XCTAssertEqual(spies[round].cancelCount, 1, "round \(round)")
        }
    }

    func testReleasingRequestsWhileOtherThreadsRegister() {
        let rounds = 10_000
        let tokens: [CancellationToken]
        var requests: [CancellationRequest?] = (0..<rounds).map { _ in CancellationRequest() }
        tokens = requests.map { $0!.token }
        let completions = (0..<rounds).map { _ in Recorder<Bool>() }
        let registered = (0..<rounds).map { _ in Counter() }
        let box = UncheckedBox((tokens, completions, registered))
        let releaser = UncheckedBox(UnsafeMutableBufferPointer<CancellationRequest?>.allocate(capacity: rounds))
        _ = releaser.value.initialize(from: requests)
        requests = []
        onThreads(4) { thread in
            let (tokens, completions, registered) = box.value
            for round in 0..<rounds {
                if thread == 0 {
                    releaser.value[round] = nil  // the request's deinit completes "not cancelled"
                } else {
                    tokens[round].onComplete { completions[round].append($0) }
                    registered[round].increment()
                }
            }
        }
        releaser.value.deallocate()
        for round in 0..<rounds {
            XCTAssertEqual(completions[round].all, Array(repeating: false, count: registered[round].value))
            XCTAssertTrue(tokens[round].isCompleted)
        }
    }

    func testCombinatorsUnderConcurrentCompletion() {
        let rounds = 10_000
        let a = (0..<rounds).map { _ in CancellationRequest() }
        let b = (0..<rounds).map { _ in CancellationRequest() }
        let either = (0..<rounds).map { a[$0].token || b[$0].token }
        let both = (0..<rounds).map { a[$0].token && b[$0].token }
        let mapped = (0..<rounds).map { a[$0].token.map { true } }
        let box = UncheckedBox((a, b))
        onThreads(3) { thread in
            let (a, b) = box.value
            for round in 0..<rounds {
                switch thread {
                case 0: a[round].cancel()
                case 1: b[round].cancel()
                default: _ = a[round].token.flatMap { b[round].token }
                }
            }
        }
        for round in 0..<rounds {
            XCTAssertTrue(either[round].isCancelled)
            XCTAssertTrue(both[round].isCancelled)
            XCTAssertTrue(mapped[round].isCancelled)
        }
    }

    func testDerivingAndDroppingTokensWhileOthersCancelRunsEachHandlerExactlyOnce() {
        let rounds = 10_000
        let root = CancellationRequest()  // long-lived, never cancelled
        let a = (0..<rounds).map { _ in CancellationRequest() }
        let b = (0..<rounds).map { _ in CancellationRequest() }
        let runs = (0..<rounds).map { _ in Counter() }
        let expected = (0..<rounds).map { _ in Counter() }
        let spies = (0..<rounds).map { _ in TokenCancellableSpy() }
        let transformsFreed = Counter()
        let box = UncheckedBox((a, b, runs, expected, spies))
        onThreads(6) { thread in
            let (a, b, runs, expected, spies) = box.value
            for round in 0..<rounds {
                switch thread {
                case 0:
                    a[round].cancel()
                case 1:
                    b[round].cancel()
                case 2:
                    // Dropped at once: the handler keeps both derived tokens alive.
                    let probe = DeinitProbe { transformsFreed.increment() }
                    expected[round].increment()
                    (a[round].token || b[round].token).map { probe.touchedTrue() }.onCancel {
                        runs[round].increment()
                    }
                case 3:
                    expected[round].increment()
                    (a[round].token && b[round].token).onComplete { cancelled in
                        XCTAssertTrue(cancelled)
                        runs[round].increment()
                    }
                    a[round].token.flatMap { b[round].token }.register(spies[round])
                case 4:
                    // Removed while `a` may be cancelling: it runs exactly when removal fails.
                    let registration = (root.token || a[round].token).onCancel { runs[round].increment() }
                    if !registration.remove() { expected[round].increment() }
                default:
                    // Made and dropped over the long-lived root, nothing registered.
                    _ = root.token.map { true } && a[round].token
                    _ = root.token || b[round].token
                    root.token.map { true }.onCancel { XCTFail("the root is never cancelled") }.remove()
                }
            }
        }
        for round in 0..<rounds {
            XCTAssertEqual(runs[round].value, expected[round].value, "round \(round)")
            XCTAssertEqual(spies[round].cancelCount, 1, "round \(round)")
            XCTAssertEqual(a[round].token.pendingHandlerCount, 0)
            XCTAssertEqual(b[round].token.pendingHandlerCount, 0)
        }
        XCTAssertEqual(transformsFreed.value, rounds)
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
    }

    func testDerivedTokensOfOneLongLivedTokenFromSeveralThreadsLeaveItEmpty() {
        let rounds = 10_000
        let root = CancellationRequest()  // long-lived, cancelled at the end
        let other = CancellationRequest()
        let kept = (0..<4).map { _ in Recorder<CancellationToken>() }
        let cancels = Counter()
        let box = UncheckedBox(kept)
        onThreads(4) { thread in
            for round in 0..<rounds {
                let derived: CancellationToken
                switch thread {
                case 0: derived = root.token.map { true }
                case 1: derived = root.token.flatMap { other.token }
                case 2: derived = root.token && other.token
                default: derived = root.token || other.token
                }
                if round % 1_000 == 0 {
                    // A few are kept, by their user or by a handler; the rest are dropped.
                    box.value[thread].append(derived)
                    derived.onCancel { cancels.increment() }
                }
            }
        }
        XCTAssertEqual(root.token.pendingHandlerCount, 4 * rounds / 1_000)
        root.cancel()
        other.cancel()
        XCTAssertEqual(cancels.value, 4 * rounds / 1_000)
        XCTAssertTrue(kept.allSatisfy { $0.all.allSatisfy(\.isCancelled) })
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
        XCTAssertEqual(other.token.pendingHandlerCount, 0)
    }

    func testTokenPromiseSettlesOnceWhenCancelRacesFulfilment() {
        let rounds = 10_000
        let requests = (0..<rounds).map { _ in CancellationRequest() }
        var resolvers: [Resolver<Int>] = []
        let taskCancels = (0..<rounds).map { _ in Counter() }
        let promises = (0..<rounds).map { round in
            Promise<Int>(cancellationToken: requests[round].token) { resolver in
                resolvers.append(resolver)
                return { taskCancels[round].increment() }
            }
        }
        let box = UncheckedBox((requests, resolvers, promises))
        onThreads(3) { thread in
            let (requests, resolvers, promises) = box.value
            for round in 0..<rounds {
                switch thread {
                case 0: requests[round].cancel()
                case 1: resolvers[round].fulfill(round)
                default: promises[round].cancellize().cancel()
                }
            }
        }
        for round in 0..<rounds {
            XCTAssertLessThanOrEqual(taskCancels[round].value, 1)
            switch promises[round].result {
            case .fulfilled(let value)?:
                XCTAssertEqual(value, round)
            case .rejected(let error)?:
                XCTAssertEqual(error as? CancellablePromiseError, .cancelled)
            case nil:
                XCTFail("round \(round) stayed pending")
            }
            XCTAssertEqual(requests[round].token.pendingHandlerCount, 0)
        }
    }

    func testCancelOnTokenRacingSettlementLeavesNoRegistration() {
        let rounds = 10_000
        let request = CancellationRequest()  // long-lived, never cancelled
        let pairs = (0..<rounds).map { _ in CancellablePromise<Int>.pending() }
        let box = UncheckedBox(pairs)
        onThreads(2) { thread in
            for round in 0..<rounds {
                if thread == 0 {
                    box.value[round].promise.cancel(on: request.token)
                } else {
                    box.value[round].resolver.fulfill(round)
                }
            }
        }
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
    }

    func testHandlersCancellingEachOthersRequestsFromTwoThreadsDoNotDeadlock() {
        for _ in 0..<10_000 {
            let a = CancellationRequest()
            let b = CancellationRequest()
            let box = UncheckedBox((a, b))
            a.token.onCancel { box.value.1.cancel() }
            b.token.onCancel { box.value.0.cancel() }
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 { box.value.0.cancel() } else { box.value.1.cancel() }
            }
            XCTAssertTrue(a.isCancelled && b.isCancelled)
        }
    }
}
