import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Every `race` form.
final class RaceTests: XCTestCase {
    func testRaceVariadicFulfilsWithTheFirstToFulfil() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let winner = race(a, b)
        rb.fulfill(2)
        ra.fulfill(1)
        XCTAssertEqual(winner.value, 2)
    }

    func testRaceVariadicRejectsWhenTheFirstToSettleRejects() {
        let (a, ra) = Promise<Int>.pending()
        let (b, rb) = Promise<Int>.pending()
        let winner = race(a, b)
        ra.reject(TestError(code: 1))
        rb.fulfill(2)
        XCTAssertEqual(winner.error as? TestError, TestError(code: 1))
    }

    func testRaceArrayFulfilsWithTheFirstToSettle() {
        let (a, _) = Promise<Int>.pending()
        let winner = race([a, Promise.value(5)])
        XCTAssertEqual(winner.value, 5)
    }

    func testRaceEmptyArrayRejectsWithBadInput() {
        XCTAssertEqual(pmkCase(race([Promise<Int>]()).error), "badInput")
    }

    func testRaceOfGuaranteesGivesAGuarantee() {
        let (a, resolveA) = Guarantee<Int>.pending()
        let (b, resolveB) = Guarantee<Int>.pending()
        let winner: Guarantee<Int> = race(a, b)
        XCTAssertTrue(winner.isPending)
        resolveB(2)
        resolveA(1)
        XCTAssertEqual(winner.value, 2)
    }

    func testRaceOfOneGuarantee() {
        let winner: Guarantee<Int> = race(Guarantee.value(3))
        XCTAssertEqual(winner.value, 3)
    }

    func testRaceFulfilledSkipsRejections() {
        let (winner, ra, rb) = raceFulfilledOfTwoPendingPromises()
        ra.reject(TestError(code: 1))
        XCTAssertTrue(winner.isPending)
        rb.fulfill(2)
        XCTAssertEqual(winner.value, 2)
    }

    func testRaceFulfilledWithEveryInputRejectedRejectsWithNoWinner() {
        let (winner, ra, rb) = raceFulfilledOfTwoPendingPromises()
        ra.reject(TestError(code: 1))
        rb.reject(TestError(code: 2))
        XCTAssertEqual(pmkCase(winner.error), "noWinner")
    }

    func testRaceFulfilledEmptyRejectsWithBadInput() {
        XCTAssertEqual(pmkCase(race(fulfilled: [Promise<Int>]()).error), "badInput")
    }

    func testRaceFulfilledIgnoresRejectionsAfterTheWinner() {
        let (a, ra) = Promise<Int>.pending()
        let winner = race(fulfilled: [a, Promise.value(1)])
        ra.reject(TestError())
        XCTAssertEqual(winner.value, 1)
    }

    func testRaceFromManyThreadsHasExactlyOneWinner() {
        for _ in 0..<200 {
            let pairs = (0..<8).map { _ in Promise<Int>.pending() }
            let winner = race(pairs.map(\.promise))
            DispatchQueue.concurrentPerform(iterations: 8) { i in pairs[i].resolver.fulfill(i) }
            let v = winner.value
            XCTAssertNotNil(v)
            XCTAssertEqual(pairs[v ?? 0].promise.value, v)
        }
    }
}

/// `race(fulfilled:)` of two pending promises, with their resolvers.
private func raceFulfilledOfTwoPendingPromises() -> (winner: Promise<Int>, ra: Resolver<Int>, rb: Resolver<Int>) {
    let (a, ra) = Promise<Int>.pending()
    let (b, rb) = Promise<Int>.pending()
    return (race(fulfilled: [a, b]), ra, rb)
}
