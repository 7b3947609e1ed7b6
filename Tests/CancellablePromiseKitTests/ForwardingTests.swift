import XCTest

@testable import CancellablePromiseKit

// A storage that a join absorbed forwards its events to its root (`CancelStorage.lockRoot`). The
// root it finds is the same however long the path, and the path is shortened on the way: after
// one event a storage points straight at its root. Single-threaded (the path under concurrent
// joins is exercised by the join stress and model tests).
final class ForwardingTests: XCTestCase {
    /// Makes `inner` forward to its root through `hops` storages: each join absorbs the root
    /// with fewer absorbed tables into one that has more (`a.join(b)` with as many in both:
    /// `b`'s root absorbs `a`'s).
    private func chain(
        forwardingThrough hops: Int
    ) -> (inner: CancelStorage, root: CancelStorage, kept: [CancelStorage]) {
        var kept: [CancelStorage] = []
        let inner = CancelStorage.make()
        var current = inner
        for _ in 0..<hops {
            // A root with more absorbed tables than `current`'s root, so `current`'s is absorbed.
            let bigger = CancelStorage.make()
            for _ in 0...current.root.absorbedCount {
                let filler = CancelStorage.make()
                filler.join(bigger)
                kept.append(filler)
            }
            current.join(bigger)
            XCTAssertTrue(current.root === bigger, "the root with fewer tables is absorbed")
            kept.append(bigger)
            current = bigger
        }
        return (inner, current, kept)
    }

    func testAStorageTwoJoinsDeepFindsItsRootAndPointsStraightAtItAfterOneEvent() {
        let (inner, root, kept) = chain(forwardingThrough: 2)
        withExtendedLifetime(kept) {
            XCTAssertEqual(inner.forwardingHops, 2, "absorbed, then its root absorbed in turn")
            XCTAssertTrue(inner.root === root, "the event reaches the root through two storages")
            XCTAssertEqual(inner.forwardingHops, 1, "the path is shortened by the event that followed it")
            XCTAssertTrue(inner.root === root)
            XCTAssertEqual(inner.forwardingHops, 1)
            XCTAssertEqual(root.forwardingHops, 0)
        }
    }

    func testALongPathIsCutToOneHopAndACancelThroughItReachesTheWholeChain() {
        let (inner, root, kept) = chain(forwardingThrough: 5)
        withExtendedLifetime(kept) {
            XCTAssertEqual(inner.forwardingHops, 5)
            let member = Promise<Int>.pending()
            let key = inner._add(member.promise, upstream: nil, cancel: nil, addingHandle: false)
            XCTAssertEqual(inner.forwardingHops, 1, "adding a member followed the path and cut it")
            XCTAssertTrue(inner.isListed(key))
            inner.cancel(with: CancellablePromiseError.cancelled, at: .library)
            XCTAssertTrue(member.promise.isRejected, "the cancel through the absorbed storage reached its member")
            XCTAssertNotNil(root.debugState.error, "and cancelled the root's chain")
        }
    }

    func testAStorageOneJoinDeepKeepsItsOneHop() {
        let (inner, root, kept) = chain(forwardingThrough: 1)
        withExtendedLifetime(kept) {
            XCTAssertEqual(inner.forwardingHops, 1)
            XCTAssertTrue(inner.root === root)
            XCTAssertEqual(inner.forwardingHops, 1)
        }
    }
}
