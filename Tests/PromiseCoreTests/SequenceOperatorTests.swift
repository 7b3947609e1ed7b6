import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// The `Thenable where T: Sequence / Collection` helpers.
final class SequenceOperatorTests: XCTestCase {
    func testMapValuesMapsEveryElement() {
        XCTAssertEqual(Promise.value([1, 2, 3]).mapValues(on: nil) { $0 * 2 }.value, [2, 4, 6])
    }

    func testMapValuesThrowingRejects() {
        let p = Promise.value([1, 2, 3]).mapValues(on: nil) { v -> Int in
            if v == 2 { throw TestError(code: 2) }
            return v
        }
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testFlatMapValuesFlattens() {
        XCTAssertEqual(Promise.value([1, 2]).flatMapValues(on: nil) { [$0, $0 * 10] }.value, [1, 10, 2, 20])
    }

    func testCompactMapValuesDropsNils() {
        let p = Promise.value(["1", "x", "3"]).compactMapValues(on: nil) { Int($0) }
        XCTAssertEqual(p.value, [1, 3])
    }

    func testThenMapWaitsForEveryPromiseInOrder() {
        let resolvers = Locked<[Int: Resolver<Int>]>([:])
        let p = Promise.value([1, 2, 3]).thenMap(on: nil) { v -> Promise<Int> in
            let (promise, resolver) = Promise<Int>.pending()
            resolvers.withLock { $0[v] = resolver }
            return promise
        }
        XCTAssertTrue(p.isPending)
        let all = resolvers.withLock { $0 }
        all[3]!.fulfill(30)
        all[1]!.fulfill(10)
        XCTAssertTrue(p.isPending)
        all[2]!.fulfill(20)
        XCTAssertEqual(p.value, [10, 20, 30])
    }

    func testThenMapRejectsWhenOneRejects() {
        let p = Promise.value([1, 2, 3]).thenMap(on: nil) { v -> Promise<Int> in
            v == 2 ? Promise(error: TestError(code: v)) : .value(v)
        }
        XCTAssertEqual(p.error as? TestError, TestError(code: 2))
    }

    func testThenFlatMapFlattensTheValuesOfEveryPromise() {
        let p = Promise.value([1, 2]).thenFlatMap(on: nil) { Promise.value([$0, $0 * -1]) }
        XCTAssertEqual(p.value, [1, -1, 2, -2])
    }

    func testFilterValuesKeepsMatchingElements() {
        XCTAssertEqual(Promise.value(Array(1...6)).filterValues(on: nil) { $0 % 2 == 0 }.value, [2, 4, 6])
    }

    func testFirstValueIsTheFirstElement() {
        XCTAssertEqual(Promise.value([7, 8]).firstValue.value, 7)
    }

    func testFirstValueOfAnEmptyCollectionRejectsWithEmptySequence() {
        XCTAssertEqual(pmkCase(Promise.value([Int]()).firstValue.error), "emptySequence")
    }

    func testFirstValueWhereFindsTheFirstMatch() {
        XCTAssertEqual(Promise.value([1, 4, 6]).firstValue(on: nil) { $0 > 3 }.value, 4)
    }

    func testFirstValueWhereWithoutMatchRejectsWithEmptySequence() {
        XCTAssertEqual(pmkCase(Promise.value([1, 2]).firstValue(on: nil) { $0 > 3 }.error), "emptySequence")
    }

    func testLastValueIsTheLastElement() {
        XCTAssertEqual(Promise.value([7, 8, 9]).lastValue.value, 9)
    }

    func testLastValueOfAnEmptyCollectionRejectsWithEmptySequence() {
        XCTAssertEqual(pmkCase(Promise.value([Int]()).lastValue.error), "emptySequence")
    }

    func testSortedValuesSortsAscending() {
        XCTAssertEqual(Promise.value([3, 1, 2]).sortedValues(on: nil).value, [1, 2, 3])
    }

    func testSequenceHelpersRunOnTheGivenQueue() {
        let queue = TaggedQueue("sequence")
        let onQueue = Recorder<Bool>()
        let p = Promise.value([1, 2])
            .mapValues(on: queue.queue) { v -> Int in
                onQueue.append(queue.isCurrent); return v
            }
            .filterValues(on: queue.queue) { _ in
                onQueue.append(queue.isCurrent); return true
            }
        XCTAssertEqual(waitForValue(p), [1, 2])
        XCTAssertEqual(onQueue.all, [true, true, true, true])
    }

    func testSequenceHelpersPassRejectionsThrough() {
        let failed = Promise<[Int]>(error: TestError(code: 1))
        XCTAssertEqual(failed.mapValues(on: nil) { $0 }.error as? TestError, TestError(code: 1))
        XCTAssertEqual(failed.firstValue.error as? TestError, TestError(code: 1))
        XCTAssertEqual(failed.lastValue.error as? TestError, TestError(code: 1))
        XCTAssertEqual(failed.sortedValues(on: nil).error as? TestError, TestError(code: 1))
    }

    // MARK: Guarantee

    func testGuaranteeMapValues() {
        XCTAssertEqual(Guarantee.value([1, 2]).mapValues(on: nil) { $0 + 1 }.value, [2, 3])
    }

    func testGuaranteeFlatMapValues() {
        XCTAssertEqual(Guarantee.value([1, 2]).flatMapValues(on: nil) { [$0, $0] }.value, [1, 1, 2, 2])
    }

    func testGuaranteeCompactMapValues() {
        XCTAssertEqual(Guarantee.value(["a", "2"]).compactMapValues(on: nil) { Int($0) }.value, [2])
    }

    func testGuaranteeThenMap() {
        XCTAssertEqual(Guarantee.value([1, 2]).thenMap(on: nil) { Guarantee.value($0 * 3) }.value, [3, 6])
    }

    func testGuaranteeThenFlatMap() {
        let g = Guarantee.value([1, 2]).thenFlatMap(on: nil) { Promise.value([$0, $0 * 2]) }
        XCTAssertEqual(g.value, [1, 2, 2, 4])
    }

    func testGuaranteeFilterValues() {
        XCTAssertEqual(Guarantee.value([1, 2, 3]).filterValues(on: nil) { $0 != 2 }.value, [1, 3])
    }

    func testGuaranteeSortedValues() {
        XCTAssertEqual(Guarantee.value([3, 1, 2]).sortedValues(on: nil).value, [1, 2, 3])
    }

    func testGuaranteeSortedValuesWithComparator() {
        XCTAssertEqual(Guarantee.value([3, 1, 2]).sortedValues(on: nil) { $0 > $1 }.value, [3, 2, 1])
    }
}
