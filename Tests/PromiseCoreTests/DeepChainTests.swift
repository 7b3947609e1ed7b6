import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Resolving and releasing very long chains must not recurse once per link.
final class DeepChainTests: XCTestCase {
    static let depth = 1_000_000

    /// The tail of `links` links built on `head`, each by `link(tail so far, index)`.
    private func chain(from head: Promise<Int>, links: Int, _ link: (Promise<Int>, Int) -> Promise<Int>) -> Promise<Int>
    {
        var tail = head
        for index in 0..<links { tail = link(tail, index) }
        return tail
    }

    /// Whether a pending head is freed once it and the chain `extend` builds on it are dropped
    /// (unresolved); the chain is dropped from the tail that `extend` returns.
    private func headIsFreedWithItsUnresolvedChain(_ extend: (Promise<Int>) -> Promise<Int>) -> Bool {
        weak var weakHead: Promise<Int>?
        do {
            let (head, _) = Promise<Int>.pending()
            weakHead = head
            _ = extend(head)
        }
        return weakHead == nil
    }

    func testResolvingAMillionLinkMapChainFromTheHeadCompletes() {
        let (head, resolver) = Promise<Int>.pending()
        let tail = chain(from: head, links: Self.depth) { tail, _ in tail.map(on: nil) { $0 + 1 } }
        resolver.fulfill(0)
        XCTAssertEqual(tail.value, Self.depth)
    }

    func testResolvingAMillionLinkThenChainFromTheHeadCompletes() {
        let (head, resolver) = Promise<Int>.pending()
        let tail = chain(from: head, links: Self.depth) { tail, _ in tail.then(on: nil) { Promise.value($0 + 1) } }
        resolver.fulfill(0)
        XCTAssertEqual(tail.value, Self.depth)
    }

    func testRejectingAMillionLinkChainPropagatesToTheTail() {
        let (head, resolver) = Promise<Int>.pending()
        let tail = chain(from: head, links: Self.depth) { tail, _ in tail.map(on: nil) { $0 + 1 } }
        resolver.reject(TestError(code: 1))
        XCTAssertEqual(tail.error as? TestError, TestError(code: 1))
    }

    func testAMillionThenBodiesReturningPendingPromisesComplete() {
        let (head, resolver) = Promise<Int>.pending()
        let inner = Promise<Int>.pending()
        let tail = chain(from: head, links: Self.depth / 10) { tail, _ in tail.then(on: nil) { _ in inner.promise } }
        resolver.fulfill(0)
        XCTAssertTrue(tail.isPending)
        inner.resolver.fulfill(5)
        XCTAssertEqual(tail.value, 5)
    }

    func testReleasingAnUnresolvedMillionLinkMapChainCompletes() {
        XCTAssertTrue(
            headIsFreedWithItsUnresolvedChain { head in
                chain(from: head, links: Self.depth) { tail, _ in tail.map(on: nil) { $0 + 1 } }
            })
    }

    func testReleasingAnUnresolvedMillionLinkThenChainCompletes() {
        XCTAssertTrue(
            headIsFreedWithItsUnresolvedChain { head in
                chain(from: head, links: Self.depth) { tail, _ in tail.then(on: nil) { Promise.value($0 + 1) } }
            })
    }

    func testReleasingAnUnresolvedMixedChainCompletes() {
        XCTAssertTrue(
            headIsFreedWithItsUnresolvedChain { head in
                chain(from: head, links: Self.depth / 4) { tail, i in
                    switch i % 4 {
                    case 0: return tail.map(on: nil) { $0 }
                    case 1: return tail.get(on: nil) { _ in }
                    case 2: return tail.recover(on: nil) { _ in Promise.value(0) }
                    default: return tail.then(on: nil) { Promise.value($0) }
                    }
                }
            })
    }

    func testReleasingAnUnresolvedMillionLinkMirrorChainCompletes() {
        XCTAssertTrue(
            headIsFreedWithItsUnresolvedChain { head in
                chain(from: head, links: Self.depth) { tail, _ in tail._mirror() }
            })
    }

    func testAHundredThousandHandlersOnOnePromiseRunInOrder() {
        let count = Self.depth / 10
        let (p, r) = Promise<Int>.pending()
        let recorder = Recorder<Int>()
        for i in 0..<count { _ = p.done(on: nil) { _ in recorder.append(i) } }
        r.fulfill(0)
        let order = recorder.all
        XCTAssertEqual(order.count, count)
        XCTAssertEqual(order.first, 0)
        XCTAssertEqual(order.last, count - 1)
        XCTAssertTrue(zip(order, order.dropFirst()).allSatisfy { $0 < $1 })
    }
}
