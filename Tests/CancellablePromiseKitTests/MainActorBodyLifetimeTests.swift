import CancellablePromiseKit
import Foundation
import XCTest

// What keeps a main-actor body (one given no `on:`) alive, and what frees it: its step holds it
// until it runs on the main queue, or until the step learns it never will (its chain was
// cancelled, its source rejected); an abandoned chain holds it as long as its context can still
// cancel the chain. Observed with deinit counters on what the bodies capture and weak references
// to the steps.

final class MainActorBodyLifetimeTests: XCTestCase {
    func testAMainActorBodyAndItsCapturesAreFreedOnceItRanOnTheMainQueue() {
        let deinits = Counter()
        let ran = Flag()
        weak var weakStep: Promise<Int>?
        let (head, resolver) = Promise<Int>.pending()
        do {
            let probe = DeinitProbe { deinits.increment() }
            let step = head.map { value -> Int in
                probe.touch()
                ran.raise()
                return value + 1
            }
            weakStep = step
        }
        XCTAssertEqual(deinits.value, 0, "the pending step holds its body and what it captures")
        resolver.fulfill(1)
        XCTAssertFalse(ran.value, "a main-actor body is queued on the main queue, never run at once")
        drainMainQueue()
        XCTAssertTrue(ran.value)
        XCTAssertEqual(deinits.value, 1, "the body is released once it ran")
        XCTAssertNil(weakStep)
    }

    func testACancelledChainFreesAMainActorBodyThatNeverRan() {
        let deinits = Counter()
        let ran = Flag()
        weak var weakTail: Promise<Int>?
        var context: CancelContext?
        do {
            let probe = DeinitProbe { deinits.increment() }
            let head = CancellablePromise<Int> { _ in {} }
            let tail = head.map { value -> Int in
                probe.touch()
                ran.raise()
                return value
            }
            weakTail = tail.promise
            context = tail.cancelContext
        }
        XCTAssertNotNil(weakTail, "a pending chain is held while its context can cancel it")
        XCTAssertEqual(deinits.value, 0)
        context?.cancel()
        context = nil
        drainMainQueue()
        XCTAssertFalse(ran.value, "a body that had not started never runs once its chain is cancelled")
        XCTAssertEqual(deinits.value, 1, "the body and its captures are released by the cancel")
        XCTAssertNil(weakTail)
    }

    func testABodyQueuedBeforeTheCancelIsReleasedWithoutRunning() {
        let deinits = Counter()
        let ran = Flag()
        let (head, resolver) = CancellablePromise<Int>.pending()
        do {
            let probe = DeinitProbe { deinits.increment() }
            _ = head.map { value -> Int in
                probe.touch()
                ran.raise()
                return value
            }
        }
        resolver.fulfill(1)  // the body's hop is queued on the main queue
        head.cancelContext.cancel()
        drainMainQueue()
        XCTAssertFalse(ran.value, "the queued body asks the chain before it starts")
        XCTAssertEqual(deinits.value, 1)
    }

    func testAnAbandonedChainKeepsItsMainActorBodyWhileItsContextLivesAndFreesItWithTheContext() {
        let deinits = Counter()
        var context: CancelContext?
        weak var weakTail: Promise<Void>?
        do {
            let probe = DeinitProbe { deinits.increment() }
            let (head, _) = CancellablePromise<Int>.pending()  // the resolver is dropped: abandoned
            let tail = head.done { _ in probe.touch() }
            weakTail = tail.promise
            context = tail.cancelContext
        }
        drainMainQueue()
        XCTAssertEqual(deinits.value, 0, "the context can still cancel the chain, so it keeps it")
        XCTAssertNotNil(weakTail)
        XCTAssertEqual(context?.isCancelled, false)
        context = nil
        XCTAssertEqual(deinits.value, 1, "released with the last thing that could cancel it")
        XCTAssertNil(weakTail)
    }

    func testManyMainActorBodiesAreAllFreedOnceRun() {
        let rounds = 100_000
        let deinits = Counter()
        let ran = Counter()
        for round in 0..<rounds {
            let probe = DeinitProbe { deinits.increment() }
            Promise.value(round).done { _ in
                probe.touch()
                ran.increment()
            }.cauterize()
        }
        drainMainQueue(hops: 3)
        XCTAssertEqual(ran.value, rounds)
        XCTAssertEqual(deinits.value, rounds, "no body or capture outlives its run")
    }
}
