import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `promise.async()`, `guarantee.async()` and `Promise { try await … }`.
final class AsyncBridgeTests: XCTestCase {
    func testAsyncReturnsTheValueOfASettledPromise() async throws {
        let v = try await Promise.value(3).async()
        XCTAssertEqual(v, 3)
    }

    func testAsyncReturnsTheValueOnceFulfilledLater() async throws {
        let (p, r) = Promise<Int>.pending()
        runWhenAwaited(p) { r.fulfill(4) }
        let v = try await p.async()
        XCTAssertEqual(v, 4)
    }

    func testAsyncThrowsTheRejection() async {
        let (p, r) = Promise<Int>.pending()
        runWhenAwaited(p) { r.reject(TestError(code: 5)) }
        do {
            _ = try await p.async()
            XCTFail("expected a rejection")
        } catch {
            XCTAssertEqual(error as? TestError, TestError(code: 5))
        }
    }

    func testAsyncThrowsCancellationErrorsOfThePromise() async {
        do {
            _ = try await Promise<Int>(error: PMKError.cancelled).async()
            XCTFail("expected a rejection")
        } catch {
            XCTAssertEqual(pmkCase(error), "cancelled")
        }
    }

    func testCancellingTheTaskEndsTheWaitAtOnceWithCancellationError() async {
        let (p, r) = Promise<Int>.pending()
        let task = Task { try await p.async() }
        await untilAwaited(p)
        task.cancel()
        let result = await task.result
        switch result {
        case .success(let v): XCTFail("expected CancellationError, got \(v)")
        case .failure(let error): XCTAssertTrue(error is CancellationError, "got \(error)")
        }
        // The promise itself is not affected, and a later fulfilment does not resume twice.
        XCTAssertTrue(p.isPending)
        r.fulfill(1)
        XCTAssertEqual(p.value, 1)
    }

    func testTaskCancelledBeforeAsyncIsCalledThrowsCancellationError() async {
        let (p, r) = Promise<Int>.pending()
        let task = Task {
            while !Task.isCancelled { await Task.yield() }
            return try await p.async()
        }
        task.cancel()
        let result = await task.result
        if case .failure(let error) = result {
            XCTAssertTrue(error is CancellationError, "got \(error)")
        } else {
            XCTFail("expected CancellationError")
        }
        r.fulfill(0)
    }

    func testSettledPromiseReturnsItsValueEvenInACancelledTask() async {
        let task = Task {
            while !Task.isCancelled { await Task.yield() }
            return try await Promise.value(9).async()
        }
        task.cancel()
        let value = try? await task.value
        XCTAssertEqual(value, 9)
    }

    func testThousandTasksCancelledAtRandomPointsResumeExactlyOnce() async {
        let count = 1_000
        let outcomes = Recorder<String>()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<count {
                let (p, r) = Promise<Int>.pending()
                let task = Task { () -> Int in try await p.async() }
                group.addTask {
                    let result = await task.result
                    switch result {
                    case .success(let v): outcomes.append(v == i ? "value" : "wrong")
                    case .failure(let e): outcomes.append(e is CancellationError ? "cancelled" : "other")
                    }
                }
                group.addTask {
                    if i % 3 == 0 { await Task.yield() }
                    if i % 2 == 0 {
                        task.cancel()
                        r.fulfill(i)
                    } else {
                        r.fulfill(i)
                        task.cancel()
                    }
                }
            }
        }
        let all = outcomes.all
        XCTAssertEqual(all.count, count)
        XCTAssertEqual(all.filter { $0 == "wrong" || $0 == "other" }, [])
    }

    func testGuaranteeAsyncReturnsTheValue() async {
        let (g, resolve) = Guarantee<Int>.pending()
        runWhenAwaited(g.asPromise()) { resolve(6) }
        let v = await g.async()
        XCTAssertEqual(v, 6)
    }

    func testGuaranteeAsyncOfAResolvedGuarantee() async {
        let v = await Guarantee.value("g").async()
        XCTAssertEqual(v, "g")
    }

    func testPromiseFromAnAsyncBodyFulfils() async throws {
        let p = Promise<Int> {
            await Task.yield()  // settles after a suspension, not synchronously
            return 7
        }
        let v = try await p.async()
        XCTAssertEqual(v, 7)
    }

    func testPromiseFromAnAsyncBodyRejects() async {
        let p = Promise<Int> { () async throws -> Int in throw TestError(code: 8) }
        do {
            _ = try await p.async()
            XCTFail("expected a rejection")
        } catch {
            XCTAssertEqual(error as? TestError, TestError(code: 8))
        }
    }

    func testPromiseFromAnAsyncBodyWithAPriority() {
        let p = Promise<String>(priority: .low) { "low" }
        XCTAssertEqual(waitForValue(p), "low")
    }

    func testPromiseFromAnAsyncBodyChainsLikeAnyPromise() {
        let p = Promise<Int> { 20 }.map { $0 + 1 }
        XCTAssertEqual(waitForValue(p), 21)
    }
}
