// PromiseKit 8's own Combine cases: `future()` on promises and guarantees, `promise()` and
// `guarantee()` on futures. Values reach a future's subscribers on the main queue (PromiseKit's
// default), so these tests wait with expectations, which run the main run loop.
import PromiseCore
import TestSupport
import XCTest

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
private enum Failure: Error { case dummy }

/// A future that completes with `result` later, on another thread: PromiseKit's own cases.
private func futureCompletingLater<Failing: Error>(with result: Swift.Result<Int, Failing>) -> Future<Int, Failing> {
    Future { complete in
        let complete = UncheckedBox(complete)
        DispatchQueue.global().async { complete.value(result) }
    }
}

final class PromiseKitBridgeTests: XCTestCase {
    private var subscriptions = Set<AnyCancellable>()

    override func tearDown() {
        subscriptions = []
        super.tearDown()
    }

    func testPromiseFutureValue() {
        let delivered = expectation(description: "value")
        let promise = after(.milliseconds(50)).then(on: nil) { Promise.value(1) }
        promise.future()
            .sink(
                receiveCompletion: { completion in
                    if case .failure = completion { XCTFail("the future failed") }
                },
                receiveValue: { value in
                    XCTAssertEqual(value, 1)
                    XCTAssertTrue(Thread.isMainThread)
                    delivered.fulfill()
                }
            )
            .store(in: &subscriptions)
        wait(for: [delivered], timeout: 5)
    }

    func testGuaranteeFutureValue() {
        let delivered = expectation(description: "value")
        let guarantee = after(.milliseconds(50)).then(on: nil) { Guarantee.value(1) }
        guarantee.future()
            .sink(
                receiveCompletion: { _ in },
                receiveValue: { value in
                    XCTAssertEqual(value, 1)
                    delivered.fulfill()
                }
            )
            .store(in: &subscriptions)
        wait(for: [delivered], timeout: 5)
    }

    func testPromiseFutureError() {
        let failed = expectation(description: "failure")
        let promise = after(.milliseconds(50)).then(on: nil) { Promise<Int>(error: Failure.dummy) }
            .then(on: nil) { Promise.value($0 + 1) }
        promise.future()
            .sink(
                receiveCompletion: { completion in
                    guard case .failure(let error) = completion, case .dummy? = error as? Failure else {
                        return XCTFail("expected the promise's error, got \(completion)")
                    }
                    failed.fulfill()
                },
                receiveValue: { _ in XCTFail("a rejected promise sent a value") }
            )
            .store(in: &subscriptions)
        wait(for: [failed], timeout: 5)
    }

    func testFuturePromiseValue() {
        let fulfilled = expectation(description: "value")
        let future: Future<Int, Error> = futureCompletingLater(with: .success(1))
        future.promise().done { value in
            XCTAssertEqual(value, 1)
            fulfilled.fulfill()
        }.catch { XCTFail("rejected with \($0)") }
        wait(for: [fulfilled], timeout: 5)
    }

    func testFutureGuaranteeValue() {
        let resolved = expectation(description: "value")
        let future: Future<Int, Never> = futureCompletingLater(with: .success(1))
        future.guarantee().done { value in
            XCTAssertEqual(value, 1)
            resolved.fulfill()
        }
        wait(for: [resolved], timeout: 5)
    }

    func testFuturePromiseError() {
        let rejected = expectation(description: "failure")
        let future: Future<Int, Error> = futureCompletingLater(with: .failure(Failure.dummy))
        future.promise().done { _ in XCTFail("a failed future fulfilled its promise") }.catch { error in
            guard case .dummy? = error as? Failure else { return XCTFail("rejected with \(error)") }
            rejected.fulfill()
        }
        wait(for: [rejected], timeout: 5)
    }

    // Beyond PromiseKit's cases.

    func testFutureOfACancelledPromiseFails() {
        let failed = expectation(description: "failure")
        let promise = Promise<Int>(error: PMKError.cancelled)
        promise.future()
            .sink(
                receiveCompletion: { completion in
                    if case .failure(let error) = completion, error.isCancelled { failed.fulfill() }
                },
                receiveValue: { _ in XCTFail("value") }
            )
            .store(in: &subscriptions)
        wait(for: [failed], timeout: 5)
    }

    func testFuturePromiseOfACompletedFutureSettlesAtOnce() {
        let future = Future<Int, Error> { $0(.success(7)) }
        XCTAssertEqual(future.promise().value, 7)
        XCTAssertEqual(Future<Int, Never> { $0(.success(8)) }.guarantee().value, 8)
    }
}
#endif
