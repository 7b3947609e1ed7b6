import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Promises/A+ 2.1–2.3, re-expressed for Swift promises.
final class PromisesAPlusTests: XCTestCase {
    // MARK: 2.1 Promise states

    func testPendingPromiseHasNoResult() {
        let (promise, _) = Promise<Int>.pending()
        XCTAssertNil(promise.result)
        XCTAssertTrue(promise.isPending)
        XCTAssertFalse(promise.isResolved)
        XCTAssertFalse(promise.isFulfilled)
        XCTAssertFalse(promise.isRejected)
    }

    func testFulfilledPromiseKeepsItsValue() {
        let (promise, resolver) = Promise<Int>.pending()
        resolver.fulfill(7)
        XCTAssertEqual(promise.value, 7)
        XCTAssertTrue(promise.isFulfilled)
        XCTAssertFalse(promise.isPending)
    }

    func testRejectedPromiseKeepsItsError() {
        let (promise, resolver) = Promise<Int>.pending()
        resolver.reject(TestError(code: 3))
        XCTAssertEqual(promise.error as? TestError, TestError(code: 3))
        XCTAssertTrue(promise.isRejected)
        XCTAssertNil(promise.value)
    }

    func testSecondFulfilmentIsIgnored() {
        let (promise, resolver) = Promise<Int>.pending()
        resolver.fulfill(1)
        resolver.fulfill(2)
        XCTAssertEqual(promise.value, 1)
    }

    func testRejectionAfterFulfilmentIsIgnored() {
        let (promise, resolver) = Promise<Int>.pending()
        resolver.fulfill(1)
        resolver.reject(TestError())
        XCTAssertEqual(promise.value, 1)
        XCTAssertNil(promise.error)
    }

    func testFulfilmentAfterRejectionIsIgnored() {
        let (promise, resolver) = Promise<Int>.pending()
        resolver.reject(TestError(code: 1))
        resolver.fulfill(2)
        resolver.reject(TestError(code: 2))
        XCTAssertEqual(promise.error as? TestError, TestError(code: 1))
    }

    func testLaterResolutionDoesNotRunHandlersAgain() {
        let (promise, resolver) = Promise<Int>.pending()
        let calls = Recorder<Int>()
        promise.done(on: nil) { calls.append($0) }.cauterize()
        resolver.fulfill(1)
        resolver.fulfill(2)
        resolver.reject(TestError())
        XCTAssertEqual(calls.all, [1])
    }

    // MARK: 2.2 The then method

    func testFulfilmentHandlerIsNotCalledBeforeFulfilment() {
        let (promise, resolver) = Promise<Int>.pending()
        let called = Flag()
        promise.done(on: nil) { _ in called.raise() }.cauterize()
        XCTAssertFalse(called.value)
        resolver.fulfill(1)
        XCTAssertTrue(called.value)
    }

    func testHandlerOnAQueueDoesNotRunInsideTheCallThatAttachesIt() {
        let queue = TaggedQueue("aplus.async")
        let ran = Flag()
        let finished = Handshake()
        queue.queue.sync {
            let promise = Promise.value(1)
            _ = promise.done(on: queue.queue) { _ in
                ran.raise()
                finished.signal()
            }
            // Still inside the block that attached the handler: it has not run yet.
            XCTAssertFalse(ran.value)
        }
        finished.wait()
        XCTAssertTrue(ran.value)
    }

    func testHandlersRunInRegistrationOrderWhenSynchronous() {
        let (promise, resolver) = Promise<Int>.pending()
        let order = Recorder<Int>()
        for i in 0..<10 {
            _ = promise.done(on: nil) { _ in order.append(i) }
        }
        resolver.fulfill(0)
        XCTAssertEqual(order.all, Array(0..<10))
    }

    func testHandlersRunInRegistrationOrderOnASerialQueue() {
        let queue = TaggedQueue("aplus.order")
        let (promise, resolver) = Promise<Int>.pending()
        let order = Recorder<Int>()
        var tails: [Promise<Void>] = []
        for i in 0..<20 {
            tails.append(promise.done(on: queue.queue) { _ in order.append(i) })
        }
        resolver.fulfill(0)
        XCTAssertNotNil(waitForValue(when(fulfilled: tails)))
        XCTAssertEqual(order.all, Array(0..<20))
    }

    func testRejectionHandlersRunInRegistrationOrder() {
        let (promise, resolver) = Promise<Int>.pending()
        let order = Recorder<Int>()
        for i in 0..<5 {
            promise.catch(on: nil) { _ in order.append(i) }
        }
        resolver.reject(TestError())
        XCTAssertEqual(order.all, Array(0..<5))
    }

