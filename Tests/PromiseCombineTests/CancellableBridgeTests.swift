// The two cancel worlds: this package's cancel sources in a `Set<AnyCancellable>`, and a
// Combine `AnyCancellable` in a `CancelBag` or cancelled by a `CancellationToken`.
import PromiseCombine
import TestSupport
import XCTest

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
final class CancellableBridgeTests: XCTestCase {
    func testACancellablePromiseInASetIsCancelledWhenTheSetGoes() {
        let (promise, _) = CancellablePromise<Int>.pending()
        var subscriptions = Set<AnyCancellable>()
        promise.map { $0 * 2 }.store(in: &subscriptions)
        XCTAssertEqual(subscriptions.count, 1)
        subscriptions = []
        XCTAssertTrue(promise.isCancelled, "releasing the set cancels the chain")
    }

    func testAnyCancellableOfAPromiseCancelsItsChain() {
        let (promise, _) = CancellablePromise<Int>.pending()
        let finalizer = promise.done { _ in }.catch { _ in }
        AnyCancellable(finalizer).cancel()
        XCTAssertTrue(promise.isCancelled)
        let (other, _) = CancellablePromise<Int>.pending()
        AnyCancellable(other.cancelContext).cancel()
        XCTAssertTrue(other.isCancelled)
    }

    func testASettledPromiseInASetIsNotCancelled() {
        let promise = CancellablePromise.value(1)
        var subscriptions = Set<AnyCancellable>()
        promise.store(in: &subscriptions)
        subscriptions = []
        XCTAssertTrue(promise.isFulfilled, "cancelling a settled promise changes nothing")
        XCTAssertEqual(promise.value, 1)
    }

    func testABagAndARequestInASet() {
        let bag = CancelBag()
        let (promise, _) = CancellablePromise<Int>.pending()
        promise.store(in: bag)
        let request = CancellationRequest()
        var subscriptions = Set<AnyCancellable>()
        bag.store(in: &subscriptions)
        request.store(in: &subscriptions)
        subscriptions = []
        XCTAssertTrue(bag.isCancelled)
        XCTAssertTrue(promise.isCancelled)
        XCTAssertTrue(request.isCancelled)
        XCTAssertTrue(request.token.isCancelled)
    }

    func testAnAnyCancellableInABag() {
        for cancelling in ["cancelAll", "release"] {
            let cancelled = Flag()
            var bag: CancelBag? = CancelBag()
            AnyCancellable { cancelled.raise() }.store(in: bag!)
            XCTAssertFalse(cancelled.value, "the bag holds it")
            XCTAssertEqual(bag?.count, 1)
            if cancelling == "cancelAll" { bag?.cancelAll() } else { bag = nil }
            XCTAssertTrue(cancelled.value, cancelling)
        }
        let cancelled = Flag()
        let bag = CancelBag()
        bag.cancelAll()
        AnyCancellable { cancelled.raise() }.store(in: bag)
        XCTAssertTrue(cancelled.value, "storing into a cancelled bag cancels at once")
    }

    func testASubscriptionInABagStopsWhenTheBagIsCancelled() {
        let subject = PassthroughSubject<Int, Never>()
        let received = Recorder<Int>()
        let bag = CancelBag()
        subject.sink { received.append($0) }.store(in: bag)
        subject.send(1)
        bag.cancelAll()
        subject.send(2)
        XCTAssertEqual(received.all, [1])
    }

    func testATokenCancelsAnAnyCancellable() {
        let request = CancellationRequest()
        let cancelled = Flag()
        let subscription = AnyCancellable { cancelled.raise() }
        subscription.cancel(on: request.token)
        XCTAssertFalse(cancelled.value)
        request.cancel()
        XCTAssertTrue(cancelled.value)

        let already = Flag()
        AnyCancellable { already.raise() }.cancel(on: request.token)
        XCTAssertTrue(already.value, "an already cancelled token cancels at once")
    }

    func testARemovedRegistrationReleasesTheCancellable() {
        let request = CancellationRequest()
        weak var weakCancellable: AnyCancellable?
        let cancelled = Flag()
        do {
            let subscription = AnyCancellable { cancelled.raise() }
            weakCancellable = subscription
            let registration = subscription.cancel(on: request.token)
            XCTAssertTrue(registration.remove())
        }
        XCTAssertNil(weakCancellable)
        XCTAssertTrue(cancelled.value, "releasing an AnyCancellable cancels it, as always")
        request.cancel()
    }

    /// The view-model pattern of the "Using Combine" article: a screen's set holds a
    /// cancellable download; closing the screen cancels it.
    func testAScreensSetCancelsItsDownload() {
        final class Screen {
            var subscriptions = Set<AnyCancellable>()
            var image: String?
            func load(_ download: CancellablePromise<String>) {
                download.publisher()
                    .sink(receiveCompletion: { _ in }, receiveValue: { [weak self] in self?.image = $0 })
                    .store(in: &subscriptions)
            }
        }
        let stopped = Flag()
        let download = CancellablePromise<String> { _ in { stopped.raise() } }
        var screen: Screen? = Screen()
        screen?.load(download)
        screen = nil
        XCTAssertTrue(stopped.value)
    }
}
#endif
