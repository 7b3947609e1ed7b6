import Foundation
import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// A cancel that follows many links costs O(n), not O(n²). One cancel collects the rejections
// of every chain it reaches in one list (each reached chain's event returns its own, which the
// first one adopts); these tests count how often that list grew once it held some
// (`ChainEffects.rejectionListGrowths`, debug builds) instead of timing the cancel. Making room
// for exactly one more chain at a time grows (and copies) the list once per chain reached:
// quadratic in the chains.

#if DEBUG
final class CancelLinkScalingTests: XCTestCase {
    private let chains = 4_000

    private var growths: Int { ChainEffects.rejectionListGrowths.withLock { $0 } }

    /// Growths allowed for a cancel reaching `count` promises: geometric growth doubles the list
    /// each time, so about log2(count), with room for other tests' stray cancels.
    private func growthLimit(_ count: Int) -> Int {
        2 * (Int.bitWidth - count.leadingZeroBitCount) + 8
    }

    func testACancelFollowingManyLinksGrowsItsRejectionListLogarithmicallyOften() {
        // One chain whose `then` bodies returned the promises of `chains` other chains, each
        // with two pending promises: the head's chain waits on all of them (a link each).
        let head = CancellablePromise.value(0)
        var resolvers: [Resolver<Int>] = []
        var linked: [CancellablePromise<Int>] = []
        var waiting: [CancellablePromise<Int>] = []
        for _ in 0..<chains {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let tail = promise.map(on: nil) { $0 }
            resolvers.append(resolver)
            linked.append(tail)
            waiting.append(head.then(on: nil) { _ in tail })
        }
        let before = growths
        head.cancel()
        let grown = growths - before
        XCTAssertLessThanOrEqual(grown, growthLimit(3 * chains), "the list grows geometrically")
        XCTAssertGreaterThan(grown, 0, "the counter counts (a cancel of this size grows the list)")
        XCTAssertTrue(linked.allSatisfy { $0.isCancelled && $0.promise.isRejected }, "every linked chain cancelled")
        XCTAssertTrue(waiting.allSatisfy { $0.error as? CancellablePromiseError == .cancelled })
        withExtendedLifetime(resolvers) {}
    }

    func testACancelFollowingANestOfLinksGrowsItsRejectionListLogarithmicallyOften() {
        // Recursive pagination: page i's `then` body returns page i + 1's chain, whose `then`
        // and `map` are pending in turn; the last page waits. The cancel follows the nest,
        // `chains` links deep.
        let chains = self.chains
        let resolvers = Recorder<Resolver<Int>>()
        let pages = Recorder<CancellablePromise<Int>>()
        let lastPage = SendableBox<CancellablePromise<Int>?>(nil)
        @Sendable func page(_ index: Int) -> CancellablePromise<Int> {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            resolvers.append(resolver)
            guard index < chains else {
                lastPage.value = promise
                return promise
            }
            let rest = promise.then(on: nil) { _ in page(index + 1) }.map(on: nil) { $0 + 1 }
            pages.append(rest)
            return rest
        }
        let outer = page(0)
        var index = 0
        while index < chains {
            resolvers.all[index].fulfill(index)  // runs page index's body, which makes the next page
            index += 1
        }
        XCTAssertEqual(resolvers.all.count, chains + 1, "every page made, the last one waiting")
        let before = growths
        outer.cancel()
        let grown = growths - before
        XCTAssertLessThanOrEqual(grown, growthLimit(2 * chains), "the list grows geometrically")
        XCTAssertTrue(
            pages.all.allSatisfy { $0.error as? CancellablePromiseError == .cancelled }, "every page cancelled")
        XCTAssertEqual(lastPage.value?.error as? CancellablePromiseError, .cancelled, "the nest's innermost page too")
    }
}
#endif
