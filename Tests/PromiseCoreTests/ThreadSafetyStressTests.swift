import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Resolving and observing from many threads at once. Each test stays well under 20 s under
/// ThreadSanitizer on two cores.
final class ThreadSafetyStressTests: XCTestCase {
    func testResolvingFromEightThreadsHasExactlyOneWinnerAndRunsEachHandlerOnce() {
        let rounds = 10_000
        let mismatches = Counter()
        for _ in 0..<rounds {
            let (p, r) = Promise<Int>.pending()
            let calls = Counter()
            let seen = Locked<Int?>(nil)
            _ = p.done(on: nil) { v in
                calls.increment()
                seen.withLock { $0 = v }
            }
            _ = p.map(on: nil) { _ in calls.increment() }
            DispatchQueue.concurrentPerform(iterations: 8) { i in
                if i % 2 == 0 { r.fulfill(i) } else { r.reject(TestError(code: i)) }
            }
            // Exactly one resolution: both handlers ran once if it was a fulfilment, none otherwise.
            switch p.result {
            case .fulfilled(let v)?:
                if calls.value != 2 || seen.withLock({ $0 }) != v || v % 2 != 0 { mismatches.increment() }
            case .rejected(let e)?:
                if calls.value != 0 || ((e as? TestError)?.code ?? 0) % 2 != 1 { mismatches.increment() }
            case nil:
                mismatches.increment()
            }
        }
        XCTAssertEqual(mismatches.value, 0)
    }

    func testEveryResolveFormFromEightThreadsSettlesOnce() {
        for _ in 0..<2_000 {
            let (p, r) = Promise<Int>.pending()
            let calls = Counter()
            p.pipe { _ in calls.increment() }
            DispatchQueue.concurrentPerform(iterations: 8) { i in
                switch i % 4 {
                case 0: r.fulfill(i)
                case 1: r.resolve(.rejected(TestError(code: i)))
                case 2: r.resolve(i, nil)
                default: r.resolve(Swift.Result<Int, TestError>.success(i))
                }
            }
            XCTAssertEqual(calls.value, 1)
            XCTAssertTrue(p.isResolved)
        }
    }

    func testAttachingHandlersFromSeveralThreadsWhileAnotherResolves() {
        for round in 0..<1_000 {
            let (p, r) = Promise<Int>.pending()
            let calls = Counter()
            let wrong = Counter()
            DispatchQueue.concurrentPerform(iterations: 5) { i in
                if i == 0 {
                    r.fulfill(round)
                } else {
                    for _ in 0..<10 {
                        _ = p.done(on: nil) { v in
                            calls.increment()
                            if v != round { wrong.increment() }
                        }
                    }
                }
            }
            XCTAssertEqual(calls.value, 40)
            XCTAssertEqual(wrong.value, 0)
        }
    }

    func testHandlersOnQueuesAttachedFromManyThreadsEachRunOnce() {
        let (p, r) = Promise<Int>.pending()
        let calls = Counter()
        let tails = Locked<[Promise<Void>]>([])
        let queues = (0..<4).map { DispatchQueue(label: "stress.\($0)") }
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for n in 0..<250 {
                let tail = p.map(on: queues[(i + n) % 4]) { $0 + 1 }.done(on: nil) { _ in calls.increment() }
                tails.withLock { $0.append(tail) }
                if i == 3, n == 100 { r.fulfill(1) }
            }
        }
        XCTAssertNotNil(waitForValue(when(fulfilled: tails.withLock { $0 }), seconds: 30))
        XCTAssertEqual(calls.value, 2_000)
    }

    func testReadingStateWhileResolvingIsConsistent() {
        for _ in 0..<2_000 {
            let (p, r) = Promise<Int>.pending()
            let inconsistent = Counter()
            DispatchQueue.concurrentPerform(iterations: 4) { i in
                if i == 0 {
                    r.fulfill(7)
                } else {
                    for _ in 0..<20 {
                        // A pending promise has no value; once fulfilled, it keeps 7.
                        switch p.result {
                        case nil: break
                        case .fulfilled(7)?: if !p.isFulfilled || p.value != 7 { inconsistent.increment() }
                        default: inconsistent.increment()
                        }
                    }
                }
            }
            XCTAssertEqual(inconsistent.value, 0)
        }
    }

    func testWhenAndRaceInputsSettledFromManyThreads() {
        for _ in 0..<500 {
            let pairs = (0..<8).map { _ in Promise<Int>.pending() }
            let all = when(fulfilled: pairs.map(\.promise))
            let first = race(pairs.map(\.promise))
            let resolved = when(resolved: pairs.map(\.promise))
            DispatchQueue.concurrentPerform(iterations: 8) { i in pairs[i].resolver.fulfill(i) }
            XCTAssertEqual(all.value, Array(0..<8))
            XCTAssertNotNil(first.value)
            XCTAssertEqual(resolved.value?.count, 8)
        }
    }

    func testGuaranteeResolvedFromEightThreadsKeepsTheFirstValue() {
        for _ in 0..<2_000 {
            let (g, resolve) = Guarantee<Int>.pending()
            let calls = Counter()
            _ = g.done(on: nil) { _ in calls.increment() }
            DispatchQueue.concurrentPerform(iterations: 8) { i in resolve(i) }
            XCTAssertEqual(calls.value, 1)
            XCTAssertNotNil(g.value)
        }
    }
}
