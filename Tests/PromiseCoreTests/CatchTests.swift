import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `catch`, `recover`, `ensure`, `ensureThen`, `finally`, `cauterize` and cancellation errors.
final class CatchTests: XCTestCase {
    // MARK: catch

    func testCatchReceivesTheError() {
        var caught: Error?
        Promise<Int>(error: TestError(code: 1)).catch(on: nil) { caught = $0 }
        XCTAssertEqual(caught as? TestError, TestError(code: 1))
    }

    func testCatchIsNotCalledOnFulfilment() {
        var called = false
        Promise.value(1).catch(on: nil) { _ in called = true }
        XCTAssertFalse(called)
    }

    func testCatchOnTheDefaultQueueRunsOnMain() {
        let caught = Handshake()
        var onMain = false
        Promise<Int>(error: TestError()).catch { _ in
            onMain = isOnMainQueue
            caught.signal()
        }
        XCTAssertTrue(caught.wait(seconds: 10))
        XCTAssertTrue(onMain)
    }

    func testCatchWithTheDefaultPolicySkipsPMKErrorCancelled() {
        XCTAssertFalse(defaultCatchRuns(for: PMKError.cancelled))
    }

    func testCatchWithTheDefaultPolicySkipsCancellationError() {
        XCTAssertFalse(defaultCatchRuns(for: CancellationError()))
    }

    func testCatchWithTheDefaultPolicySkipsURLErrorCancelled() {
        XCTAssertFalse(defaultCatchRuns(for: URLError(.cancelled)))
    }

    func testCatchWithTheDefaultPolicySkipsACancellableError() {
        XCTAssertFalse(defaultCatchRuns(for: UserCancelled()))
    }

    func testCatchWithTheDefaultPolicyHandlesOtherURLErrors() {
        var caught: Error?
        Promise<Int>(error: URLError(.timedOut)).catch(on: nil) { caught = $0 }
        XCTAssertEqual((caught as? URLError)?.code, .timedOut)
    }

    func testCatchWithAllErrorsReceivesCancellation() {
        var caught: [Error] = []
        Promise<Int>(error: PMKError.cancelled).catch(on: nil, policy: .allErrors) { caught.append($0) }
        Promise<Int>(error: CancellationError()).catch(on: nil, policy: .allErrors) { caught.append($0) }
        Promise<Int>(error: URLError(.cancelled)).catch(on: nil, policy: .allErrors) { caught.append($0) }
        XCTAssertEqual(caught.count, 3)
        XCTAssertEqual(pmkCase(caught.first), "cancelled")
    }

    func testCatchUsesTheConfiguredDefaultPolicy() {
        var caught: Error?
        withConfiguration({ $0.catchPolicy = .allErrors }) {
            Promise<Int>(error: PMKError.cancelled).catch(on: nil) { caught = $0 }
        }
        XCTAssertEqual(pmkCase(caught), "cancelled")
    }

    func testErrorIsCancelled() {
        XCTAssertTrue(PMKError.cancelled.isCancelled)
        XCTAssertTrue((PMKError.cancelled as Error).isCancelled)
        XCTAssertTrue((CancellationError() as Error).isCancelled)
        XCTAssertTrue((URLError(.cancelled) as Error).isCancelled)
        XCTAssertTrue((CocoaError(.userCancelled) as Error).isCancelled)
        XCTAssertTrue((UserCancelled() as Error).isCancelled)
        XCTAssertFalse((PMKError.badInput as Error).isCancelled)
        XCTAssertFalse((URLError(.badURL) as Error).isCancelled)
        XCTAssertFalse((TestError() as Error).isCancelled)
    }

    // MARK: finally

    func testFinallyRunsAfterCatchOnRejection() {
        var order: [String] = []
        Promise<Int>(error: TestError())
            .catch(on: nil) { _ in order.append("catch") }
            .finally(on: nil) { order.append("finally") }
        XCTAssertEqual(order, ["catch", "finally"])
    }