    func testHandlersAddedAfterFulfilmentStillRun() {
        let promise = Promise.value(5)
        let got = SendableBox<Int?>(nil)
        promise.done(on: nil) { got.value = $0 }.cauterize()
        XCTAssertEqual(got.value, 5)
    }

    func testHandlersAddedAfterRejectionStillRun() {
        let promise = Promise<Int>(error: TestError(code: 9))
        let got = SendableBox<Error?>(nil)
        promise.catch(on: nil) { got.value = $0 }
        XCTAssertEqual(got.value as? TestError, TestError(code: 9))
    }

    func testHandlersAddedAfterFulfilmentRunOnTheMainQueueByDefault() {
        let promise = Promise.value(5)
        let onMain = SendableBox(false)
        let done = promise.done { _ in onMain.value = isOnMainQueue }
        XCTAssertNotNil(waitForValue(done))
        XCTAssertTrue(onMain.value)
    }

    func testMixedHandlersRunInRegistrationOrderAfterResolution() {
        let (promise, resolver) = Promise<Int>.pending()
        let order = Recorder<String>()
        _ = promise.map(on: nil) { _ in order.append("map") }
        _ = promise.get(on: nil) { _ in order.append("get") }
        _ = promise.tap(on: nil) { _ in order.append("tap") }
        _ = promise.ensure(on: nil) { order.append("ensure") }
        resolver.fulfill(1)
        _ = promise.done(on: nil) { _ in order.append("late") }
        XCTAssertEqual(order.all, ["map", "get", "tap", "ensure", "late"])
    }

    func testRejectionSkipsFulfilmentHandlersAndReachesCatch() {
        let (promise, resolver) = Promise<Int>.pending()
        let ran = Recorder<String>()
        let caught = SendableBox<Error?>(nil)
        promise
            .map(on: nil) { _ -> Int in
                ran.append("map"); return 1
            }
            .then(on: nil) { _ -> Promise<Int> in
                ran.append("then"); return .value(2)
            }
            .compactMap(on: nil) { _ -> Int? in
                ran.append("compactMap"); return 3
            }
            .get(on: nil) { _ in ran.append("get") }
            .done(on: nil) { _ in ran.append("done") }
            .catch(on: nil) { caught.value = $0 }
        resolver.reject(TestError(code: 4))
        XCTAssertEqual(ran.all, [])
        XCTAssertEqual(caught.value as? TestError, TestError(code: 4))
    }

    func testFulfilmentSkipsCatchAndRecover() {
        let caught = Flag()
        let recovered = Flag()
        let result = Promise.value(1)
            .recover(on: nil) { _ -> Promise<Int> in
                recovered.raise(); return .value(0)
            }
        result.catch(on: nil) { _ in caught.raise() }
        XCTAssertEqual(result.value, 1)
        XCTAssertFalse(caught.value)
        XCTAssertFalse(recovered.value)
    }

    func testHandlerIsCalledWithTheValueExactlyOnce() {
        let (promise, resolver) = Promise<String>.pending()
        let calls = Recorder<String>()
        promise.done(on: nil) { calls.append($0) }.cauterize()
        resolver.fulfill("a")
        XCTAssertEqual(calls.all, ["a"])
    }

    func testMapReturnsANewPromiseWithTheTransformedValue() {
        let source = Promise.value(2)
        let mapped = source.map(on: nil) { $0 * 10 }
        XCTAssertFalse(mapped === source)
        XCTAssertEqual(mapped.value, 20)
        XCTAssertEqual(source.value, 2)
    }

