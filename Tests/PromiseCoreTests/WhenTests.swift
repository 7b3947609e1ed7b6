import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Every `when` form.
final class WhenTests: XCTestCase {
    // MARK: when(fulfilled:) arrays

    func testWhenFulfilledArrayGivesTheValuesInInputOrder() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let all: Promise<[Int]> = when(fulfilled: [a, b])
        rb.fulfill(2)
        XCTAssertTrue(all.isPending)
        ra.fulfill(1)
        XCTAssertEqual(all.value, [1, 2])
    }

    func testWhenFulfilledArrayLiteralOfOneTypeGivesTypedValues() {
        let all = when(fulfilled: [Promise.value(1), Promise.value(2)])
        let typed: Promise<[Int]> = all
        XCTAssertEqual(typed.value, [1, 2])
    }

    func testWhenFulfilledEmptyArrayFulfilsWithAnEmptyArray() {
        XCTAssertEqual(when(fulfilled: [Promise<Int>]()).value, [])
    }

    func testWhenFulfilledRejectsWithTheFirstError() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let (c, rc) = Promise<Int>.pending()
        let all: Promise<[Int]> = when(fulfilled: [a, b, c])
        rb.reject(TestError(code: 2))
        XCTAssertEqual(all.error as? TestError, TestError(code: 2))
        rc.reject(TestError(code: 3))
        ra.fulfill(1)
        XCTAssertEqual(all.error as? TestError, TestError(code: 2))
    }

    func testWhenFulfilledRejectsWithoutWaitingForTheOthers() {
        let (pending, _) = Promise<Int>.pending()
        let all: Promise<[Int]> = when(fulfilled: [pending, Promise(error: TestError(code: 1))])
        XCTAssertEqual(all.error as? TestError, TestError(code: 1))
    }

    func testWhenFulfilledAcceptsGuarantees() {
        let all: Promise<[Int]> = when(fulfilled: [Guarantee.value(1), Guarantee.value(2)])
        XCTAssertEqual(all.value, [1, 2])
    }

    func testWhenFulfilledOfAnyThenableGivesAnyValues() {
        let thenables: [any Thenable] = [Promise.value(1), Guarantee.value("two"), Promise.value(3.0)]
        let all: Promise<[Any]> = when(fulfilled: thenables)
        let values = all.value
        XCTAssertEqual(values?.count, 3)
        XCTAssertEqual(values?[0] as? Int, 1)
        XCTAssertEqual(values?[1] as? String, "two")
        XCTAssertEqual(values?[2] as? Double, 3.0)
    }

    func testWhenFulfilledOfAnyThenableRejectsWithTheFirstError() {
        let thenables: [any Thenable] = [Promise.value(1), Promise<String>(error: TestError(code: 5))]
        XCTAssertEqual(when(fulfilled: thenables).error as? TestError, TestError(code: 5))
    }

    func testWhenFulfilledOfEmptyAnyThenableFulfilsWithAnEmptyArray() {
        let thenables: [any Thenable] = []
        XCTAssertEqual(when(fulfilled: thenables).value?.count, 0)
    }

    func testWhenFulfilledVoidVariadic() {
        let (a, ra) = Promise<Void>.pending()
        let all: Promise<Void> = when(fulfilled: a, Promise<Void>())
        XCTAssertTrue(all.isPending)
        ra.fulfill(())
        XCTAssertTrue(all.isFulfilled)
    }

    func testWhenFulfilledVoidArray() {
        let (a, ra) = Promise<Void>.pending()
        let all: Promise<Void> = when(fulfilled: [a, Promise<Void>()])
        XCTAssertTrue(all.isPending)
        ra.fulfill(())
        XCTAssertTrue(all.isFulfilled)
    }

    func testWhenFulfilledVoidArrayRejects() {
        let all: Promise<Void> = when(fulfilled: [Promise<Void>(), Promise<Void>(error: TestError(code: 1))])
        XCTAssertEqual(all.error as? TestError, TestError(code: 1))
    }

    func testWhenFulfilledEmptyVoidArrayFulfils() {
        let all: Promise<Void> = when(fulfilled: [Promise<Void>]())
        XCTAssertTrue(all.isFulfilled)
    }

    // MARK: tuples

    func testWhenFulfilledTwoTuple() {
        let (a, ra) = Promise<Int>.pending()
        let pair = when(fulfilled: a, Promise.value("b"))
        XCTAssertTrue(pair.isPending)
        ra.fulfill(1)
        XCTAssertEqual(pair.value?.0, 1)
        XCTAssertEqual(pair.value?.1, "b")
    }

    func testWhenFulfilledThreeTupleMixesPromiseAndGuarantee() {
        let t = when(fulfilled: Promise.value(1), Guarantee.value("b"), Promise.value(true))
        XCTAssertEqual(t.value?.0, 1)
        XCTAssertEqual(t.value?.1, "b")
        XCTAssertEqual(t.value?.2, true)
    }

    func testWhenFulfilledFourTuple() {
        let t = when(fulfilled: Promise.value(1), Promise.value("b"), Promise.value(true), Promise.value(4.5))
        XCTAssertEqual(t.value?.0, 1)
        XCTAssertEqual(t.value?.1, "b")
        XCTAssertEqual(t.value?.2, true)
        XCTAssertEqual(t.value?.3, 4.5)
    }

    func testWhenFulfilledFiveTuple() {
        let t = when(
            fulfilled: Promise.value(1), Promise.value("b"), Promise.value(true), Promise.value(4.5),
            Promise.value([5]))
        XCTAssertEqual(t.value?.0, 1)
        XCTAssertEqual(t.value?.1, "b")
        XCTAssertEqual(t.value?.2, true)
        XCTAssertEqual(t.value?.3, 4.5)
        XCTAssertEqual(t.value?.4, [5])
    }

    func testWhenFulfilledTupleRejectsWithTheFirstError() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<String>.pending()
        let pair = when(fulfilled: a, b)
        rb.reject(TestError(code: 2))
        ra.reject(TestError(code: 1))
        XCTAssertEqual(pair.error as? TestError, TestError(code: 2))
    }

    // MARK: when(fulfilled:concurrently:)

    func testWhenConcurrentlyNeverHasMoreThanNPending() {
        let source = PendingPromiseSource(count: 50)
        let all = when(fulfilled: source, concurrently: 3)
        source.settleInOrder { index, resolver in resolver.fulfill(index) }
        XCTAssertEqual(all.value, Array(0..<50))
        XCTAssertEqual(source.mostPending, 3)
        XCTAssertEqual(source.generated, 50)
    }

    func testWhenConcurrentlyWithZeroRejectsWithBadInput() {
        let all = when(fulfilled: [Promise.value(1)].makeIterator(), concurrently: 0)
        XCTAssertEqual(pmkCase(all.error), "badInput")
    }

    func testWhenConcurrentlyWithNoElementsFulfilsWithAnEmptyArray() {
        XCTAssertEqual(when(fulfilled: [Promise<Int>]().makeIterator(), concurrently: 2).value, [])
    }

    func testWhenConcurrentlyStopsGeneratingAfterARejection() {
        let generated = Counter()
        let resolvers = Locked<[Resolver<Int>]>([])
        let iterator = AnyIterator<Promise<Int>> {
            generated.increment()
            let (promise, resolver) = Promise<Int>.pending()
            resolvers.withLock { $0.append(resolver) }
            return promise
        }
        let all = when(fulfilled: iterator, concurrently: 2)
        XCTAssertEqual(generated.value, 2)
        resolvers.withLock { $0[0] }.reject(TestError(code: 1))
        XCTAssertEqual(all.error as? TestError, TestError(code: 1))
        resolvers.withLock { $0[1] }.fulfill(2)
        XCTAssertEqual(generated.value, 2)
        resolvers.withLock { $0 = [] }
    }

    func testWhenConcurrentlyOverManySettledPromisesDoesNotRecursePerElement() {
        let count = 200_000
        let iterator = (0..<count).lazy.map { Promise.value($0) }.makeIterator()
        let all = when(fulfilled: iterator, concurrently: 1)
        XCTAssertEqual(all.value?.count, count)
        XCTAssertEqual(all.value?.last, count - 1)
    }

    func testWhenConcurrentlyIteratorMayResolveAnEarlierInput() {
        // The iterator runs user code: it must not be called under a lock the inputs' handlers
        // need, or resolving an earlier input from inside `next()` deadlocks.
        var previous: Resolver<Int>?
        var n = 0
        let iterator = AnyIterator<Promise<Int>> {
            previous?.fulfill(n - 1)
            previous = nil
            guard n < 4 else { return nil }
            let (promise, resolver) = Promise<Int>.pending()
            previous = resolver
            n += 1
            return promise
        }
        let all = when(fulfilled: iterator, concurrently: 2)
        XCTAssertEqual(all.value, [0, 1, 2, 3])
    }

    // MARK: when(resolved:)

    func testWhenResolvedVariadicWaitsForEveryResult() {
        let (a, ra) = Promise<Int>.pending()
        let all = when(resolved: a, Promise<Int>(error: TestError(code: 2)), Promise.value(3))
        XCTAssertTrue(all.isPending)
        ra.fulfill(1)
        let results = all.value
        XCTAssertEqual(results?.count, 3)
        XCTAssertEqual(try results?[0].get(), 1)
        if case .rejected(let error)? = results?[1] {
            XCTAssertEqual(error as? TestError, TestError(code: 2))
        } else {
            XCTFail("expected a rejection")
        }
        XCTAssertEqual(try results?[2].get(), 3)
    }

    func testWhenResolvedArray() {
        let all: Guarantee<[Result<Int>]> = when(resolved: [Promise.value(1), Promise(error: TestError())])
        XCTAssertEqual(all.value?.map(\.isFulfilled), [true, false])
    }

    func testWhenResolvedEmptyArrayGivesAnEmptyArray() {
        XCTAssertEqual(when(resolved: [Promise<Int>]()).value?.count, 0)
    }

    func testWhenResolvedConcurrentlyWaitsForEveryResult() {
        let inputs: [Promise<Int>] = [.value(1), Promise(error: TestError(code: 2)), .value(3)]
        let all = when(resolved: inputs.makeIterator(), concurrently: 1)
        XCTAssertEqual(all.value?.map(\.isFulfilled), [true, false, true])
        XCTAssertEqual(try all.value?[2].get(), 3)
    }

    func testWhenResolvedConcurrentlyNeverHasMoreThanNPending() {
        let source = PendingPromiseSource(count: 30)
        let all = when(resolved: source, concurrently: 4)
        source.settleInOrder { index, resolver in
            if index % 2 == 0 { resolver.fulfill(index) } else { resolver.reject(TestError(code: index)) }
        }
        XCTAssertEqual(all.value?.count, 30)
        XCTAssertEqual(all.value?.map(\.isFulfilled), (0..<30).map { $0 % 2 == 0 })
        XCTAssertEqual(source.mostPending, 4)
    }

    func testWhenResolvedConcurrentlyWithZeroGivesOneBadInputResult() {
        let all = when(resolved: [Promise.value(1)].makeIterator(), concurrently: 0)
        XCTAssertEqual(all.value?.count, 1)
        if case .rejected(let error)? = all.value?.first {
            XCTAssertEqual(pmkCase(error), "badInput")
        } else {
            XCTFail("expected [.rejected(badInput)]")
        }
    }

    // MARK: Guarantees

    func testWhenVariadicVoidGuarantees() {
        let (a, resolve) = Guarantee<Void>.pending()
        let all: Guarantee<Void> = when(a, Guarantee())
        XCTAssertTrue(all.isPending)
        resolve(())
        XCTAssertTrue(all.isFulfilled)
    }

    func testWhenVariadicGuaranteesGivesTheValuesInOrder() {
        let (a, resolve) = Guarantee<Int>.pending()
        let all: Guarantee<[Int]> = when(a, Guarantee.value(2))
        resolve(1)
        XCTAssertEqual(all.value, [1, 2])
    }

    func testWhenGuaranteesArrayVoid() {
        let all: Guarantee<Void> = when(guarantees: [Guarantee<Void>(), Guarantee<Void>()])
        XCTAssertTrue(all.isFulfilled)
    }

    func testWhenGuaranteesArray() {
        let all: Guarantee<[Int]> = when(guarantees: [Guarantee.value(1), Guarantee.value(2)])
        XCTAssertEqual(all.value, [1, 2])
    }

    func testWhenGuaranteesEmptyArrayGivesAnEmptyArray() {
        XCTAssertEqual(when(guarantees: [Guarantee<Int>]()).value, [])
    }

    func testWhenGuaranteesTwoTuple() {
        let (a, resolve) = Guarantee<Int>.pending()
        let t = when(guarantees: a, Guarantee.value("b"))
        XCTAssertTrue(t.isPending)
        resolve(1)
        XCTAssertEqual(t.value?.0, 1)
        XCTAssertEqual(t.value?.1, "b")
    }

    func testWhenGuaranteesThreeFourFiveTuples() {
        let t3 = when(guarantees: Guarantee.value(1), Guarantee.value("b"), Guarantee.value(true))
        XCTAssertEqual(t3.value?.2, true)
        let t4 = when(
            guarantees: Guarantee.value(1), Guarantee.value("b"), Guarantee.value(true), Guarantee.value(4.0))
        XCTAssertEqual(t4.value?.3, 4.0)
        let t5 = when(
            guarantees: Guarantee.value(1), Guarantee.value("b"), Guarantee.value(true), Guarantee.value(4.0),
            Guarantee.value([5]))
        XCTAssertEqual(t5.value?.0, 1)
        XCTAssertEqual(t5.value?.1, "b")
        XCTAssertEqual(t5.value?.4, [5])
    }

    func testWhenSettlesOnTheThreadSettlingTheLastInput() {
        let queue = TaggedQueue("when.last")
        let (a, ra) = Promise<Int>.pending()
        let onQueue = SendableBox(false)
        let all: Promise<[Int]> = when(fulfilled: [a, Promise.value(2)])
        _ = all.done(on: nil) { _ in onQueue.value = queue.isCurrent }
        queue.queue.sync { ra.fulfill(1) }
        XCTAssertTrue(onQueue.value)
    }

    // MARK: Input positions (the aggregate finds an input's position from the input itself)

    func testWhenFulfilledGivesAPendingInputRepeatedAtEachOfItsPositions() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let all: Promise<[Int]> = when(fulfilled: [a, b, a, Promise.value(4), a])
        rb.fulfill(2)
        XCTAssertTrue(all.isPending)
        ra.fulfill(1)
        XCTAssertEqual(all.value, [1, 2, 1, 4, 1])
    }

    func testWhenFulfilledGivesASettledInputRepeatedAtEachOfItsPositions() {
        let settled = Promise.value(7)
        let (b, rb) = Promise<Int>.pending()
        let all: Promise<[Int]> = when(fulfilled: [settled, b, settled])
        rb.fulfill(2)
        XCTAssertEqual(all.value, [7, 2, 7])
        let onlyRepeats: Promise<[Int]> = when(fulfilled: [settled, settled, settled])
        XCTAssertEqual(onlyRepeats.value, [7, 7, 7])
    }

    func testWhenResolvedGivesAnInputRepeatedAtEachOfItsPositions() {
        let (a, ra) = Promise<Int>.pending()
        let all = when(resolved: [a, Promise(error: TestError(code: 1)), a])
        XCTAssertTrue(all.isPending)
        ra.fulfill(3)
        let results = all.value ?? []
        XCTAssertEqual(results.count, 3)
        XCTAssertEqual(try results[0].get(), 3)
        XCTAssertEqual(results[1].isFulfilled, false)
        XCTAssertEqual(try results[2].get(), 3)
    }

    /// Every repeat of a promise is one more position of the same entry: 200,000 repeats take
    /// linear time (a table probing past every repeat would take minutes).
    func testWhenOverOnePromiseRepeatedTwoHundredThousandTimesFillsEveryPosition() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let inputs = Array(repeating: a, count: 100_000) + [b] + Array(repeating: a, count: 100_000)
        let all: Promise<[Int]> = when(fulfilled: inputs)
        let resolved = when(resolved: inputs)
        ra.fulfill(1)
        XCTAssertTrue(all.isPending)
        rb.fulfill(2)
        XCTAssertEqual(all.value?.count, 200_001)
        XCTAssertEqual(all.value?[100_000], 2)
        XCTAssertEqual(all.value?.filter { $0 == 1 }.count, 200_000)
        XCTAssertEqual(resolved.value?.compactMap { try? $0.get() }.filter { $0 == 1 }.count, 200_000)
        let settledRepeats: Promise<[Int]> = when(fulfilled: Array(repeating: Promise.value(3), count: 200_000))
        XCTAssertEqual(settledRepeats.value?.count, 200_000)
    }

    func testWhenFulfilledPlacesTenThousandInputsSettledInReverseOrder() {
        let inputs = (0..<10_000).map { _ in Promise<Int>.pending() }
        let all: Promise<[Int]> = when(fulfilled: inputs.map(\.promise))
        for index in inputs.indices.reversed() { inputs[index].resolver.fulfill(index) }
        XCTAssertEqual(all.value, Array(0..<10_000))
        let resolved = when(resolved: inputs.map(\.promise))
        XCTAssertEqual(resolved.value?.map { try? $0.get() }, Array(0..<10_000))
    }

    /// Inputs settle on other threads while `when` is still adding itself to the later ones:
    /// every value lands at its own position, whichever happens first.
    func testWhenFulfilledPlacesInputsSettledConcurrentlyWithConnecting() {
        for round in 0..<200 {
            let inputs = (0..<64).map { _ in Promise<Int>.pending() }
            let halves: [@Sendable () -> Void] = (0..<2).map { half in
                { for index in stride(from: half, to: inputs.count, by: 2) { inputs[index].resolver.fulfill(index) } }
            }
            var all: Promise<[Int]>?
            var resolved: Guarantee<[PromiseCore.Result<Int>]>?
            let finished = runConcurrently(halves) {
                all = when(fulfilled: inputs.map(\.promise))
                resolved = when(resolved: inputs.map(\.promise))
            }
            XCTAssertTrue(finished, "round \(round)")
            XCTAssertEqual(all?.value, Array(0..<64), "round \(round)")
            XCTAssertEqual(resolved?.value?.map { try? $0.get() }, Array(0..<64), "round \(round)")
        }
    }

    /// `connect` reads the promises of a `[Promise<T>]` straight from the array's buffer, one
    /// pointer-sized reference per element: checks that layout.
    func testAPromiseArrayStoresOneReferencePerElement() {
        let promises: [Promise<Int>] = [Promise.value(1), Promise<Int>(pending: ()), Promise.value(3)]
        XCTAssertEqual(MemoryLayout<Promise<Int>>.stride, MemoryLayout<UnsafeRawPointer>.stride)
        promises.withUnsafeBufferPointer { buffer in
            let references = UnsafeRawPointer(buffer.baseAddress!)
            for index in buffer.indices {
                let reference = references.load(
                    fromByteOffset: index * MemoryLayout<UnsafeRawPointer>.stride, as: UnsafeRawPointer.self)
                XCTAssertEqual(reference, UnsafeRawPointer(Unmanaged.passUnretained(promises[index]).toOpaque()))
            }
        }
    }

    func testWhenOverAThenableThatMakesANewPromiseEachTimePlacesEveryValue() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let all: Promise<[Int]> = when(fulfilled: [FreshMirror(a), FreshMirror(b), FreshMirror(a)])
        rb.fulfill(2)
        ra.fulfill(1)
        XCTAssertEqual(all.value, [1, 2, 1])
    }
}

