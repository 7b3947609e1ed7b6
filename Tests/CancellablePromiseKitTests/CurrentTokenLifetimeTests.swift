import CancellablePromiseKit
import Foundation
import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// What `CancellationToken.current` keeps alive (DESIGN detail 25): a step's token lives while
// the step is pending, in its chain's state, and holds its handlers until it completes. Once
// the step settled on its own, nothing of it is kept: not the token, not what its handlers
// captured, not an entry in a long-lived context the chain shares. Weak references and deinit
// counters, no sleeps.

final class CurrentTokenLifetimeTests: XCTestCase {
    /// 100,000 chains share one long-lived context: made in it (its own members) or joined into
    /// it, with `map`, `then` and initialiser bodies that read their token and register
    /// handlers capturing an object, and that settle on their own. Afterwards every token and
    /// every captured object is freed, every token completed "not cancelled", no handler ran,
    /// and the context lists only its long-lived member, keeps few joined entries and no token.
    func testChainsSharingALongLivedContextHoldNothingOfTheirTokensOnceSettled() {
        let shared = CancelContext()
        let (longLivedSource, longLivedResolver) = Promise<Int>.pending()
        let longLived = longLivedSource.cancellize(cancelContext: shared)
        let captured = Counter()
        let freed = Counter()
        let handlerRuns = Counter()
        let completedNotCancelled = Counter()
        let tokens = Recorder<WeakRef>()
        let count = 100_000

        /// A body's part: reads its token, registers a handler that captures a new object.
        @Sendable func watchCurrentToken(_ index: Int) {
            let token = CancellationToken.current
            let probe = DeinitProbe { freed.increment() }
            captured.increment()
            token.onCancel {
                probe.touch()
                handlerRuns.increment()
            }
            token.onComplete { cancelled in
                if !cancelled { completedNotCancelled.increment() }
            }
            if index.isMultiple(of: 1_000) { tokens.append(WeakRef(object: token)) }
        }

        for index in 0..<count {
            switch index % 3 {
            case 0:
                // Made in the context: the source and the step are the context's own members.
                let (source, resolver) = Promise<Int>.pending()
                _ = source.cancellize(cancelContext: shared).map(on: nil) { value -> Int in
                    watchCurrentToken(index)
                    return value + 1
                }
                resolver.fulfill(index)
            case 1:
                // Made in the context, a `then` that waits on what its body returned.
                let (source, resolver) = Promise<Int>.pending()
                let (returned, returnedResolver) = Promise<Int>.pending()
                _ = source.cancellize(cancelContext: shared).then(on: nil) { _ -> Promise<Int> in
                    watchCurrentToken(index)
                    return returned
                }
                resolver.fulfill(index)
                returnedResolver.fulfill(index)
            default:
                // A chain of its own, from an initialiser whose body reads its token, joined
                // into the context.
                var settle: Resolver<Int>?
                let chain = CancellablePromise<Int> { resolver in
                    watchCurrentToken(index)
                    settle = resolver
                    return {}
                }.map(on: nil) { value -> Int in
                    watchCurrentToken(index)
                    return value + 1
                }
                _ = chain.cancellize(cancelContext: shared)
                settle?.fulfill(index)
            }
        }

        XCTAssertEqual(captured.value, count + count / 3)
        XCTAssertEqual(completedNotCancelled.value, captured.value, "every token completed \"not cancelled\"")
        XCTAssertEqual(freed.value, captured.value, "what the handlers captured is freed")
        XCTAssertGreaterThanOrEqual(tokens.all.count, count / 1_000)
        XCTAssertTrue(tokens.all.allSatisfy { $0.object == nil }, "no token is kept")
        XCTAssertEqual(shared.storage.memberCount, 1, "only the long-lived member is listed")
        XCTAssertLessThanOrEqual(shared.storage.absorbedCount, 256, "joined chains that are done are dropped")
        XCTAssertEqual(shared.storage.bodyTokenCount, 0, "the context keeps no token")
        shared.cancel()
        XCTAssertTrue(longLived.isRejected)
        XCTAssertEqual(handlerRuns.value, 0, "a cancel after the steps settled reaches none of their tokens")
        withExtendedLifetime(longLivedResolver) {}
    }
}
