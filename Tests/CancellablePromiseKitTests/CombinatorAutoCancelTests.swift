import CancellablePromiseKit
import Foundation
import XCTest

// Each combinator over CancellablePromises with `autoCancel` true and false: the input that
// settled the combinator is never cancelled, the others are cancelled (and rejected) by the
// time the settling call returns, and cancelling the result cancels the inputs only with
// `autoCancel`.

final class CombinatorAutoCancelTests: XCTestCase {
    typealias Pending = (promise: CancellablePromise<Int>, resolver: Resolver<Int>)

    func pendings(_ n: Int) -> [Pending] { (0..<n).map { _ in CancellablePromise<Int>.pending() } }

    /// `combine` of `count` pending inputs once the first has rejected; checks that the result
    /// is still pending and that no other input was cancelled.
    func afterTheFirstInputRejects<T>(
        of count: Int, _ combine: ([CancellablePromise<Int>]) -> CancellablePromise<T>, line: UInt = #line
    ) -> (result: CancellablePromise<T>, inputs: [Pending]) {
        let inputs = pendings(count)
        let result = combine(inputs.map(\.promise))
        inputs[0].resolver.reject(FakeTaskCancelled())
        XCTAssertTrue(result.isPending, line: line)
        XCTAssertFalse(inputs.dropFirst().contains { $0.promise.isCancelled }, line: line)
        return (result, inputs)
    }

    // MARK: race

    func testRaceAutoCancelWinnerNotCancelledLosersCancelledWhenFulfilReturns() {
        let inputs = pendings(3)
        let result = race(inputs.map(\.promise), autoCancel: true)
        inputs[1].resolver.fulfill(10)
        XCTAssertEqual(result.value, 10)
        XCTAssertFalse(inputs[1].promise.isCancelled)
        XCTAssertFalse(result.isCancelled)
        for i in [0, 2] {
            XCTAssertTrue(inputs[i].promise.isCancelled)
            XCTAssertEqual(inputs[i].promise.error as? CancellablePromiseError, .cancelled)
        }
    }

    func testRaceAutoCancelWinnerByRejectionCancelsTheOthers() {
        let inputs = pendings(2)
        let result = race(inputs.map(\.promise), autoCancel: true)
        inputs[0].resolver.reject(FakeTaskCancelled())
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertFalse(inputs[0].promise.isCancelled)
        XCTAssertTrue(inputs[1].promise.isCancelled)
    }

    func testRaceWithoutAutoCancelNeverCancelsInputs() {
        let inputs = pendings(3)
        let result = race(inputs.map(\.promise), autoCancel: false)
        inputs[2].resolver.fulfill(3)
        XCTAssertEqual(result.value, 3)
        XCTAssertFalse(inputs.contains { $0.promise.isCancelled })
        XCTAssertTrue(inputs[0].promise.isPending)
    }

