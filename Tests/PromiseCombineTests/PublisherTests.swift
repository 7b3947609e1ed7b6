// Promises as publishers: value and finish or failure, late subscribers, demand, and the
// interest each subscription to a cancellable promise's publisher holds in the work.
import PromiseCombine
import TestSupport
import XCTest

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
final class PublisherTests: XCTestCase {
    // MARK: Promise and Guarantee

    func testPromisePublisherSendsTheValueThenFinishes() {
        let (promise, resolver) = Promise<Int>.pending()
        let probe = ProbeSubscriber<Int, Error>()
        promise.publisher().subscribe(probe)
        XCTAssertEqual(probe.values, [])
        resolver.fulfill(4)
        XCTAssertEqual(probe.values, [4])
        XCTAssertTrue(probe.isFinished)
    }

    func testPromisePublisherFailsWithTheError() {
        let probe = ProbeSubscriber<Int, Error>()
        Promise<Int>(error: TestError(code: 2)).publisher().subscribe(probe)
        XCTAssertEqual(probe.failure as? TestError, TestError(code: 2))
        XCTAssertEqual(probe.values, [])
    }

    func testGuaranteePublisherNeverFails() {
        let (guarantee, resolve) = Guarantee<String>.pending()
        let probe = ProbeSubscriber<String, Never>()
        guarantee.publisher().subscribe(probe)
        resolve("a")
        XCTAssertEqual(probe.values, ["a"])
        XCTAssertTrue(probe.isFinished)
    }

    func testSubscribingStartsNothingAndALateSubscriberGetsTheResult() {
        let starts = Counter()
        let promise = CancellablePromise<Int> { resolver in
            _ = starts.increment()
            resolver.fulfill(9)
            return {}
        }
        let publisher = promise.publisher()
        let first = ProbeSubscriber<Int, Error>()
        let second = ProbeSubscriber<Int, Error>()
        publisher.subscribe(first)
        publisher.subscribe(second)
        Promise.value(1).publisher().subscribe(ProbeSubscriber<Int, Error>())
        XCTAssertEqual(starts.value, 1)
        XCTAssertEqual(first.values, [9])
        XCTAssertEqual(second.values, [9])
        XCTAssertTrue(second.isFinished)
    }

    func testSinkReceivesTheValueOnTheSettlingThread() {
        let (promise, resolver) = Promise<Int>.pending()
        let thread = SendableBox<Thread?>(nil)
        let done = Handshake()
        let subscription = promise.publisher().sink(
            receiveCompletion: { _ in done.signal() },
            receiveValue: { _ in thread.value = Thread.current }
        )
        let settler = Thread { resolver.fulfill(1) }
        settler.start()
        done.wait(seconds: 5)
        XCTAssertTrue(thread.value === settler)
        subscription.cancel()
    }

    // MARK: Demand

    func testNothingIsSentBeforeDemand() {
        for settleFirst in [true, false] {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let probe = ProbeSubscriber<Int, Error>(demand: .none)
            promise.publisher().subscribe(probe)
            if settleFirst { resolver.fulfill(5) }
            XCTAssertEqual(probe.values, [])
            XCTAssertNil(probe.completion)
            probe.request(.max(1))
            if !settleFirst {
                XCTAssertEqual(probe.values, [])
                resolver.fulfill(5)
            }
            XCTAssertEqual(probe.values, [5])
            XCTAssertTrue(probe.isFinished)
        }
    }

    func testAFailureNeedsNoDemand() {
        let (promise, resolver) = Promise<Int>.pending()
        let probe = ProbeSubscriber<Int, Error>(demand: .none)
        promise.publisher().subscribe(probe)
        resolver.reject(TestError())
        XCTAssertNotNil(probe.failure)
    }

    func testDemandAfterDeliveryAndAfterCancelIsIgnored() {
        let probe = ProbeSubscriber<Int, Error>(demand: .max(1))
        let publisher = Promise.value(1).publisher()
        publisher.subscribe(probe)
        probe.request(.max(3))
        XCTAssertEqual(probe.values, [1])
        let late = ProbeSubscriber<Int, Error>(demand: .none)
        publisher.subscribe(late)
        late.cancel()
        late.request(.max(1))
        XCTAssertEqual(late.values, [])
        XCTAssertNil(late.completion)
    }

    // MARK: Cancelling subscriptions

    func testCancellingAPlainPromisesSubscriptionStopsOnlyItsDelivery() {
        let (promise, resolver) = Promise<Int>.pending()
        let cancelled = ProbeSubscriber<Int, Error>()
        let kept = ProbeSubscriber<Int, Error>()
        promise.publisher().subscribe(cancelled)
        promise.publisher().subscribe(kept)
        cancelled.cancel()
        resolver.fulfill(3)
        XCTAssertEqual(cancelled.values, [])
        XCTAssertNil(cancelled.completion)
        XCTAssertEqual(kept.values, [3])
    }

