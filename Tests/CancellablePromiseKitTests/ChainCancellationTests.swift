import CancellablePromiseKit
import Dispatch
import XCTest

final class ChainCancellationTests: XCTestCase {
    func testCancelRejectsPendingPromiseAndCallsCancelClosureOnce() {
        let (cp, resolver, cancels) = pendingPromiseCountingCancels()
        cp.cancel()
        cp.cancel()
        XCTAssertEqual(cancels.value, 1)
        XCTAssertTrue(cp.isCancelled)
        XCTAssertEqual(cp.error as? CancellablePromiseError, .cancelled)
        resolver.fulfill(1)
        XCTAssertEqual(cp.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellingTailCancelsHeadAndNoLaterBodyRuns() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let mapped = Flag()
        let ensured = Flag()
        let caught = SendableBox<Error?>(nil)
        let tail = head.map(on: nil) { _ -> Int in
            mapped.raise()
            return 1
        }.ensure(on: nil) { ensured.raise() }
        tail.catch(on: nil, policy: .allErrors) { caught.value = $0 }
        tail.cancel()
        XCTAssertTrue(head.isRejected)
        XCTAssertTrue(tail.isRejected)
        resolver.fulfill(1)
        XCTAssertFalse(mapped.value)
        XCTAssertTrue(ensured.value)
        XCTAssertTrue(caught.value?.isCancelled ?? false)
    }

    func testThenJoinsReturnedCancellableChain() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let innerCancelled = Flag()
        let tail = head.then(on: nil) { _ in
            CancellablePromise<Int> { _ in { innerCancelled.raise() } }
        }
        resolver.fulfill(1)
        XCTAssertTrue(tail.isPending)
        head.cancel()
        XCTAssertTrue(innerCancelled.value)
        XCTAssertTrue(tail.isRejected)
    }

    func testRaceAutoCancelCancelsLosersOnly() {
        let a = CancellablePromise<Int>.pending()
        let b = CancellablePromise<Int>.pending()
        let c = CancellablePromise<Int>.pending()
        let winner = race([a.promise, b.promise, c.promise], autoCancel: true)
        b.resolver.fulfill(2)
        XCTAssertEqual(winner.value, 2)
        XCTAssertFalse(b.promise.isCancelled)
        XCTAssertTrue(a.promise.isCancelled)
        XCTAssertTrue(a.promise.isRejected)
        XCTAssertTrue(c.promise.isRejected)
    }

    func testDeepChainCancelDoesNotRecurse() {
        let (head, _) = CancellablePromise<Int>.pending()
        var tail = head
        for _ in 0..<100_000 { tail = tail.map(on: nil) { $0 + 1 } }
        tail.cancel()
        XCTAssertTrue(head.isRejected)
        XCTAssertTrue(tail.isRejected)
    }

    func testSettledChainReleasesCancelClosure() {
        final class Token: Sendable {}
        weak var weakToken: Token?
        var resolverRef: Resolver<Int>?
        let cp: CancellablePromise<Int>
        do {
            let token = Token()
            weakToken = token
            cp = CancellablePromise<Int> { resolver in
                resolverRef = resolver
                return { _ = token }
            }
        }
        XCTAssertNotNil(weakToken)
        resolverRef?.fulfill(1)
        XCTAssertNil(weakToken)
        XCTAssertEqual(cp.value, 1)
    }

    func testCancelRacingFulfilSettlesOnce() {
        for _ in 0..<2_000 {
            let (cp, resolver) = CancellablePromise<Int>.pending()
            let tail = cp.map(on: nil) { $0 + 1 }
            let settledCount = Counter()
            tail.tap(on: nil) { _ in
                settledCount.increment()
            }.cauterize()
            DispatchQueue.concurrentPerform(iterations: 9) { i in
                if i == 0 { resolver.fulfill(1) } else { tail.cancel() }
            }
            XCTAssertEqual(settledCount.value, 1)
            XCTAssertFalse(tail.isPending)
        }
    }
}
