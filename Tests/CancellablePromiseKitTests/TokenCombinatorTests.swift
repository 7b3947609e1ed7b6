import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

final class TokenCombinatorTests: XCTestCase {
    // MARK: none

    func testNoneIsCompletedAndNeverCancelled() {
        let token = CancellationToken.none
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
        let cancelled = Flag()
        let completions = Recorder<Bool>()
        token.onCancel { cancelled.raise() }
        token.onComplete { completions.append($0) }  // at once
        let spy = TokenCancellableSpy()
        token.register(spy)
        XCTAssertFalse(cancelled.value)
        XCTAssertEqual(completions.all, [false])
        XCTAssertEqual(spy.cancelCount, 0)
        XCTAssertEqual(token.pendingHandlerCount, 0)
    }

    func testNoneInCombinators() {
        let request = CancellationRequest()
        XCTAssertTrue(CancellationToken.none.map { true }.isCompleted)
        XCTAssertFalse(CancellationToken.none.map { true }.isCancelled)
        XCTAssertTrue((CancellationToken.none && request.token).isCompleted)
        let either = CancellationToken.none || request.token
        XCTAssertFalse(either.isCompleted)
        request.cancel()
        XCTAssertTrue(either.isCancelled)
    }

    // MARK: map

    func testMapCompletesWithTransformResultWhenCancelled() {
        let (yes, no) = (CancellationRequest(), CancellationRequest())
        let mappedYes = yes.token.map { true }
        let mappedNo = no.token.map { false }
        XCTAssertFalse(mappedYes.isCompleted)
        yes.cancel()
        no.cancel()
        XCTAssertTrue(mappedYes.isCancelled)
        XCTAssertTrue(mappedNo.isCompleted)
        XCTAssertFalse(mappedNo.isCancelled)
    }

    func testMapCompletesNotCancelledWithoutCallingTransform() {
        assertCompletesNotCancelledWithoutTransformWhenTheRequestIsDropped { token, transformed in
            token.map {
                transformed()
                return true
            }
        }
    }

    func testMapOfCancelledTokenCompletesAtOnce() {
        let request = CancellationRequest()
        request.cancel()
        XCTAssertTrue(request.token.map { true }.isCancelled)
    }

    // MARK: flatMap

    // That flatMap follows the returned token: CancellationTokenExampleTests'
    // testFlatMapCompletesWithTheEventualValueOfTheReturnedToken.

    func testFlatMapCompletesNotCancelledWhenReturnedTokenDoes() {
        let outer = CancellationRequest()
        var inner: CancellationRequest? = CancellationRequest()
        let innerToken = inner!.token
        let result = outer.token.flatMap { innerToken }
        outer.cancel()
        inner = nil
        XCTAssertTrue(result.isCompleted)
        XCTAssertFalse(result.isCancelled)
    }

    func testFlatMapCompletesNotCancelledWithoutCallingTransform() {
        assertCompletesNotCancelledWithoutTransformWhenTheRequestIsDropped { token, transformed in
            token.flatMap {
                transformed()
                return CancellationToken.none
            }
        }
    }

    /// Makes `combine(token, transformed)` of a request's token (`transformed` counts the calls
    /// of the transform), drops the request, and checks that the result completed not
    /// cancelled without calling the transform.
    private func assertCompletesNotCancelledWithoutTransformWhenTheRequestIsDropped(
        _ combine: (CancellationToken, @escaping @Sendable () -> Void) -> CancellationToken,
        line: UInt = #line
    ) {
        var request: CancellationRequest? = CancellationRequest()
        let calls = Counter()
        let result = combine(request!.token) { calls.increment() }
        request = nil
        XCTAssertTrue(result.isCompleted, line: line)
        XCTAssertFalse(result.isCancelled, line: line)
        XCTAssertEqual(calls.value, 0, line: line)
    }

    // MARK: &&

    func testAndIsCancelledOnlyWhenBothAre() {
        let (a, b) = (CancellationRequest(), CancellationRequest())
        let both = a.token && b.token
        a.cancel()
        XCTAssertFalse(both.isCompleted)
        b.cancel()
        XCTAssertTrue(both.isCancelled)
    }

    func testAndCompletesNotCancelledAsSoonAsEitherDoes() {
        var a: CancellationRequest? = CancellationRequest()
        let b = CancellationRequest()
        let both = a!.token && b.token
        a = nil
        XCTAssertTrue(both.isCompleted)  // b is still pending
        XCTAssertFalse(both.isCancelled)
        b.cancel()
        XCTAssertFalse(both.isCancelled)
    }

    // MARK: ||

    func testOrIsCancelledWhenEitherIs() {
        let (a, b) = (CancellationRequest(), CancellationRequest())
        let either = a.token || b.token
        XCTAssertFalse(either.isCompleted)
        b.cancel()
        XCTAssertTrue(either.isCancelled)
    }

    func testOrCompletesNotCancelledWhenBothHave() {
        var a: CancellationRequest? = CancellationRequest()
        var b: CancellationRequest? = CancellationRequest()
        let either = a!.token || b!.token
        let completion = SendableBox<Bool?>(nil)
        either.onComplete { completion.value = $0 }
        a = nil
        XCTAssertFalse(either.isCompleted)  // b may still cancel
        b = nil
        XCTAssertTrue(either.isCompleted)
        XCTAssertEqual(completion.value, false)
    }

    func testOrAfterOneNotCancelledStillCancelsWithTheOther() {
        var a: CancellationRequest? = CancellationRequest()
        let b = CancellationRequest()
        let either = a!.token || b.token
        a = nil
        b.cancel()
        XCTAssertTrue(either.isCancelled)
    }

    // MARK: Combined tokens release their handlers

    func testCombinedTokenHandlersAreReleasedWhenOperandsComplete() {
        let released = Counter()
        var a: CancellationRequest? = CancellationRequest()
        var b: CancellationRequest? = CancellationRequest()
        weak var weakCombined: CancellationToken?
        do {
            let combined = (a!.token || b!.token).map { true } && a!.token.flatMap { CancellationToken.none }
            weakCombined = combined
            let probe = DeinitProbe { released.increment() }
            combined.onComplete { _ in probe.touch() }
        }
        a = nil
        b = nil
        XCTAssertEqual(released.value, 1)
        XCTAssertNil(weakCombined)
    }

    func testCombinatorsRaceCancellationFromManyThreads() {
        for _ in 0..<2_000 {
            let (a, b) = (CancellationRequest(), CancellationRequest())
            let either = a.token || b.token
            let both = a.token && b.token
            let boxes = UncheckedBox((a, b))
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 { boxes.value.0.cancel() } else { boxes.value.1.cancel() }
            }
            XCTAssertTrue(either.isCancelled)
            XCTAssertTrue(both.isCancelled)
        }
    }
}