/// A thenable with the protocol's default `asPromise()`, which makes a new promise on every
/// call.
private final class FreshMirror: Thenable {
    let source: Promise<Int>

    init(_ source: Promise<Int>) { self.source = source }

    func pipe(to body: @escaping @Sendable (Result<Int>) -> Void) { source.pipe(to: body) }

    var result: Result<Int>? { source.result }
}

/// The promises a `when(…, concurrently:)` test hands out: `count` pending ones, made on demand,
/// counting how many are out and still pending (and the most at once).
private final class PendingPromiseSource: IteratorProtocol, @unchecked Sendable {
    // @unchecked: the state is guarded by `state`'s lock.
    private let count: Int
    private let state = Locked((resolvers: [Resolver<Int>](), pending: 0, most: 0))

    init(count: Int) { self.count = count }

    /// How many promises were handed out.
    var generated: Int { state.withLock { $0.resolvers.count } }

    /// The most promises that were out and pending at once.
    var mostPending: Int { state.withLock { $0.most } }

    func next() -> Promise<Int>? {
        guard generated < count else { return nil }  // `when` never calls it concurrently
        let (promise, resolver) = Promise<Int>.pending()
        state.withLock { state in
            state.resolvers.append(resolver)
            state.pending += 1
            state.most = max(state.most, state.pending)
        }
        return promise
    }

    /// Settles the handed-out promises on this thread, oldest first, with `settle(index,
    /// resolver)` (settling one hands out the next, on this thread); stops at the first that is
    /// not handed out (the aggregate stopped generating).
    func settleInOrder(_ settle: (Int, Resolver<Int>) -> Void) {
        for index in 0..<count {
            let resolver: Resolver<Int>? = state.withLock { state in
                guard index < state.resolvers.count else { return nil }
                state.pending -= 1
                return state.resolvers[index]
            }
            guard let resolver else { return }
            settle(index, resolver)
        }
    }
}
