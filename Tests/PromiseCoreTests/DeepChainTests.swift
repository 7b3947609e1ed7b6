import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Resolving and releasing very long chains must not recurse once per link.
final class DeepChainTests: XCTestCase {
    static let depth = 1_000_000

    func testResolvingAMillionLinkMapChainFromTheHeadCompletes() {
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<Self.depth { tail = tail.map(on: nil) { $0 + 1 } }
        resolver.fulfill(0)
        XCTAssertEqual(tail.value, Self.depth)
    }

    func testResolvingAMillionLinkThenChainFromTheHeadCompletes() {
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<Self.depth { tail = tail.then(on: nil) { Promise.value($0 + 1) } }
        resolver.fulfill(0)
        XCTAssertEqual(tail.value, Self.depth)
    }

    func testRejectingAMillionLinkChainPropagatesToTheTail() {
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<Self.depth { tail = tail.map(on: nil) { $0 + 1 } }
        resolver.reject(TestError(code: 1))
        XCTAssertEqual(tail.error as? TestError, TestError(code: 1))
    }

    func testAMillionThenBodiesReturningPendingPromisesComplete() {
        let (head, resolver) = Promise<Int>.pending()
        let inner = Promise<Int>.pending()
        var tail = head
        for _ in 0..<Self.depth / 10 { tail = tail.then(on: nil) { _ in inner.promise } }
        resolver.fulfill(0)
        XCTAssertTrue(tail.isPending)
        inner.resolver.fulfill(5)
        XCTAssertEqual(tail.value, 5)
    }

    func testReleasingAnUnresolvedMillionLinkMapChainCompletes() {
        weak var weakHead: Promise<Int>?
        do {
            let (head, _) = Promise<Int>.pending()
            weakHead = head
            var tail = head
            for _ in 0..<Self.depth { tail = tail.map(on: nil) { $0 + 1 } }
        }
        XCTAssertNil(weakHead)
    }

    func testReleasingAnUnresolvedMillionLinkThenChainCompletes() {
        weak var weakHead: Promise<Int>?
        do {
            let (head, _) = Promise<Int>.pending()
            weakHead = head
            var tail = head
            for _ in 0..<Self.depth { tail = tail.then(on: nil) { Promise.value($0 + 1) } }
        }
        XCTAssertNil(weakHead)
    }

    func testReleasingAnUnresolvedMixedChainCompletes() {
        weak var weakHead: Promise<Int>?
        do {
            let (head, _) = Promise<Int>.pending()
            weakHead = head
            var tail = head
            for i in 0..<Self.depth / 4 {
                switch i % 4 {
                case 0: tail = tail.map(on: nil) { $0 }
                case 1: tail = tail.get(on: nil) { _ in }
                case 2: tail = tail.recover(on: nil) { _ in Promise.value(0) }
                default: tail = tail.then(on: nil) { Promise.value($0) }
                }
            }
        }
        XCTAssertNil(weakHead)
    }

    func testReleasingAnUnresolvedMillionLinkMirrorChainCompletes() {
        weak var weakHead: Promise<Int>?
        do {
            let (head, _) = Promise<Int>.pending()
            weakHead = head
            var tail = head
            for _ in 0..<Self.depth { tail = tail._mirror() }
        }
        XCTAssertNil(weakHead)
    }

    func testAHundredThousandHandlersOnOnePromiseRunInOrder() {
        let count = Self.depth / 10
        let (p, r) = Promise<Int>.pending()
        var order: [Int] = []
        order.reserveCapacity(count)
        for i in 0..<count { _ = p.done(on: nil) { _ in order.append(i) } }
        r.fulfill(0)
        XCTAssertEqual(order.count, count)
        XCTAssertEqual(order.first, 0)
        XCTAssertEqual(order.last, count - 1)
        XCTAssertTrue(zip(order, order.dropFirst()).allSatisfy { $0 < $1 })
    }
}
