import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `catch`, `recover`, `ensure`, `ensureThen`, `finally`, `cauterize` and cancellation errors.
final class CatchTests: XCTestCase {
    // MARK: catch

    func testCatchReceivesTheError() {
        let caught = SendableBox<Error?>(nil)
        Promise<Int>(error: TestError(code: 1)).catch(on: nil) { caught.value = $0 }
        XCTAssertEqual(caught.value as? TestError, TestError(code: 1))
    }

    func testCatchIsNotCalledOnFulfilment() {
        let called = Flag()
        Promise.value(1).catch(on: nil) { _ in called.raise() }
        XCTAssertFalse(called.value)
    }

    func testCatchOnTheDefaultQueueRunsOnMain() {
        let caught = Handshake()
        let onMain = SendableBox(false)
        Promise<Int>(error: TestError()).catch { _ in
            onMain.value = isOnMainQueue
            caught.signal()
        }
        XCTAssertTrue(caught.wait(seconds: 10))
        XCTAssertTrue(onMain.value)
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
        let caught = SendableBox<Error?>(nil)
        Promise<Int>(error: URLError(.timedOut)).catch(on: nil) { caught.value = $0 }
        XCTAssertEqual((caught.value as? URLError)?.code, .timedOut)
    }

    func testCatchWithAllErrorsReceivesCancellation() {
        let caught = Recorder<Error>()
        Promise<Int>(error: PMKError.cancelled).catch(on: nil, policy: .allErrors) { caught.append($0) }
        Promise<Int>(error: CancellationError()).catch(on: nil, policy: .allErrors) { caught.append($0) }
        Promise<Int>(error: URLError(.cancelled)).catch(on: nil, policy: .allErrors) { caught.append($0) }
        XCTAssertEqual(caught.all.count, 3)
        XCTAssertEqual(pmkCase(caught.all.first), "cancelled")
    }

    func testCatchUsesTheConfiguredDefaultPolicy() {
        let caught = SendableBox<Error?>(nil)
        withConfiguration({ $0.catchPolicy = .allErrors }) {
            Promise<Int>(error: PMKError.cancelled).catch(on: nil) { caught.value = $0 }
        }
        XCTAssertEqual(pmkCase(caught.value), "cancelled")
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
        let order = Recorder<String>()
        Promise<Int>(error: TestError())
            .catch(on: nil) { _ in order.append("catch") }
            .finally(on: nil) { order.append("finally") }
        XCTAssertEqual(order.all, ["catch", "finally"])
    }

    func testFinallyRunsOnFulfilment() {
        let ran = Flag()
        Promise.value(1).catch(on: nil) { _ in }.finally(on: nil) { ran.raise() }
        XCTAssertTrue(ran.value)
    }

    func testFinallyRunsOnASkippedCancellation() {
        let caught = Flag()
        let ran = Flag()
        Promise<Int>(error: PMKError.cancelled)
            .catch(on: nil) { _ in caught.raise() }
            .finally(on: nil) { ran.raise() }
        XCTAssertFalse(caught.value)
        XCTAssertTrue(ran.value)
    }

    func testFinallyOnTheDefaultQueueRunsOnMain() {
        let ran = Handshake()
        let onMain = SendableBox(false)
        Promise.value(1).catch { _ in }.finally {
            onMain.value = isOnMainQueue
            ran.signal()
        }
        XCTAssertTrue(ran.wait(seconds: 10))
        XCTAssertTrue(onMain.value)
    }

    // MARK: recover

    func testRecoverReplacesTheErrorWithTheReturnedPromise() {
        let p = Promise<Int>(error: TestError()).recover(on: nil) { _ in Promise.value(5) }
        XCTAssertEqual(p.value, 5)
    }

    func testRecoverReceivesTheError() {
        let got = SendableBox<Error?>(nil)
        _ = Promise<Int>(error: TestError(code: 4)).recover(on: nil) { e -> Promise<Int> in
            got.value = e
            return .value(0)
        }
        XCTAssertEqual(got.value as? TestError, TestError(code: 4))
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
        let ran = Flag()
        let p = Promise.value(1).recover(on: nil) { _ -> Promise<Int> in
            ran.raise(); return .value(2)
        }
        XCTAssertFalse(ran.value)
        XCTAssertEqual(p.value, 1)
    }

    func testRecoverWithTheDefaultPolicyLetsACancellationThrough() {
        let ran = Flag()
        let p = Promise<Int>(error: PMKError.cancelled).recover(on: nil) { _ -> Promise<Int> in
            ran.raise()
            return .value(2)
        }
        XCTAssertFalse(ran.value)
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
        let seen = SendableBox<Error?>(nil)
        let g: Guarantee<Void> = Promise<Void>(error: PMKError.cancelled).recover(on: nil) { (e: Error) in
            seen.value = e
        }
        XCTAssertTrue(g.isFulfilled)
        XCTAssertEqual(pmkCase(seen.value), "cancelled")
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
        let ran = Flag()
        let p: Promise<Void> = Promise<Void>(error: PMKError.cancelled).recover(on: nil) { (_: Error) throws in
            ran.raise()
        }
        XCTAssertFalse(ran.value)
        XCTAssertEqual(pmkCase(p.error), "cancelled")
    }

    func testRecoverOnTheDefaultQueueRunsOnMain() {
        let onMain = SendableBox(false)
        let p = Promise<Int>(error: TestError()).recover { _ -> Promise<Int> in
            onMain.value = isOnMainQueue
            return .value(1)
        }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain.value)
    }

    // MARK: ensure / ensureThen

    func testEnsureRunsOnFulfilmentAndPassesTheValue() {
        let ran = Flag()
        let p = Promise.value(1).ensure(on: nil) { ran.raise() }
        XCTAssertTrue(ran.value)
        XCTAssertEqual(p.value, 1)
    }

    func testEnsureRunsOnRejectionAndPassesTheError() {
        let ran = Flag()
        let p = Promise<Int>(error: TestError(code: 3)).ensure(on: nil) { ran.raise() }
        XCTAssertTrue(ran.value)
        XCTAssertEqual(p.error as? TestError, TestError(code: 3))
    }

    func testEnsureRunsOnCancellation() {
        let ran = Flag()
        _ = Promise<Int>(error: PMKError.cancelled).ensure(on: nil) { ran.raise() }
        XCTAssertTrue(ran.value)
    }

    func testEnsureOnTheDefaultQueueRunsOnMain() {
        let onMain = SendableBox(false)
        let p = Promise.value(1).ensure { onMain.value = isOnMainQueue }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain.value)
    }

    func testEnsureThenWaitsForTheGuaranteeBeforePassingTheResult() {
        let (gate, open) = Guarantee<Void>.pending()
        let ran = Flag()
        let p = Promise.value(1).ensureThen(on: nil) { () -> Guarantee<Void> in
            ran.raise()
            return gate
        }
        XCTAssertTrue(ran.value)
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
        let ran = Flag()
        recordingLog {
            Promise<Int>(error: TestError()).cauterize().finally(on: nil) { ran.raise() }
        }
        XCTAssertTrue(ran.value)
    }
}

/// Whether a `catch` with the default policy runs for a promise rejected with `error`.
private func defaultCatchRuns(for error: Error) -> Bool {
    let called = Flag()
    Promise<Int>(error: error).catch(on: nil) { _ in called.raise() }
    return called.value
}
