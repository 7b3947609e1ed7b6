import XCTest

@testable import CancellablePromiseKit

// Debug builds only: these tests count forwarding hops (`CancelStorage.forwardingHops`), which
// exist only in debug builds of the library.
#if DEBUG

// A storage that a join absorbed forwards its events to its root (`CancelStorage.withRoot`). The
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
            _ = inner._add(member.promise, upstream: nil, cancel: nil, addingHandle: false)
            XCTAssertEqual(inner.forwardingHops, 1, "adding a member followed the path and cut it")
            XCTAssertEqual(inner.debugState.pending, 1, "the member is listed in the root's machine")
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

    // MARK: Lifetime

    /// What keeps the storages of a forwarding path alive is the references along it (and
    /// whoever holds them): once nothing holds the path, every storage of it is freed, the root
    /// and the shortened-away storages included.
    func testTheStoragesOfAPathAreFreedOnceNothingHoldsThem() {
        var weakStorages: [WeakRef] = []
        do {
            let (inner, root, kept) = chain(forwardingThrough: 5)
            XCTAssertTrue(inner.root === root)  // shortens the path
            XCTAssertEqual(inner.forwardingHops, 1)
            weakStorages = ([inner, root] + kept).map { WeakRef(object: $0) }
        }
        XCTAssertGreaterThan(weakStorages.count, 2 + 5, "the inner storage, the root, the roots absorbed, the fillers")
        XCTAssertTrue(weakStorages.allSatisfy { $0.object == nil }, "no storage of the path outlives it")
    }

    /// 100,000 chains, each joined two storages deep into one long-lived context and then given a
    /// step through the absorbed storage (which follows the path and shortens it): those that
    /// settle are freed while the context lives, with their step bodies' captures; abandoned ones
    /// (their resolvers dropped, nothing left to settle them) stay while the long-lived context
    /// can still cancel them, and are freed with it.
    func testChainsJoinedTwoDeepAreFreedOnceDoneOrWithTheContextThatHoldsThem() {
        var weakAbandoned: [WeakRef] = []
        var maxHopsBeforeTheStep = 0
        var maxHopsAfterTheStep = 0
        weak var weakShared: CancelContext?
        do {
            let shared = CancelContext()
            weakShared = shared
            let (sharedSource, sharedResolver) = Promise<Int>.pending()
            let sharedMember = CancellablePromise(sharedSource, cancelContext: shared)
            weak var lastSettledStorage: CancelStorage?
            weak var lastSettledCapture: Tracked?
            for index in 0..<100_000 {
                let (head, resolver) = CancellablePromise<Int>.pending()
                let middle = CancelContext()
                _ = head.cancellize(cancelContext: middle)
                _ = sharedMember.cancellize(cancelContext: middle)
                // Whichever of the two storages the joins left two deep (with as many tables, the
                // argument's root absorbs): a member added through it follows the path.
                let storage = middle.storage
                maxHopsBeforeTheStep = max(maxHopsBeforeTheStep, storage.forwardingHops)
                let capture = Tracked()
                let step = head.promise.map(on: nil) { [capture] value in withExtendedLifetime(capture) { value + 1 } }
                let tail = CancellablePromise(step, cancelContext: middle)
                maxHopsAfterTheStep = max(maxHopsAfterTheStep, storage.forwardingHops)
                if index.isMultiple(of: 1_000) {
                    weakAbandoned += [
                        WeakRef(object: storage), WeakRef(object: capture), WeakRef(object: tail.promise),
                    ]
                } else {
                    resolver.fulfill(index)
                    lastSettledStorage = storage
                    lastSettledCapture = capture
                }
            }
            XCTAssertNil(lastSettledStorage, "a settled chain's storage is freed while the context lives")
            XCTAssertNil(lastSettledCapture, "and its step body's capture")
            XCTAssertTrue(
                weakAbandoned.allSatisfy { $0.object != nil },
                "abandoned chains joined into a live context stay cancellable through it")
            XCTAssertEqual(shared.storage.memberCount, 1 + 2 * 100, "the long-lived member and the abandoned chains")
            withExtendedLifetime((sharedMember, sharedResolver)) {}
        }
        XCTAssertGreaterThanOrEqual(maxHopsBeforeTheStep, 2, "some chains were joined two storages deep")
        XCTAssertLessThanOrEqual(maxHopsAfterTheStep, 1, "the step followed the path and shortened it")
        XCTAssertNil(weakShared)
        XCTAssertTrue(weakAbandoned.allSatisfy { $0.object == nil }, "the abandoned chains go with the context")
    }
}
#endif
