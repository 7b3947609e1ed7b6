import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `Resolver`'s resolve forms, `Promise`'s initialisers, `wait()` and descriptions.
final class ResolverTests: XCTestCase {
    func testFulfill() {
        let p = promise(Int.self) { r in r.fulfill(1) }
        XCTAssertEqual(p.value, 1)
    }

    func testReject() {
        let p = promise(Int.self) { r in r.reject(TestError(code: 1)) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 1))
    }

    func testResolveWithAFulfilledResult() {
        let p = promise(Int.self) { r in r.resolve(Result<Int>.fulfilled(2)) }
        XCTAssertEqual(p.value, 2)
    }

    func testResolveWithARejectedResult() {
        let p = promise(Int.self) { r in r.resolve(Result<Int>.rejected(TestError(code: 2))) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testResolveOptionalValueAndNilErrorFulfils() {
        let (p, r) = Promise<Int>.pending()
        let value: Int? = 3
        r.resolve(value, nil)
        XCTAssertEqual(p.value, 3)
    }

    func testResolveNilValueAndAnErrorRejects() {
        let (p, r) = Promise<Int>.pending()
        let value: Int? = nil
        r.resolve(value, TestError(code: 3))
        XCTAssertEqual(p.error as? TestError, TestError(code: 3))
    }

    func testResolveValueAndErrorPrefersTheError() {
        let (p, r) = Promise<Int>.pending()
        let value: Int? = 3
        r.resolve(value, TestError(code: 4))
        XCTAssertEqual(p.error as? TestError, TestError(code: 4))
    }

    func testResolveNilNilRejectsWithInvalidCallingConventionInEitherOrder() {
        let (p, r) = Promise<Int>.pending()
        let (q, s) = Promise<Int>.pending()
        let value: Int? = nil
        let error: Error? = nil
        r.resolve(value, error)
        s.resolve(error, value)
        XCTAssertEqual(pmkCase(p.error), "invalidCallingConvention")
        XCTAssertEqual(pmkCase(q.error), "invalidCallingConvention")
    }

    func testResolveNonOptionalValueAndNilErrorFulfils() {
        let (p, r) = Promise<Int>.pending()
        let error: Error? = nil
        r.resolve(5, error)
        XCTAssertEqual(p.value, 5)
    }

    func testResolveNonOptionalValueAndAnErrorRejects() {
        let p = promise(Int.self) { r in r.resolve(5, TestError(code: 5)) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 5))
    }

    func testResolveErrorFirstWithAValueFulfils() {
        let (p, r) = Promise<Int>.pending()
        let error: Error? = nil
        let value: Int? = 6
        r.resolve(error, value)
        XCTAssertEqual(p.value, 6)
    }

    func testResolveErrorFirstWithAnErrorRejects() {
        let (p, r) = Promise<Int>.pending()
        let error: Error? = TestError(code: 6)
        let value: Int? = nil
        r.resolve(error, value)
        XCTAssertEqual(p.error as? TestError, TestError(code: 6))
    }

    func testResolveSwiftResultSuccessFulfils() {
        let p = promise(Int.self) { r in r.resolve(Swift.Result<Int, TestError>.success(7)) }
        XCTAssertEqual(p.value, 7)
    }

    func testResolveSwiftResultFailureRejects() {
        let p = promise(Int.self) { r in r.resolve(Swift.Result<Int, TestError>.failure(TestError(code: 7))) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 7))
    }

    func testVoidResolveWithNilErrorFulfils() {
        let p = promise(Void.self) { r in r.resolve(nil) }
        XCTAssertTrue(p.isFulfilled)
    }

    func testVoidResolveWithAnErrorRejects() {
        let p = promise(Void.self) { r in r.resolve(TestError(code: 8)) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 8))
    }

    func testVoidFulfillUnderscore() {
        let p = promise(Void.self) { r in r.fulfill_() }
        XCTAssertTrue(p.isFulfilled)
    }

    func testResolverDescriptionNamesThePromise() {
        let (_, r) = Promise<Int>.pending()
        r.fulfill(3)
        XCTAssertEqual(r.description, "Resolver(Promise(3))")
    }

    func testDroppingAPendingResolverLogsPendingPromiseDeallocated() {
        XCTAssertEqual(describedLog { _ = Promise<Int>.pending() }, ["pendingPromiseDeallocated"])
    }

    func testDroppingAResolverAfterResolvingLogsNothing() {
        XCTAssertEqual(describedLog { Promise<Int>.pending().resolver.fulfill(1) }, [])
    }

    func testResolverInitialiserThatNeverResolvesLogsPendingPromiseDeallocated() {
        XCTAssertEqual(describedLog { _ = Promise<Int> { _ in } }, ["pendingPromiseDeallocated"])
    }

    // MARK: Initialisers

    func testResolverInitialiserRunsTheBodyAtOnce() {
        var ran = false
        let p = Promise<Int> { seal in
            ran = true
            seal.fulfill(1)
        }
        XCTAssertTrue(ran)
        XCTAssertEqual(p.value, 1)
    }

    func testInitErrorIsRejected() {
        XCTAssertEqual(Promise<Int>(error: TestError(code: 1)).error as? TestError, TestError(code: 1))
    }

    func testValueIsFulfilled() {
        XCTAssertEqual(Promise.value("a").value, "a")
    }

    func testPendingReturnsAPendingPromiseAndItsResolver() {
        let (promise, resolver) = Promise<Int>.pending()
        XCTAssertTrue(promise.isPending)
        resolver.fulfill(1)
        XCTAssertEqual(promise.value, 1)
    }

    func testBridgeFollowsAPendingPromise() {
        let (source, r) = Promise<Int>.pending()
        let bridged = Promise(source)
        XCTAssertFalse(bridged === source)
        XCTAssertTrue(bridged.isPending)
        r.fulfill(4)
        XCTAssertEqual(bridged.value, 4)
    }

    func testBridgeFollowsARejection() {
        let bridged = Promise(Promise<Int>(error: TestError(code: 2)))
        XCTAssertEqual(bridged.error as? TestError, TestError(code: 2))
    }

    func testBridgeFollowsAGuarantee() {
        let (g, resolve) = Guarantee<Int>.pending()
        let bridged = Promise(g)
        resolve(9)
        XCTAssertEqual(bridged.value, 9)
    }

    func testBridgeFollowsAForeignThenable() {
        let foreign = ForeignThenable<Int>()
        let bridged = Promise(foreign)
        foreign.resolve(.fulfilled(10))
        XCTAssertEqual(bridged.value, 10)
    }

    func testVoidPromiseInitialiserIsFulfilled() {
        XCTAssertTrue(Promise<Void>().isFulfilled)
        XCTAssertTrue(Promise<Void>.value.isFulfilled)
    }

    // MARK: wait

    func testWaitReturnsTheValueResolvedOnAnotherThread() throws {
        let (p, r) = Promise<Int>.pending()
        runWhenAwaited(p) { r.fulfill(3) }
        XCTAssertEqual(try p.wait(), 3)
    }

    func testWaitThrowsTheRejection() {
        let (p, r) = Promise<Int>.pending()
        runWhenAwaited(p) { r.reject(TestError(code: 3)) }
        XCTAssertThrowsError(try p.wait()) { XCTAssertEqual($0 as? TestError, TestError(code: 3)) }
    }

    func testWaitOnASettledPromiseReturnsAtOnce() throws {
        XCTAssertEqual(try Promise.value(1).wait(), 1)
    }

    func testWaitOnTheMainThreadLogsWaitOnMainThread() throws {
        guard Thread.isMainThread else { throw XCTSkip("the test runs off the main thread") }
        let (p, r) = Promise<Int>.pending()
        var result: Int?
        let events = try recordingLog {
            runWhenAwaited(p) { r.fulfill(2) }
            result = try p.wait()
        }
        XCTAssertEqual(result, 2)
        XCTAssertEqual(describeLog(events), ["waitOnMainThread"])
    }

    func testWaitOffTheMainThreadDoesNotLog() throws {
        let (p, r) = Promise<Int>.pending()
        let logged = Recorder<String>()
        let done = Handshake()
        let result = Locked<Int?>(nil)
        withConfiguration({ $0.logHandler = { logged.append(describeLog([$0])[0]) } }) {
            DispatchQueue.global().async {
                result.withLock { $0 = try? p.wait() }
                done.signal()
            }
            runWhenAwaited(p) { r.fulfill(5) }
            done.wait()
        }
        XCTAssertEqual(result.withLock { $0 }, 5)
        XCTAssertEqual(logged.all, [])
    }

    // MARK: Descriptions

    func testDescriptionOfEachState() {
        XCTAssertEqual(Promise.value(1).description, "Promise(1)")
        XCTAssertEqual(Promise<Int>(error: TestError(code: 1)).description, "Promise(\(TestError(code: 1)))")
        let (pending, r) = Promise<Int>.pending()
        XCTAssertEqual(pending.description, "Promise(…Int)")
        r.fulfill(0)
    }

    func testDebugDescriptionOfEachState() {
        XCTAssertEqual(Promise.value(1).debugDescription, "Promise<Int>.fulfilled(1)")
        XCTAssertEqual(
            Promise<Int>(error: TestError(code: 1)).debugDescription,
            "Promise<Int>.rejected(TestError.\(TestError(code: 1)))")
        let (pending, r) = Promise<Int>.pending()
        XCTAssertEqual(pending.debugDescription, "Promise<Int>.pending(handlers: 0)")
        r.fulfill(0)
    }

    func testPMKErrorDescriptions() {
        XCTAssertEqual(PMKError.returnedSelf.debugDescription, "A promise handler returned itself")
        XCTAssertEqual(PMKError.badInput.errorDescription, PMKError.badInput.debugDescription)
        XCTAssertTrue(PMKError.compactMap(1, Int.self).debugDescription.contains("Int"))
    }
}