    func testThrowingMapBodyRejectsWithTheThrownError() {
        let p = Promise.value(1).map(on: nil) { _ -> Int in throw TestError(code: 11) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 11))
    }

    func testThrowingThenBodyRejectsWithTheThrownError() {
        let p = Promise.value(1).then(on: nil) { _ -> Promise<Int> in throw TestError(code: 12) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 12))
    }

    func testThrowingDoneBodyRejectsWithTheThrownError() {
        let p = Promise.value(1).done(on: nil) { _ in throw TestError(code: 13) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 13))
    }

    func testRejectionPropagatesThroughALongChainUnchanged() {
        var p: Promise<Int> = Promise(error: TestError(code: 77))
        for _ in 0..<100 { p = p.map(on: nil) { $0 + 1 } }
        XCTAssertEqual(p.error as? TestError, TestError(code: 77))
    }

    // MARK: 2.3 The promise resolution procedure

    func testThenReturningItselfRejectsWithReturnedSelf() {
        let (head, resolver) = Promise<Int>.pending()
        let this = SendableBox<Promise<Int>?>(nil)
        this.value = head.then(on: nil) { _ in this.value! }
        let p = this.value!
        resolver.fulfill(1)
        XCTAssertEqual(pmkCase(p.error), "returnedSelf")
        this.value = nil
    }

    func testThenReturningItselfOnAQueueRejectsWithReturnedSelf() {
        let holder = Locked<Promise<Int>?>(nil)
        let (head, resolver) = Promise<Int>.pending()
        let p = head.then { _ in holder.withLock { $0! } }
        holder.withLock { $0 = p }
        resolver.fulfill(1)
        XCTAssertEqual(pmkCase(waitForError(p)), "returnedSelf")
        holder.withLock { $0 = nil }
    }

    func testRecoverReturningItselfRejectsWithReturnedSelf() {
        let (head, resolver) = Promise<Int>.pending()
        let this = SendableBox<Promise<Int>?>(nil)
        this.value = head.recover(on: nil) { _ in this.value! }
        let p = this.value!
        resolver.reject(TestError())
        XCTAssertEqual(pmkCase(p.error), "returnedSelf")
        this.value = nil
    }

    func testThenFollowsAReturnedPendingPromiseUntilItFulfils() {
        let (inner, innerResolver) = Promise<String>.pending()
        let outer = Promise.value(1).then(on: nil) { _ in inner }
        XCTAssertTrue(outer.isPending)
        innerResolver.fulfill("inner")
        XCTAssertEqual(outer.value, "inner")
    }

    func testThenFollowsAReturnedPendingPromiseUntilItRejects() {
        let (inner, innerResolver) = Promise<String>.pending()
        let outer = Promise.value(1).then(on: nil) { _ in inner }
        innerResolver.reject(TestError(code: 21))
        XCTAssertEqual(outer.error as? TestError, TestError(code: 21))
    }

    func testThenFollowsAReturnedSettledPromise() {
        let outer = Promise.value(1).then(on: nil) { Promise.value($0 + 41) }
        XCTAssertEqual(outer.value, 42)
    }

    func testThenFollowsAReturnedGuarantee() {
        let (g, resolve) = Guarantee<Int>.pending()
        let outer = Promise.value(1).then(on: nil) { _ in g }
        XCTAssertTrue(outer.isPending)
        resolve(8)
        XCTAssertEqual(outer.value, 8)
    }

    func testThenFollowsAForeignThenable() {
        let foreign = ForeignThenable<Int>()
        let outer = Promise.value(1).then(on: nil) { _ in foreign }
        XCTAssertTrue(outer.isPending)
        foreign.resolve(.fulfilled(99))
        XCTAssertEqual(outer.value, 99)
    }

    func testThenFollowsNestedPromisesToTheInnermostValue() {
        let outer = Promise.value(1).then(on: nil) { a in
            Promise.value(a + 1).then(on: nil) { b in
                Promise.value(b + 1).then(on: nil) { c in Promise.value(c * 100) }
            }
        }
        XCTAssertEqual(outer.value, 300)
    }

    func testPromiseInitialiserThrowingRejects() {
        let p = Promise<Int> { _ in throw TestError(code: 31) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 31))
    }

    func testPromiseInitialiserThrowingAfterFulfilmentKeepsTheValue() {
        let p = Promise<Int> { seal in
            seal.fulfill(1)
            throw TestError()
        }
        XCTAssertEqual(p.value, 1)
    }
}

/// A thenable of our own, implementing only the protocol's requirements.
final class ForeignThenable<T>: Thenable, @unchecked Sendable {
    private let state = Locked<(result: Result<T>?, observers: [(Result<T>) -> Void])>((nil, []))

    func pipe(to: @escaping (Result<T>) -> Void) {
        let settled: Result<T>? = state.withLock { state in
            if let result = state.result { return result }
            state.observers.append(to)
            return nil
        }
        if let settled { to(settled) }
    }

    var result: Result<T>? { state.withLock { $0.result } }

    func resolve(_ result: Result<T>) {
        let observers = state.withLock { state -> [(Result<T>) -> Void] in
            guard state.result == nil else { return [] }
            state.result = result
            defer { state.observers = [] }
            return state.observers
        }
        observers.forEach { $0(result) }
    }
}