    func testFinallyRunsOnFulfilment() {
        var ran = false
        Promise.value(1).catch(on: nil) { _ in }.finally(on: nil) { ran = true }
        XCTAssertTrue(ran)
    }

    func testFinallyRunsOnASkippedCancellation() {
        var caught = false
        var ran = false
        Promise<Int>(error: PMKError.cancelled)
            .catch(on: nil) { _ in caught = true }
            .finally(on: nil) { ran = true }
        XCTAssertFalse(caught)
        XCTAssertTrue(ran)
    }

    func testFinallyOnTheDefaultQueueRunsOnMain() {
        let ran = Handshake()
        var onMain = false
        Promise.value(1).catch { _ in }.finally {
            onMain = isOnMainQueue
            ran.signal()
        }
        XCTAssertTrue(ran.wait(seconds: 10))
        XCTAssertTrue(onMain)
    }

    // MARK: recover

    func testRecoverReplacesTheErrorWithTheReturnedPromise() {
        let p = Promise<Int>(error: TestError()).recover(on: nil) { _ in Promise.value(5) }
        XCTAssertEqual(p.value, 5)
    }

    func testRecoverReceivesTheError() {
        var got: Error?
        _ = Promise<Int>(error: TestError(code: 4)).recover(on: nil) { e -> Promise<Int> in
            got = e
            return .value(0)
        }
        XCTAssertEqual(got as? TestError, TestError(code: 4))
    }

    func testRecoverThrowingRejectsWithTheNewError() {
        let p = Promise<Int>(error: TestError(code: 1)).recover(on: nil) { _ -> Promise<Int> in
            throw TestError(code: 2)
        }
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testRecoverFollowsAPendingPromise() {
        let (inner, resolver) = Promise<Int>.pending()
        let p = Promise<Int>(error: TestError()).recover(on: nil) { _ in inner }
        XCTAssertTrue(p.isPending)
        resolver.fulfill(3)
        XCTAssertEqual(p.value, 3)
    }

    func testRecoverIsSkippedOnFulfilment() {
        var ran = false
        let p = Promise.value(1).recover(on: nil) { _ -> Promise<Int> in
            ran = true; return .value(2)
        }
        XCTAssertFalse(ran)
        XCTAssertEqual(p.value, 1)
    }

    func testRecoverWithTheDefaultPolicyLetsACancellationThrough() {
        var ran = false
        let p = Promise<Int>(error: PMKError.cancelled).recover(on: nil) { _ -> Promise<Int> in
            ran = true
            return .value(2)
        }
        XCTAssertFalse(ran)
        XCTAssertEqual(pmkCase(p.error), "cancelled")
    }

    func testRecoverWithAllErrorsRecoversACancellation() {
        let p = Promise<Int>(error: PMKError.cancelled).recover(on: nil, policy: .allErrors) { _ in
            Promise.value(2)
        }
        XCTAssertEqual(p.value, 2)
    }

    func testRecoverReturningAGuaranteeGivesAGuarantee() {
        let g: Guarantee<Int> = Promise<Int>(error: TestError()).recover(on: nil) { _ in Guarantee.value(6) }
        XCTAssertEqual(g.value, 6)
    }

    func testGuaranteeRecoverHandlesCancellationToo() {
        let g: Guarantee<Int> = Promise<Int>(error: PMKError.cancelled).recover(on: nil) { _ in Guarantee.value(7) }
        XCTAssertEqual(g.value, 7)
    }

    func testGuaranteeRecoverPassesTheValueThrough() {
        let g: Guarantee<Int> = Promise.value(1).recover(on: nil) { _ in Guarantee.value(7) }
        XCTAssertEqual(g.value, 1)
    }

    func testVoidRecoverWithANonThrowingBodyGivesAGuarantee() {
        var seen: Error?
        let g: Guarantee<Void> = Promise<Void>(error: PMKError.cancelled).recover(on: nil) { (e: Error) in seen = e }
        XCTAssertTrue(g.isFulfilled)
        XCTAssertEqual(pmkCase(seen), "cancelled")
    }

    func testVoidRecoverWithAThrowingBodyFulfilsWhenItReturns() {
        let p: Promise<Void> = Promise<Void>(error: TestError()).recover(on: nil) { (_: Error) throws in }
        XCTAssertTrue(p.isFulfilled)
    }

    func testVoidRecoverWithAThrowingBodyRejectsWhenItThrows() {
        let p: Promise<Void> = Promise<Void>(error: TestError(code: 1)).recover(on: nil) { (_: Error) throws in
            throw TestError(code: 2)
        }
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testVoidRecoverWithAThrowingBodySkipsCancellationByDefault() {
        var ran = false
        let p: Promise<Void> = Promise<Void>(error: PMKError.cancelled).recover(on: nil) { (_: Error) throws in
            ran = true
        }
        XCTAssertFalse(ran)
        XCTAssertEqual(pmkCase(p.error), "cancelled")
    }

    func testRecoverOnTheDefaultQueueRunsOnMain() {
        var onMain = false
        let p = Promise<Int>(error: TestError()).recover { _ -> Promise<Int> in
            onMain = isOnMainQueue
            return .value(1)
        }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain)
    }

    // MARK: ensure / ensureThen

    func testEnsureRunsOnFulfilmentAndPassesTheValue() {
        var ran = false
        let p = Promise.value(1).ensure(on: nil) { ran = true }
        XCTAssertTrue(ran)
        XCTAssertEqual(p.value, 1)
    }

    func testEnsureRunsOnRejectionAndPassesTheError() {
        var ran = false
        let p = Promise<Int>(error: TestError(code: 3)).ensure(on: nil) { ran = true }
        XCTAssertTrue(ran)
        XCTAssertEqual(p.error as? TestError, TestError(code: 3))
    }

    func testEnsureRunsOnCancellation() {
        var ran = false
        _ = Promise<Int>(error: PMKError.cancelled).ensure(on: nil) { ran = true }
        XCTAssertTrue(ran)
    }

    func testEnsureOnTheDefaultQueueRunsOnMain() {
        var onMain = false
        let p = Promise.value(1).ensure { onMain = isOnMainQueue }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain)
    }

