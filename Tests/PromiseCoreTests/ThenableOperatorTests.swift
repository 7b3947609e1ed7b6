import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `then`, `map`, `compactMap`, `done`, `get`, `tap`, `asVoid` and the state accessors.
final class ThenableOperatorTests: XCTestCase {
    func testThenPassesTheValueAndFollowsTheResult() {
        var received: Int?
        let p = Promise.value(3).then(on: nil) { v -> Promise<String> in
            received = v
            return .value("v\(v)")
        }
        XCTAssertEqual(received, 3)
        XCTAssertEqual(p.value, "v3")
    }

    func testThenOnTheDefaultQueueRunsOnMain() {
        var onMain = false
        let p = Promise.value(1).then { v -> Promise<Int> in
            onMain = isOnMainQueue
            return .value(v)
        }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain)
    }

    func testMapTransformsTheValue() {
        XCTAssertEqual(Promise.value(4).map(on: nil) { "\($0 * 2)" }.value, "8")
    }

    func testCompactMapFulfilsWithANonNilValue() {
        let p = Promise.value("12").compactMap(on: nil) { Int($0) }
        XCTAssertEqual(p.value, 12)
    }

    func testCompactMapRejectsWithCompactMapErrorOnNil() {
        let p = Promise.value("x").compactMap(on: nil) { Int($0) }
        XCTAssertEqual(pmkCase(p.error), "compactMap")
        if case PMKError.compactMap(let value, let type)? = p.error {
            XCTAssertEqual(value as? String, "x")
            XCTAssertTrue(type == Int.self)
        } else {
            XCTFail("expected PMKError.compactMap, got \(String(describing: p.error))")
        }
    }

    func testCompactMapThrowingRejectsWithTheThrownError() {
        let p = Promise.value(1).compactMap(on: nil) { _ -> Int? in throw TestError(code: 5) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 5))
    }

    func testCompactMapPassesARejectionThrough() {
        var ran = false
        let p = Promise<Int>(error: TestError(code: 6)).compactMap(on: nil) { v -> Int? in
            ran = true; return v
        }
        XCTAssertFalse(ran)
        XCTAssertEqual(p.error as? TestError, TestError(code: 6))
    }

    func testDoneRunsTheBodyAndFulfilsWithVoid() {
        var seen: Int?
        let p = Promise.value(9).done(on: nil) { seen = $0 }
        XCTAssertEqual(seen, 9)
        XCTAssertTrue(p.isFulfilled)
    }

    func testDoneOnTheDefaultQueueRunsOnMain() {
        XCTAssertTrue(handlerRanOnMain { body in Promise.value(9).done { _ in body() } })
    }

    func testGetPassesTheValueOnUnchanged() {
        var seen: Int?
        let p = Promise.value(9).get(on: nil) { seen = $0 }
        XCTAssertEqual(seen, 9)
        XCTAssertEqual(p.value, 9)
    }

    func testGetThrowingRejects() {
        let p = Promise.value(9).get(on: nil) { _ in throw TestError(code: 1) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 1))
    }

    func testGetIsSkippedOnRejection() {
        var ran = false
        let p = Promise<Int>(error: TestError(code: 2)).get(on: nil) { _ in ran = true }
        XCTAssertFalse(ran)
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testTapSeesAFulfilmentAndPassesItOn() {
        var seen: Result<Int>?
        let p = Promise.value(1).tap(on: nil) { seen = $0 }
        XCTAssertEqual(try seen?.get(), 1)
        XCTAssertEqual(p.value, 1)
    }

    func testTapSeesARejectionAndPassesItOn() {
        var seen: Result<Int>?
        let p = Promise<Int>(error: TestError(code: 3)).tap(on: nil) { seen = $0 }
        if case .rejected(let error)? = seen {
            XCTAssertEqual(error as? TestError, TestError(code: 3))
        } else {
            XCTFail("tap did not see the rejection")
        }
        XCTAssertEqual(p.error as? TestError, TestError(code: 3))
    }

    func testTapSeesACancellation() {
        var seen: Error?
        _ = Promise<Int>(error: PMKError.cancelled).tap(on: nil) {
            if case .rejected(let e) = $0 { seen = e }
        }
        XCTAssertEqual(pmkCase(seen), "cancelled")
    }

    func testAsVoidFulfilsWithVoidWhenTheSourceFulfils() {
        let (p, r) = Promise<Int>.pending()
        let v = p.asVoid()
        XCTAssertTrue(v.isPending)
        r.fulfill(1)
        XCTAssertTrue(v.isFulfilled)
    }

    func testAsVoidKeepsTheRejection() {
        let v = Promise<Int>(error: TestError(code: 8)).asVoid()
        XCTAssertEqual(v.error as? TestError, TestError(code: 8))
    }

    func testStateAccessorsOfAFulfilledPromise() {
        let p = Promise.value("x")
        XCTAssertEqual(p.value, "x")
        XCTAssertNil(p.error)
        XCTAssertFalse(p.isPending)
        XCTAssertTrue(p.isResolved)
        XCTAssertTrue(p.isFulfilled)
        XCTAssertFalse(p.isRejected)
        XCTAssertEqual(p.result?.isFulfilled, true)
    }

    func testStateAccessorsOfARejectedPromise() {
        let p = Promise<String>(error: TestError(code: 1))
        XCTAssertNil(p.value)
        XCTAssertEqual(p.error as? TestError, TestError(code: 1))
        XCTAssertFalse(p.isPending)
        XCTAssertTrue(p.isResolved)
        XCTAssertFalse(p.isFulfilled)
        XCTAssertTrue(p.isRejected)
        XCTAssertEqual(p.result?.isFulfilled, false)
    }

    func testResultGetReturnsTheValueOrThrows() throws {
        XCTAssertEqual(try Result<Int>.fulfilled(1).get(), 1)
        XCTAssertThrowsError(try Result<Int>.rejected(TestError(code: 2)).get()) {
            XCTAssertEqual($0 as? TestError, TestError(code: 2))
        }
    }

    func testPipeDeliversTheResultOnceSettled() {
        let (p, r) = Promise<Int>.pending()
        var got: [Int] = []
        p.pipe { if case .fulfilled(let v) = $0 { got.append(v) } }
        XCTAssertEqual(got, [])
        r.fulfill(5)
        p.pipe { if case .fulfilled(let v) = $0 { got.append(v * 10) } }
        XCTAssertEqual(got, [5, 50])
    }

    func testAsPromiseOfAPromiseIsItself() {
        let p = Promise.value(1)
        XCTAssertTrue(p.asPromise() === p)
    }

    func testFlagsAreAccepted() {
        let queue = TaggedQueue("flags")
        var onQueue = false
        let p = Promise.value(1).map(on: queue.queue, flags: .barrier) { v -> Int in
            onQueue = queue.isCurrent
            return v + 1
        }
        XCTAssertEqual(waitForValue(p), 2)
        XCTAssertTrue(onQueue)
    }

    /// `flags` reach the queue: a `.barrier` body on a concurrent queue waits for the block
    /// running there, whichever kind of step runs it (`map`, `then`, `ensure`).
    func testBarrierFlagMakesEveryKindOfStepWaitForTheQueuesRunningBlock() {
        let steps: [(String, (DispatchQueue, @escaping @Sendable () -> Void) -> Promise<Int>)] = [
            (
                "map",
                { queue, record in
                    Promise.value(1).map(on: queue, flags: .barrier) {
                        record(); return $0
                    }
                }
            ),
            (
                "then",
                { queue, record in
                    Promise.value(1).then(on: queue, flags: .barrier) {
                        record(); return Promise.value($0)
                    }
                }
            ),
            ("ensure", { queue, record in Promise.value(1).ensure(on: queue, flags: .barrier) { record() } }),
        ]
        for (name, makeStep) in steps {
            let queue = DispatchQueue(label: "barrier.\(name)", attributes: .concurrent)
            let log = EventLog()
            let running = Handshake()
            let stepQueued = Handshake()
            queue.async {  // holds the queue until the barrier step is queued behind it
                running.signal()
                stepQueued.wait()
                log.append("block")
            }
            running.wait()
            let step = makeStep(queue) { log.append("barrier") }
            stepQueued.signal()
            XCTAssertEqual(waitForValue(step), 1, name)
            XCTAssertEqual(log.events, ["block", "barrier"], name)
        }
    }
}

/// Events appended from several threads.
private final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []

    func append(_ event: String) {
        lock.lock()
        list.append(event)
        lock.unlock()
    }

    var events: [String] {
        lock.lock()
        defer { lock.unlock() }
        return list
    }
}
