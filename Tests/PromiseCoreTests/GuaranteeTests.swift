import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `Guarantee`'s own operators and initialisers.
final class GuaranteeTests: XCTestCase {
    func testValueIsResolved() {
        let g = Guarantee.value(3)
        XCTAssertEqual(g.value, 3)
        XCTAssertTrue(g.isResolved)
    }

    func testResolverInitialiserResolvesWithTheFirstValue() {
        var resolveLater: ((Int) -> Void)?
        let g = Guarantee<Int> { resolve in resolveLater = resolve }
        XCTAssertTrue(g.isPending)
        resolveLater?(1)
        resolveLater?(2)
        XCTAssertEqual(g.value, 1)
        resolveLater = nil
    }

    func testPendingReturnsAResolveFunction() {
        let (g, resolve) = Guarantee<String>.pending()
        XCTAssertNil(g.value)
        resolve("x")
        XCTAssertEqual(g.value, "x")
    }

    func testVoidGuaranteeInitialisersAreResolved() {
        XCTAssertTrue(Guarantee<Void>().isFulfilled)
        XCTAssertTrue(Guarantee<Void>.value.isFulfilled)
    }

    func testDoneRunsWithTheValue() {
        let seen = Recorder<Int>()
        let g: Guarantee<Void> = Guarantee.value(2).done(on: nil) { seen.append($0) }
        XCTAssertEqual(seen.all, [2])
        XCTAssertTrue(g.isFulfilled)
    }

    func testDoneOnTheDefaultQueueRunsOnMain() {
        XCTAssertTrue(handlerRanOnMain { body in Guarantee.value(2).done { _ in body() } })
    }

    func testGetPassesTheValueOn() {
        let seen = Recorder<Int>()
        let g: Guarantee<Int> = Guarantee.value(2).get(on: nil) { seen.append($0) }
        XCTAssertEqual(seen.all, [2])
        XCTAssertEqual(g.value, 2)
    }

    func testMapReturnsAGuarantee() {
        let g: Guarantee<String> = Guarantee.value(2).map(on: nil) { "\($0)" }
        XCTAssertEqual(g.value, "2")
    }

    func testThenFollowsTheReturnedGuarantee() {
        let (inner, resolve) = Guarantee<Int>.pending()
        let g: Guarantee<Int> = Guarantee.value(2).then(on: nil) { _ in inner }
        XCTAssertTrue(g.isPending)
        resolve(5)
        XCTAssertEqual(g.value, 5)
    }

    func testThenOnAPromiseWithAGuaranteeBodyReturnsAPromise() {
        let p: Promise<Int> = Promise.value(1).then(on: nil) { Guarantee.value($0 + 1) }
        XCTAssertEqual(p.value, 2)
    }

    func testAsVoid() {
        let (g, resolve) = Guarantee<Int>.pending()
        let v: Guarantee<Void> = g.asVoid()
        XCTAssertTrue(v.isPending)
        resolve(1)
        XCTAssertTrue(v.isFulfilled)
    }

    func testWaitReturnsTheValueResolvedOnAnotherThread() {
        let (g, resolve) = Guarantee<Int>.pending()
        runWhenAwaited(g.asPromise()) { resolve(4) }
        XCTAssertEqual(g.wait(), 4)
    }

    func testAsPromiseIsTheUnderlyingPromise() {
        let g = Guarantee.value(1)
        XCTAssertTrue(g.asPromise() === g.asPromise())
        XCTAssertEqual(g.asPromise().value, 1)
    }

    func testDescription() {
        XCTAssertEqual(Guarantee.value(1).description, "Guarantee(1)")
        XCTAssertEqual(Guarantee<Int>.pending().guarantee.description, "Guarantee(…Int)")
        XCTAssertEqual(Guarantee.value(1).debugDescription, "Guarantee<Int>.fulfilled(1)")
        XCTAssertEqual(Guarantee<Int>.pending().guarantee.debugDescription, "Guarantee<Int>.pending(handlers: 0)")
    }

    func testPendingGuaranteeDeallocatedIsLogged() {
        XCTAssertEqual(describedLog { _ = Guarantee<Int>.pending() }, ["pendingGuaranteeDeallocated"])
    }

    func testResolvedGuaranteeDeallocatedLogsNothing() {
        XCTAssertEqual(describedLog { Guarantee<Int>.pending().resolve(1) }, [])
    }

    func testGuaranteeOperatorsOnAQueue() {
        let queue = TaggedQueue("guarantee")
        let flags = Recorder<Bool>()
        let g = Guarantee.value(1)
            .map(on: queue.queue) { v -> Int in
                flags.append(queue.isCurrent); return v + 1
            }
            .then(on: queue.queue) { v -> Guarantee<Int> in
                flags.append(queue.isCurrent); return .value(v * 2)
            }
            .get(on: queue.queue) { _ in flags.append(queue.isCurrent) }
        XCTAssertEqual(waitForValue(g), 4)
        XCTAssertEqual(flags.all, [true, true, true])
    }
}