    func testTheChainIsCancelledWhenEverySubscriptionWasCancelled() {
        let taskCancelled = Flag()
        let promise = CancellablePromise<Int> { _ in { taskCancelled.raise() } }
        let publisher = promise.publisher()
        let first = publisher.sink(receiveCompletion: { _ in }, receiveValue: { _ in })
        let second = ProbeSubscriber<Int, Error>()
        publisher.subscribe(second)
        first.cancel()
        XCTAssertFalse(promise.isCancelled, "a live subscription keeps the work")
        XCTAssertFalse(taskCancelled.value)
        second.cancel()
        XCTAssertTrue(promise.isCancelled)
        XCTAssertTrue(taskCancelled.value)
        XCTAssertNil(second.completion, "a cancelled subscription receives nothing more")
    }

    func testAPublisherNobodySubscribedToCancelsNothing() {
        let (promise, _) = CancellablePromise<Int>.pending()
        var publisher: CancellablePromisePublisher<Int>? = promise.publisher()
        XCTAssertNotNil(publisher)
        publisher = nil
        XCTAssertFalse(promise.isCancelled)
    }

    func testAServedSubscriptionKeepsTheWork() {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        let publisher = promise.publisher()
        let served = ProbeSubscriber<Int, Error>()
        publisher.subscribe(served)
        resolver.fulfill(1)
        served.cancel()
        XCTAssertFalse(promise.isCancelled)
        XCTAssertEqual(promise.value, 1)
    }

    func testASubscriptionAfterTheWorkWasCancelledFailsWithTheCancellation() {
        let (promise, _) = CancellablePromise<Int>.pending()
        let publisher = promise.publisher()
        let first = ProbeSubscriber<Int, Error>()
        publisher.subscribe(first)
        first.cancel()
        XCTAssertTrue(promise.isCancelled)
        let late = ProbeSubscriber<Int, Error>()
        publisher.subscribe(late)
        XCTAssertTrue(late.failure?.isCancelled == true)
    }

    func testCancellingThePromiseFailsItsSubscribers() {
        let (promise, _) = CancellablePromise<Int>.pending()
        let probe = ProbeSubscriber<Int, Error>()
        promise.publisher().subscribe(probe)
        promise.cancel()
        XCTAssertTrue(probe.failure?.isCancelled == true)
    }

    func testSubscriptionsCountWithTheSharedWorksFollowers() {
        let (source, _) = CancellablePromise<Int>.pending()
        let shared = source.shared()
        let follower = shared.follower()
        let probe = ProbeSubscriber<Int, Error>()
        shared.publisher().subscribe(probe)
        probe.cancel()
        XCTAssertFalse(source.isCancelled)
        follower.cancel()
        XCTAssertTrue(source.isCancelled)
    }

    func testASubscriberThatCancelsAtOnceWithdrawsItsInterest() {
        let (promise, _) = CancellablePromise<Int>.pending()
        promise.publisher().subscribe(ProbeSubscriber<Int, Error>(cancelsOnSubscribe: true))
        XCTAssertTrue(promise.isCancelled)
    }

    // MARK: Lifetime

    func testACancelledSubscriptionHoldsNothing() {
        let (plain, _) = Promise<Int>.pending()
        let (cancellable, _) = CancellablePromise<Int>.pending()
        let publishers: [AnyPublisher<Int, Error>] = [
            plain.publisher().eraseToAnyPublisher(), cancellable.publisher().eraseToAnyPublisher(),
        ]
        for publisher in publishers {
            weak var weakSubscriber: ProbeSubscriber<Int, Error>?
            do {
                let subscriber = ProbeSubscriber<Int, Error>()
                weakSubscriber = subscriber
                publisher.subscribe(subscriber)
                subscriber.cancel()
            }
            XCTAssertNil(weakSubscriber)
        }
    }

    func testASettledPromiseHoldsNoSubscriber() {
        weak var weakSubscriber: ProbeSubscriber<Int, Error>?
        let (promise, resolver) = CancellablePromise<Int>.pending()
        do {
            let subscriber = ProbeSubscriber<Int, Error>()
            weakSubscriber = subscriber
            promise.publisher().subscribe(subscriber)
        }
        XCTAssertNotNil(weakSubscriber, "a waiting subscription holds its subscriber")
        resolver.fulfill(1)
        XCTAssertNil(weakSubscriber)
    }
}
#endif