    func testRaceVariadicAutoCancel() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<Int>.pending()
        let result = race(a.promise, b.promise, autoCancel: true)
        a.resolver.fulfill(1)
        XCTAssertEqual(result.value, 1)
        XCTAssertFalse(a.promise.isCancelled)
        XCTAssertTrue(b.promise.isCancelled)
    }

    /// The race reports the promise that won, not a position: a winner given twice is not
    /// cancelled at its other position, and a loser given twice is cancelled once.
    func testRaceAutoCancelWithInputsGivenTwiceCancelsOnlyTheLosers() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<Int>.pending()
        let cancels = Counter()
        let c = CancellablePromise<Int>(resolver: { _ in { cancels.increment() } })
        let result = race([a.promise, c, b.promise, a.promise, c], autoCancel: true)
        a.resolver.fulfill(1)
        XCTAssertEqual(result.value, 1)
        XCTAssertFalse(a.promise.isCancelled)
        XCTAssertTrue(b.promise.isCancelled)
        XCTAssertTrue(c.isCancelled)
        XCTAssertEqual(cancels.value, 1)
    }

    /// The two-input form gives `when` a `Void` promise made from each input: the input whose
    /// rejection settled it is still told apart from the others.
    func testWhenTupleAutoCancelSparesTheInputThatRejected() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<String>.pending()
        let result = when(fulfilled: a.promise, b.promise, autoCancel: true)
        b.resolver.reject(StepFailure(node: 1))
        XCTAssertTrue(result.promise.isRejected)
        XCTAssertTrue(a.promise.isCancelled)
        XCTAssertFalse(b.promise.isCancelled)
        XCTAssertFalse(b.promise.cancelContext.isCancelled)
    }

    func testRaceVariadicWithoutAutoCancel() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<Int>.pending()
        let result = race(a.promise, b.promise)
        b.resolver.fulfill(2)
        XCTAssertEqual(result.value, 2)
        XCTAssertFalse(a.promise.isCancelled)
    }

    func testCancellingRaceResultCancelsInputsOnlyWithAutoCancel() {
        let plainInputs = pendings(2)
        let plain = race(plainInputs.map(\.promise))
        plain.cancel()
        XCTAssertEqual(plain.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(plainInputs.contains { $0.promise.isCancelled })

        let autoInputs = pendings(2)
        let auto = race(autoInputs.map(\.promise), autoCancel: true)
        auto.cancel()
        XCTAssertTrue(autoInputs.allSatisfy { $0.promise.isCancelled && $0.promise.isRejected })
    }

    // MARK: race(fulfilled:)

    func testRaceFulfilledAutoCancelSkipsRejectionsAndCancelsLosers() {
        let (result, inputs) = afterTheFirstInputRejects(of: 3) { race(fulfilled: $0, autoCancel: true) }
        inputs[1].resolver.fulfill(5)
        XCTAssertEqual(result.value, 5)
        XCTAssertFalse(inputs[1].promise.isCancelled)
        XCTAssertTrue(inputs[2].promise.isCancelled)
        XCTAssertTrue(inputs[2].promise.isRejected)
    }

    func testRaceFulfilledWithoutAutoCancel() {
        let inputs = pendings(2)
        let result = race(fulfilled: inputs.map(\.promise))
        inputs[0].resolver.fulfill(1)
        XCTAssertEqual(result.value, 1)
        XCTAssertFalse(inputs[1].promise.isCancelled)
        result.cancel()
        XCTAssertFalse(inputs[1].promise.isCancelled)
    }

    func testRaceFulfilledAllRejectedIsNoWinner() {
        let inputs = pendings(2)
        let result = race(fulfilled: inputs.map(\.promise), autoCancel: true)
        inputs[0].resolver.reject(FakeTaskCancelled())
        inputs[1].resolver.reject(FakeTaskCancelled())
        guard case .noWinner? = result.error as? PMKError else { return XCTFail("\(String(describing: result.error))") }
    }

    func testCancellingRaceFulfilledResultWithAutoCancelCancelsInputs() {
        let inputs = pendings(2)
        let result = race(fulfilled: inputs.map(\.promise), autoCancel: true)
        result.cancel()
        XCTAssertTrue(inputs.allSatisfy { $0.promise.isCancelled })
    }

    // MARK: when(fulfilled:) arrays

    func testWhenFulfilledArrayFulfilsInOrderAndCancelsNothing() {
        let inputs = pendings(3)
        let result = when(fulfilled: inputs.map(\.promise), autoCancel: true)
        inputs[2].resolver.fulfill(3)
        inputs[0].resolver.fulfill(1)
        inputs[1].resolver.fulfill(2)
        XCTAssertEqual(result.value, [1, 2, 3])
        XCTAssertFalse(inputs.contains { $0.promise.isCancelled })
    }

    func testWhenFulfilledArrayAutoCancelCancelsOthersWhenRejectReturns() {
        let inputs = pendings(3)
        let result = when(fulfilled: inputs.map(\.promise), autoCancel: true)
        inputs[0].resolver.fulfill(1)
        inputs[1].resolver.reject(FakeTaskCancelled())
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertFalse(inputs[1].promise.isCancelled)
        XCTAssertTrue(inputs[2].promise.isCancelled)
        XCTAssertTrue(inputs[2].promise.isRejected)
        XCTAssertEqual(inputs[0].promise.value, 1)
    }

    func testWhenFulfilledArrayWithoutAutoCancelLeavesOthersRunning() {
        let inputs = pendings(2)
        let result = when(fulfilled: inputs.map(\.promise))
        inputs[0].resolver.reject(FakeTaskCancelled())
        XCTAssertTrue(result.isRejected)
        XCTAssertFalse(inputs[1].promise.isCancelled)
        XCTAssertTrue(inputs[1].promise.isPending)
    }

    func testCancellingWhenFulfilledResultCancelsInputsOnlyWithAutoCancel() {
        let plainInputs = pendings(2)
        let plain = when(fulfilled: plainInputs.map(\.promise))
        plain.cancel()
        XCTAssertTrue(plain.isRejected)
        XCTAssertFalse(plainInputs.contains { $0.promise.isCancelled })
        let autoInputs = pendings(2)
        let auto = when(fulfilled: autoInputs.map(\.promise), autoCancel: true)
        auto.cancel()
        XCTAssertTrue(autoInputs.allSatisfy { $0.promise.isCancelled && $0.promise.isRejected })
    }

    func testWhenFulfilledVoidArrayAndVariadic() {
        let a = CancellablePromise<Void>.pending(), b = CancellablePromise<Void>.pending()
        let array: CancellablePromise<Void> = when(fulfilled: [a.promise, b.promise], autoCancel: true)
        let variadic: CancellablePromise<Void> = when(fulfilled: a.promise, b.promise)
        a.resolver.fulfill(())
        b.resolver.fulfill(())
        XCTAssertNotNil(array.value)
        XCTAssertNotNil(variadic.value)
    }

    func testWhenFulfilledVariadicAutoCancel() {
        let a = CancellablePromise<Void>.pending(), b = CancellablePromise<Void>.pending()
        let result = when(fulfilled: a.promise, b.promise, autoCancel: true)
        a.resolver.reject(FakeTaskCancelled())
        XCTAssertTrue(result.isRejected)
        XCTAssertFalse(a.promise.isCancelled)
        XCTAssertTrue(b.promise.isCancelled)
    }

    // MARK: when(fulfilled:) tuples

    /// `when(fulfilled:_:autoCancel:)` of two pending cancellable promises, and the two, once the
    /// second has rejected (checking that the result rejected).
    private func twoTupleWhenWhoseSecondInputFails(
        autoCancel: Bool, line: UInt = #line
    ) -> (result: CancellablePromise<(Int, String)>, first: CancellablePromise<Int>, second: CancellablePromise<String>)
    {
        let first = CancellablePromise<Int>.pending(), second = CancellablePromise<String>.pending()
        let failed = when(fulfilled: first.promise, second.promise, autoCancel: autoCancel)
        second.resolver.reject(FakeTaskCancelled())
        XCTAssertTrue(failed.isRejected, line: line)
        return (failed, first.promise, second.promise)
    }

    func testWhenFulfilledTwoTupleValuesAndAutoCancel() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<String>.pending()
        let result = when(fulfilled: a.promise, b.promise, autoCancel: true)
        a.resolver.fulfill(1)
        b.resolver.fulfill("b")
        XCTAssertEqual(result.value?.0, 1)
        XCTAssertEqual(result.value?.1, "b")

        let (_, c, d) = twoTupleWhenWhoseSecondInputFails(autoCancel: true)
        XCTAssertTrue(c.isCancelled)
        XCTAssertFalse(d.isCancelled)
    }

    func testWhenFulfilledTwoTupleWithoutAutoCancel() {
        let (failed, c, _) = twoTupleWhenWhoseSecondInputFails(autoCancel: false)
        XCTAssertFalse(c.isCancelled)
        failed.cancel()
        XCTAssertFalse(c.isCancelled)
    }

    func testWhenFulfilledThreeTuple() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<String>.pending()
        let c = CancellablePromise<Double>.pending()
        let result = when(fulfilled: a.promise, b.promise, c.promise)
        a.resolver.fulfill(1)
        b.resolver.fulfill("b")
        c.resolver.fulfill(2.5)
        XCTAssertEqual(result.value?.2, 2.5)
        let x = CancellablePromise<Int>.pending(), y = CancellablePromise<String>.pending()
        let z = CancellablePromise<Double>.pending()
        let auto = when(fulfilled: x.promise, y.promise, z.promise, autoCancel: true)
        auto.cancel()
        XCTAssertTrue(x.promise.isCancelled && y.promise.isCancelled && z.promise.isCancelled)
    }

    func testWhenFulfilledFourTuple() {
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<Int>.pending()
        let c = CancellablePromise<Int>.pending(), d = CancellablePromise<String>.pending()
        let result = when(fulfilled: a.promise, b.promise, c.promise, d.promise, autoCancel: true)
        b.resolver.reject(FakeTaskCancelled())
        XCTAssertTrue(result.isRejected)
        XCTAssertFalse(b.promise.isCancelled)
        XCTAssertTrue(a.promise.isCancelled && c.promise.isCancelled && d.promise.isCancelled)
        let e = CancellablePromise.value(1), f = CancellablePromise.value(2)
        let g = CancellablePromise.value(3), h = CancellablePromise.value("4")
        XCTAssertEqual(when(fulfilled: e, f, g, h).value?.3, "4")
    }

    func testWhenFulfilledFiveTuple() {
        let ps = (0..<4).map { CancellablePromise.value($0) }
        let last = CancellablePromise<String>.pending()
        let result = when(fulfilled: ps[0], ps[1], ps[2], ps[3], last.promise)
        last.resolver.fulfill("5")
        XCTAssertEqual(result.value?.4, "5")
        XCTAssertEqual(result.value?.3, 3)
        let inputs = pendings(4), other = CancellablePromise<String>.pending()
        let auto = when(
            fulfilled: inputs[0].promise, inputs[1].promise, inputs[2].promise, inputs[3].promise, other.promise,
            autoCancel: true)
        other.resolver.reject(FakeTaskCancelled())
        XCTAssertTrue(auto.isRejected)
        XCTAssertTrue(inputs.allSatisfy { $0.promise.isCancelled })
        XCTAssertFalse(other.promise.isCancelled)
    }

    // MARK: when(resolved:)

    func testWhenResolvedWaitsForAllAndNeverCancelsOnRejection() {
        let (result, inputs) = afterTheFirstInputRejects(of: 2) { when(resolved: $0, autoCancel: true) }
        inputs[1].resolver.fulfill(2)
        XCTAssertEqual(result.value?.count, 2)
        if case .fulfilled(let v)? = result.value?[1] { XCTAssertEqual(v, 2) } else { XCTFail() }
        if case .rejected? = result.value?[0] {} else { XCTFail() }
    }

    func testWhenResolvedCancelCancelsInputsOnlyWithAutoCancel() {
        let plainInputs = pendings(2)
        let plain = when(resolved: plainInputs.map(\.promise))
        plain.cancel()
        XCTAssertEqual(plain.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(plainInputs.contains { $0.promise.isCancelled })
        let a = CancellablePromise<Int>.pending(), b = CancellablePromise<Int>.pending()
        let auto = when(resolved: a.promise, b.promise, autoCancel: true)
        auto.cancel()
        XCTAssertTrue(a.promise.isCancelled && b.promise.isCancelled)
        // Inputs rejecting because of the cancellation do not change the settled result.
        XCTAssertEqual(auto.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: when(fulfilled:concurrently:)

    func testWhenFulfilledConcurrentlyLimitsPendingAndFulfils() {
        let started = Recorder<FakeTask<Int>>()
        var iterator = (0..<4).makeIterator()
        let generator = AnyIterator<CancellablePromise<Int>> {
            guard iterator.next() != nil else { return nil }
            let task = FakeTask<Int>()
            started.append(task)
            return task.promise.cancellize()
        }
        let result = when(fulfilled: generator, concurrently: 2)
        XCTAssertEqual(started.all.count, 2)
        started.all[0].succeed(0)
        XCTAssertEqual(started.all.count, 3)
        started.all[1].succeed(1)
        started.all[2].succeed(2)
        started.all[3].succeed(3)
        XCTAssertEqual(result.value, [0, 1, 2, 3])
    }

    func testWhenFulfilledConcurrentlyCancelCancelsGeneratedInputsAndStopsGenerating() {
        let started = Recorder<FakeTask<Int>>()
        var count = 0
        let generator = AnyIterator<CancellablePromise<Int>> {
            count += 1
            guard count <= 5 else { return nil }
            let task = FakeTask<Int>()
            started.append(task)
            return task.promise.cancellize()
        }
        let result = when(fulfilled: generator, concurrently: 2)
        result.cancel()
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(started.all.count, 2)
        XCTAssertTrue(started.all.allSatisfy { $0.isCancelled })
        XCTAssertEqual(started.all.count, 2)  // nothing more generated
    }

    func testWhenFulfilledConcurrentlyRejectionStopsGenerating() {
        let started = Recorder<FakeTask<Int>>()
        let generator = AnyIterator<CancellablePromise<Int>> {
            guard started.all.count < 5 else { return nil }
            let task = FakeTask<Int>()
            started.append(task)
            return task.promise.cancellize()
        }
        let result = when(fulfilled: generator, concurrently: 2)
        started.all[0].fail(FakeTaskCancelled())
        XCTAssertEqual(result.error as? FakeTaskCancelled, FakeTaskCancelled())
        XCTAssertEqual(started.all.count, 2)
    }

    // MARK: Bad input

    func testRaceOfEmptyArrayRejectsWithBadInput() {
        for autoCancel in [false, true] {
            let result = race([CancellablePromise<Int>](), autoCancel: autoCancel)
            guard case .badInput? = result.error as? PMKError else { return XCTFail() }
            let fulfilled = race(fulfilled: [CancellablePromise<Int>](), autoCancel: autoCancel)
            guard case .badInput? = fulfilled.error as? PMKError else { return XCTFail() }
        }
    }

    func testWhenFulfilledOfEmptyArrayFulfilsWithEmptyArray() {
        for autoCancel in [false, true] {
            XCTAssertEqual(when(fulfilled: [CancellablePromise<Int>](), autoCancel: autoCancel).value, [])
            XCTAssertEqual(when(resolved: [CancellablePromise<Int>](), autoCancel: autoCancel).value?.count, 0)
        }
    }
}
