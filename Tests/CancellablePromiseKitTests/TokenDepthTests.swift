import CancellablePromiseKit
import Dispatch
import PromiseCore
import XCTest

// Derived tokens many levels deep complete without recursing once per level (a chain of
// 100,000 tokens each mapped from the one before overflowed the stack), and handlers keep
// their synchronous semantics.
final class TokenDepthTests: XCTestCase {
    private let depth = 100_000

    func testCancellingAHundredThousandLevelsOfMapRunsTheDeepestHandler() {
        let request = CancellationRequest()
        var tokens = [request.token]
        tokens.reserveCapacity(depth + 1)
        for _ in 0..<depth { tokens.append(tokens[tokens.count - 1].map { true }) }
        let ran = Counter()
        tokens[depth].onCancel { ran.increment() }
        request.cancel()
        XCTAssertEqual(ran.value, 1, "the deepest token's handler ran, once, before cancel() returned")
        XCTAssertTrue(tokens[depth].isCancelled)
    }

    func testReleasingAHundredThousandLevelsOfFlatMapCompletesThemNotCancelled() {
        var request: CancellationRequest? = CancellationRequest()
        var tokens = [request!.token]
        tokens.reserveCapacity(depth + 1)
        for _ in 0..<depth {
            let other = CancellationRequest()
            tokens.append(tokens[tokens.count - 1].flatMap { other.token })
        }
        let outcome = Locked<Bool?>(nil)
        tokens[depth].onComplete { cancelled in outcome.withLock { $0 = cancelled } }
        let deepest = tokens[depth]
        tokens = []
        request = nil  // the root completes "not cancelled", and so does every level below it
        XCTAssertEqual(outcome.withLock { $0 }, false)
        XCTAssertTrue(deepest.isCompleted)
        XCTAssertFalse(deepest.isCancelled)
    }

    func testAHundredThousandLevelsOfOrCompleteIteratively() {
        let request = CancellationRequest()
        let never = CancellationRequest()
        var token = request.token
        for _ in 0..<depth { token = token || never.token }
        let ran = Counter()
        token.onCancel { ran.increment() }
        request.cancel()
        XCTAssertEqual(ran.value, 1)
        withExtendedLifetime(never) {}
    }

    func testAHandlerThatCancelsAnotherRequestSeesItsHandlersRunBeforeCancelReturns() {
        let first = CancellationRequest()
        let second = CancellationRequest()
        let log = Locked<[String]>([])
        second.token.map { true }.onCancel { log.withLock { $0.append("second's derived handler") } }
        first.token.map { true }.onCancel {
            second.cancel()
            log.withLock { $0.append("after second.cancel()") }
        }
        first.cancel()
        XCTAssertEqual(log.withLock { $0 }, ["second's derived handler", "after second.cancel()"])
    }

    func testEachTokensHandlersRunInRegistrationOrderAndBeforeCancelReturns() {
        let request = CancellationRequest()
        let log = Locked<[String]>([])
        let derived = request.token.map { true }
        request.token.onCancel { log.withLock { $0.append("root 1") } }
        derived.onCancel { log.withLock { $0.append("derived 1") } }
        let deeper = derived.map { true }
        deeper.onCancel { log.withLock { $0.append("deeper 1") } }
        derived.onCancel { log.withLock { $0.append("derived 2") } }
        request.token.onCancel { log.withLock { $0.append("root 2") } }
        request.cancel()
        let order = log.withLock { $0 }
        XCTAssertEqual(Set(order), ["root 1", "root 2", "derived 1", "derived 2", "deeper 1"])
        XCTAssertLessThan(order.firstIndex(of: "root 1")!, order.firstIndex(of: "root 2")!)
        XCTAssertLessThan(order.firstIndex(of: "derived 1")!, order.firstIndex(of: "derived 2")!)
        XCTAssertLessThan(order.firstIndex(of: "derived 1")!, order.firstIndex(of: "deeper 1")!)
    }

    func testDeepChainsCancelledFromSeveralThreadsAtOnceEachRunTheirHandlerOnce() {
        let chains = 8
        let requests = (0..<chains).map { _ in CancellationRequest() }
        let counters = (0..<chains).map { _ in Counter() }
        var deepest: [CancellationToken] = []
        for chain in 0..<chains {
            var token = requests[chain].token
            for _ in 0..<10_000 { token = token.map { true } }
            token.onCancel { counters[chain].increment() }
            deepest.append(token)
        }
        DispatchQueue.concurrentPerform(iterations: chains * 2) { index in
            requests[index % chains].cancel()
        }
        for chain in 0..<chains { XCTAssertEqual(counters[chain].value, 1, "chain \(chain)") }
        withExtendedLifetime(deepest) {}
    }
}
