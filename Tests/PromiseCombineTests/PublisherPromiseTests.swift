// Publishers as cancellable promises: first value, all values, failures, an empty publisher,
// and every way the promise is cancelled reaching the subscription.
import PromiseCombine
import TestSupport
import XCTest

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
final class PublisherPromiseTests: XCTestCase {
    func testFirstValueFulfilsAndCancelsTheSubscription() {
        let publisher = ProbePublisher<Int>()
        let promise = publisher.cancellablePromise()
        let probe = publisher.subscriptions[0]
        XCTAssertEqual(probe.demand, .max(1))
        probe.send(3)
        XCTAssertEqual(promise.value, 3)
        XCTAssertTrue(probe.isCancelled, "the subscription ends with the first value")
        XCTAssertFalse(promise.isCancelled)
    }

    func testSynchronousPublishers() {
        XCTAssertEqual(Just(1).cancellablePromise().value, 1)
        XCTAssertEqual([1, 2, 3].publisher.cancellablePromise().value, 1)
        XCTAssertEqual([1, 2, 3].publisher.cancellablePromiseOfAllValues().value, [1, 2, 3])
        XCTAssertEqual(Empty<Int, Never>().cancellablePromiseOfAllValues().value, [])
    }

    func testFailureRejects() {
        let promise = Fail<Int, TestError>(error: TestError(code: 5)).cancellablePromise()
        XCTAssertEqual(promise.error as? TestError, TestError(code: 5))
        let subject = PassthroughSubject<Int, TestError>()
        let all = subject.cancellablePromiseOfAllValues()
        subject.send(1)
        subject.send(completion: .failure(TestError(code: 6)))
        XCTAssertEqual(all.error as? TestError, TestError(code: 6))
    }

    func testFinishingWithoutAValueRejectsWithTheDocumentedError() {
        let promise = Empty<Int, Never>().cancellablePromise()
        XCTAssertEqual(promise.error as? PublisherPromiseError, .finishedWithoutValue)
        XCTAssertFalse(promise.error?.isCancelled ?? true, "an ordinary error, not a cancellation")
        let subject = PassthroughSubject<Int, Never>()
        let filtered = subject.filter { $0 > 10 }.cancellablePromise()
        subject.send(1)
        subject.send(completion: .finished)
        XCTAssertEqual(filtered.error as? PublisherPromiseError, .finishedWithoutValue)
    }

    func testAllValuesUntilFinish() {
        let subject = PassthroughSubject<String, Never>()
        let promise = subject.cancellablePromiseOfAllValues()
        subject.send("a")
        subject.send("b")
        XCTAssertTrue(promise.isPending)
        subject.send(completion: .finished)
        XCTAssertEqual(promise.value, ["a", "b"])
    }

    /// Every way of cancelling the promise cancels the subscription at once.
    func testCancellingThePromiseCancelsTheSubscription() {
        let ways: [(String, (CancellablePromise<Int>) -> Void)] = [
            ("the promise", { $0.cancel() }),
            ("its chain", { promise in promise.map { $0 + 1 }.cancel() }),
            ("its context", { $0.cancelContext.cancel() }),
            (
                "a bag",
                { promise in
                    let bag = CancelBag()
                    promise.store(in: bag)
                    bag.cancelAll()
                }
            ),
            (
                "a token",
                { promise in
                    let request = CancellationRequest()
                    promise.cancel(on: request.token)
                    request.cancel()
                }
            ),
            (
                "a lost race",
                { promise in
                    let (winner, resolver) = CancellablePromise<Int>.pending()
                    _ = race(promise, winner, autoCancel: true)
                    resolver.fulfill(0)
                }
            ),
        ]
        for (name, cancel) in ways {
            let publisher = ProbePublisher<Int>()
            let promise = publisher.cancellablePromise()
            cancel(promise)
            XCTAssertTrue(publisher.subscriptions[0].isCancelled, name)
            XCTAssertTrue(promise.error?.isCancelled == true, name)
            publisher.subscriptions[0].send(1)
            XCTAssertTrue(promise.isRejected, name)
        }
    }

    func testCancellingBeforeTheSubscriptionArrivesCancelsItWhenItComes() {
        let subject = PassthroughSubject<Int, Never>()
        let cancelled = Flag()
        let delayed = Deferred { () -> AnyPublisher<Int, Never> in
            subject.handleEvents(receiveCancel: { cancelled.raise() }).eraseToAnyPublisher()
        }
        let promise = delayed.cancellablePromise()
        promise.cancel()
        XCTAssertTrue(cancelled.value)
        XCTAssertTrue(promise.isRejected)
    }

    func testTheSubscriptionIsReleasedWhenThePromiseSettles() {
        for ending in ["value", "failure", "cancel"] {
            let publisher = ProbePublisher<Int>()
            let promise = publisher.cancellablePromise()
            weak var weakProbe: ProbePublisher<Int>.Probe?
            weakProbe = publisher.subscriptions[0]
            switch ending {
            case "value": publisher.subscriptions[0].send(1)
            case "failure": publisher.subscriptions[0].send(completion: .failure(TestError()))
            default: promise.cancel()
            }
            publisher.forget()
            XCTAssertFalse(promise.isPending, ending)
            XCTAssertNil(weakProbe, "\(ending): the settled promise holds its subscription")
        }
    }

    func testAbandonedPromiseSettlesWithTheValue() {
        let subject = PassthroughSubject<Int, Never>()
        let got = Recorder<Int>()
        _ = subject.cancellablePromise().done(on: nil) { got.append($0) }
        subject.send(4)
        XCTAssertEqual(got.all, [4])
    }
}
#endif
