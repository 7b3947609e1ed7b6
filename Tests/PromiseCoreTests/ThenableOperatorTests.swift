import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `then`, `map`, `compactMap`, `done`, `get`, `tap`, `asVoid` and the state accessors.
final class ThenableOperatorTests: XCTestCase {
    func testThenPassesTheValueAndFollowsTheResult() {
        let received = SendableBox<Int?>(nil)
        let p = Promise.value(3).then(on: nil) { v -> Promise<String> in
            received.value = v
            return .value("v\(v)")
        }
        XCTAssertEqual(received.value, 3)
        XCTAssertEqual(p.value, "v3")
    }

    func testThenOnTheDefaultQueueRunsOnMain() {
        let onMain = SendableBox(false)
        let p = Promise.value(1).then { v -> Promise<Int> in
            onMain.value = isOnMainQueue
            return .value(v)
        }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain.value)
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
        let ran = Flag()
        let p = Promise<Int>(error: TestError(code: 6)).compactMap(on: nil) { v -> Int? in
            ran.raise(); return v
        }
        XCTAssertFalse(ran.value)
        XCTAssertEqual(p.error as? TestError, TestError(code: 6))
    }

    func testDoneRunsTheBodyAndFulfilsWithVoid() {
        let seen = SendableBox<Int?>(nil)
        let p = Promise.value(9).done(on: nil) { seen.value = $0 }
        XCTAssertEqual(seen.value, 9)
        XCTAssertTrue(p.isFulfilled)
    }

    func testDoneOnTheDefaultQueueRunsOnMain() {
        XCTAssertTrue(handlerRanOnMain { body in Promise.value(9).done { _ in body() } })
    }

    func testGetPassesTheValueOnUnchanged() {
        let seen = SendableBox<Int?>(nil)
        let p = Promise.value(9).get(on: nil) { seen.value = $0 }
        XCTAssertEqual(seen.value, 9)
        XCTAssertEqual(p.value, 9)
    }

    func testGetThrowingRejects() {
        let p = Promise.value(9).get(on: nil) { _ in throw TestError(code: 1) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 1))
    }

    func testGetIsSkippedOnRejection() {
        let ran = Flag()
        let p = Promise<Int>(error: TestError(code: 2)).get(on: nil) { _ in ran.raise() }
        XCTAssertFalse(ran.value)
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testTapSeesAFulfilmentAndPassesItOn() {
        let seen = SendableBox<Result<Int>?>(nil)
        let p = Promise.value(1).tap(on: nil) { seen.value = $0 }
        XCTAssertEqual(try seen.value?.get(), 1)
        XCTAssertEqual(p.value, 1)
    }

    func testTapSeesARejectionAndPassesItOn() {
        let seen = SendableBox<Result<Int>?>(nil)
        let p = Promise<Int>(error: TestError(code: 3)).tap(on: nil) { seen.value = $0 }
        if case .rejected(let error)? = seen.value {
            XCTAssertEqual(error as? TestError, TestError(code: 3))
        } else {
            XCTFail("tap did not see the rejection")
        }
        XCTAssertEqual(p.error as? TestError, TestError(code: 3))
    }

    func testTapSeesACancellation() {
        let seen = SendableBox<Error?>(nil)
        _ = Promise<Int>(error: PMKError.cancelled).tap(on: nil) {
            if case .rejected(let e) = $0 { seen.value = e }
        }
        XCTAssertEqual(pmkCase(seen.value), "cancelled")
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
        let got = Recorder<Int>()
        p.pipe { if case .fulfilled(let v) = $0 { got.append(v) } }
        XCTAssertEqual(got.all, [])
        r.fulfill(5)
        p.pipe { if case .fulfilled(let v) = $0 { got.append(v * 10) } }
        XCTAssertEqual(got.all, [5, 50])
    }

    func testAsPromiseOfAPromiseIsItself() {
        let p = Promise.value(1)
        XCTAssertTrue(p.asPromise() === p)
    }

    func testFlagsAreAccepted() {
        let queue = TaggedQueue("flags")
        let onQueue = SendableBox(false)
        let p = Promise.value(1).map(on: queue.queue, flags: .barrier) { v -> Int in
            onQueue.value = queue.isCurrent
            return v + 1
        }
        XCTAssertEqual(waitForValue(p), 2)
        XCTAssertTrue(onQueue.value)
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
