import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// An object whose deallocation a test observes through a weak reference.
final class Tracked: @unchecked Sendable {
    let id: Int
    init(_ id: Int = 0) { self.id = id }
}

/// Settled chains release their closures and promises.
final class LeakTests: XCTestCase {
    /// A pending promise, its resolver, the chain `makeTail` builds on it with closures capturing
    /// a new tracked object, and a weak reference to that object.
    private func chainCapturingATrackedObject(
        _ makeTail: (Promise<Int>, Tracked) -> Promise<Int>
    ) -> (resolver: Resolver<Int>, tail: Promise<Int>, captured: () -> Tracked?) {
        let (p, r) = Promise<Int>.pending()
        let object = Tracked()
        let tail = makeTail(p, object)
        return (r, tail, { [weak object] in object })
    }

    func testSettledMapChainReleasesItsClosures() {
        let (r, tail, captured) = chainCapturingATrackedObject { p, object in p.map(on: nil) { v in v + object.id } }
        XCTAssertNotNil(captured())
        r.fulfill(1)
        XCTAssertEqual(tail.value, 1)
        XCTAssertNil(captured(), "the map closure outlived the settlement")
    }

    func testEveryOperatorReleasesItsClosureOnceSettled() {
        var weakObjects: [() -> Tracked?] = []
        let (p, r) = Promise<Int>.pending()
        var chain: [AnyObject] = []
        func track() -> Tracked {
            let object = Tracked()
            weakObjects.append { [weak object] in object }
            return object
        }
        do {
            let a = track(), b = track(), c = track(), d = track(), e = track(), f = track()
            let g = track(), h = track(), i = track(), j = track(), k = track()
            let tail =
                p
                .then(on: nil) { v -> Promise<Int> in
                    _ = a; return .value(v)
                }
                .compactMap(on: nil) { v -> Int? in
                    _ = b; return v
                }
                .get(on: nil) { _ in _ = c }
                .tap(on: nil) { _ in _ = d }
                .map(on: nil) { _ -> Int in
                    _ = e; throw TestError()
                }
                .recover(on: nil) { _ -> Promise<Int> in
                    _ = f; return .value(1)
                }
                .ensure(on: nil) { _ = g }
                .ensureThen(on: nil) { () -> Guarantee<Void> in
                    _ = h; return Guarantee()
                }
            chain.append(tail)
            let finalizer = tail.done(on: nil) { _ in
                _ = i; throw TestError()
            }.catch(on: nil) { _ in _ = j }
            finalizer.finally(on: nil) { _ = k }
            chain.append(finalizer)
        }
        XCTAssertEqual(weakObjects.compactMap { $0() }.count, 11)
        r.fulfill(1)
        XCTAssertEqual(weakObjects.compactMap { $0() }.count, 0)
        chain.removeAll()
    }

    func testSkippedClosuresAreReleasedToo() {
        let (r, tail, captured) = chainCapturingATrackedObject { p, object in
            p.map(on: nil) { v in v + object.id }.recover(on: nil) { _ in Promise.value(object.id) }
        }
        r.fulfill(1)
        XCTAssertEqual(tail.value, 1)
        XCTAssertNil(captured(), "the recover closure outlived the settlement")
    }

    func testClosureOnAQueueIsReleasedAfterItRuns() {
        weak var captured: Tracked?
        let q = DispatchQueue(label: "leak.queue")
        var tail: Promise<Int>
        do {
            let object = Tracked()
            captured = object
            tail = Promise.value(1).map(on: q) { v in v + object.id }
        }
        XCTAssertEqual(waitForValue(tail), 1)
        q.sync {}
        XCTAssertNil(captured)
    }

    func testSettledPromisesOfAChainAreFreedWhenTheTailIsReleased() {
        weak var weakMiddle: Promise<Int>?
        let (p, r) = Promise<Int>.pending()
        do {
            let middle = p.map(on: nil) { $0 + 1 }
            weakMiddle = middle
            _ = middle.map(on: nil) { $0 + 1 }
        }
        XCTAssertNotNil(weakMiddle, "a pending chain is kept alive by its head")
        r.fulfill(1)
        XCTAssertNil(weakMiddle)
    }

    func testUnresolvedChainIsFreedWithItsHead() {
        weak var weakTail: Promise<Int>?
        weak var captured: Tracked?
        do {
            let (p, _) = Promise<Int>.pending()
            let object = Tracked()
            captured = object
            weakTail = p.map(on: nil) { $0 + object.id }.then(on: nil) { Promise.value($0) }
        }
        XCTAssertNil(weakTail)
        XCTAssertNil(captured)
    }

    func testWhenReleasesItsInputsObserversOnceSettled() {
        weak var weakAggregate: Promise<[Int]>?
        let (a, ra) = Promise<Int>.pending()
        do {
            let all: Promise<[Int]> = when(fulfilled: [a, Promise.value(2)])
            weakAggregate = all
        }
        XCTAssertNotNil(weakAggregate, "pending inputs keep the aggregate alive")
        ra.fulfill(1)
        XCTAssertNil(weakAggregate)
    }

    /// The aggregate is the handler of its inputs and keeps only their addresses: abandoned
    /// inputs free it, and it keeps none of them alive.
    func testWhenAndRaceOverAbandonedInputsAreFreedWithThem() {
        weak var weakInput: Promise<Int>?
        weak var weakWhen: Promise<[Int]>?
        weak var weakResolved: Promise<[Result<Int>]>?
        weak var weakRace: Promise<Int>?
        _ = recordingLog {
            let inputs = (0..<3).map { _ in Promise<Int>.pending() }
            weakInput = inputs[0].promise
            let all: Promise<[Int]> = when(fulfilled: inputs.map(\.promise) + [inputs[0].promise])
            let resolved = when(resolved: inputs.map(\.promise))
            let first = race(inputs.map(\.promise))
            weakWhen = all
            weakResolved = resolved.promise
            weakRace = first
            XCTAssertNotNil(weakWhen)
            XCTAssertNotNil(weakResolved)
        }
        XCTAssertNil(weakInput)
        XCTAssertNil(weakWhen)
        XCTAssertNil(weakResolved)
        XCTAssertNil(weakRace)
    }

    func testDroppedPendingResolverLogsAndFreesThePromise() {
        weak var weakPromise: Promise<Int>?
        let events = recordingLog {
            let (p, _) = Promise<Int>.pending()
            weakPromise = p
        }
        XCTAssertNil(weakPromise)
        XCTAssertEqual(describeLog(events), ["pendingPromiseDeallocated"])
    }

    func testResolverKeptByAPendingPromiseIsNotLoggedWhileAlive() {
        var resolver: Resolver<Int>?
        let events = recordingLog {
            let (_, r) = Promise<Int>.pending()
            resolver = r
        }
        XCTAssertEqual(describeLog(events), [])
        XCTAssertNotNil(resolver)
        let later = recordingLog { resolver = nil }
        XCTAssertEqual(describeLog(later), ["pendingPromiseDeallocated"])
    }

    func testPipeClosureIsReleasedOnceCalled() {
        weak var captured: Tracked?
        let (p, r) = Promise<Int>.pending()
        do {
            let object = Tracked()
            captured = object
            p.pipe { _ in _ = object }
        }
        r.fulfill(1)
        XCTAssertNil(captured)
    }
}
