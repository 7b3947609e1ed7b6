// Subscriptions cancelled on one thread while the promise settles on another, and promises
// cancelled while their publisher sends: exactly one outcome each round, nothing after a cancel.
import Foundation
import PromiseCombine
import TestSupport
import XCTest

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
final class StressTests: XCTestCase {
    let rounds = 10_000

    /// Runs `first` and `second` on two threads of the concurrent `queue`, released together, and
    /// waits until both have returned: one round of a race.
    private func race(
        on queue: DispatchQueue, _ first: @escaping @Sendable () -> Void, _ second: @escaping @Sendable () -> Void
    ) {
        let start = DispatchGroup()
        let finished = DispatchGroup()
        start.enter()
        for body in [first, second] {
            finished.enter()
            queue.async {
                start.wait()
                body()
                finished.leave()
            }
        }
        start.leave()
        finished.wait()
    }

    func testCancellingASubscriptionWhileThePromiseSettles() {
        let queue = DispatchQueue(label: "settle", attributes: .concurrent)
        var delivered = 0
        var cancelledWork = 0
        for round in 0..<rounds {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let probe = ProbeSubscriber<Int, Error>()
            promise.publisher().subscribe(probe)
            race(on: queue, { resolver.fulfill(round) }, { probe.cancel() })
            // Either the value and `.finished` were delivered, or nothing was; never a failure.
            let values = probe.values
            if values.isEmpty {
                XCTAssertNil(probe.completion)
            } else {
                XCTAssertEqual(values, [round])
                XCTAssertTrue(probe.isFinished)
                delivered += 1
            }
            // The promise is cancelled only if the subscription's cancel came first.
            XCTAssertFalse(promise.isPending)
            if promise.isRejected {
                XCTAssertTrue(promise.error?.isCancelled == true)
                XCTAssertTrue(values.isEmpty)
                cancelledWork += 1
            } else {
                XCTAssertEqual(promise.value, round)
            }
        }
        print("subscription cancel vs fulfil: \(delivered) delivered, \(cancelledWork) cancelled first")
    }

    func testCancellingAPromiseWhileItsPublisherSends() {
        let queue = DispatchQueue(label: "send", attributes: .concurrent)
        for round in 0..<rounds {
            let publisher = ProbePublisher<Int>()
            let promise = publisher.cancellablePromise()
            let probe = publisher.subscriptions[0]
            publisher.forget()
            race(on: queue, { probe.send(round) }, { promise.cancel() })
            XCTAssertTrue(probe.isCancelled)
            switch promise.result {
            case .fulfilled(let value)?: XCTAssertEqual(value, round)
            case .rejected(let error)?: XCTAssertTrue(error.isCancelled)
            case nil: XCTFail("still pending")
            }
        }
    }
}
#endif