    func testEnsureThenWaitsForTheGuaranteeBeforePassingTheResult() {
        let (gate, open) = Guarantee<Void>.pending()
        var ran = false
        let p = Promise.value(1).ensureThen(on: nil) { () -> Guarantee<Void> in
            ran = true
            return gate
        }
        XCTAssertTrue(ran)
        XCTAssertTrue(p.isPending)
        open(())
        XCTAssertEqual(p.value, 1)
    }

    func testEnsureThenPassesARejectionOn() {
        let p = Promise<Int>(error: TestError(code: 5)).ensureThen(on: nil) { Guarantee() }
        XCTAssertEqual(p.error as? TestError, TestError(code: 5))
    }

    // MARK: cauterize

    func testCauterizeLogsTheError() {
        let events = recordingLog {
            Promise<Int>(error: TestError(code: 8)).cauterize()
        }
        XCTAssertEqual(describeLog(events), ["cauterized(\(TestError(code: 8)))"])
    }

    func testCauterizeDoesNotLogACancellation() {
        let events = recordingLog {
            Promise<Int>(error: PMKError.cancelled).cauterize()
        }
        XCTAssertEqual(describeLog(events), [])
    }

    func testCauterizeDoesNotLogAFulfilment() {
        let events = recordingLog {
            Promise.value(1).cauterize()
        }
        XCTAssertEqual(describeLog(events), [])
    }

    func testCauterizeReturnsAFinalizer() {
        var ran = false
        recordingLog {
            Promise<Int>(error: TestError()).cauterize().finally(on: nil) { ran = true }
        }
        XCTAssertTrue(ran)
    }
}

/// Whether a `catch` with the default policy runs for a promise rejected with `error`.
private func defaultCatchRuns(for error: Error) -> Bool {
    var called = false
    Promise<Int>(error: error).catch(on: nil) { _ in called = true }
    return called
}
