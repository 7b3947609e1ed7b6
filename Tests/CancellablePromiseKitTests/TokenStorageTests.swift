import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

/// A long-lived token keeps only what is still live: derived tokens nobody can observe any
/// more, removed registrations, registered objects that died and derived tokens that completed
/// are all released while the token lives on, and its storage (`pendingHandlerCount`) stays
/// bounded however many were made.
final class TokenStorageTests: XCTestCase {
    private let rounds = 200_000

    /// Derives `rounds` tokens from `root`'s token with `derive`, each handed a new probe that
    /// counts when it is freed, and drops each at once: checks that the last of them and every
    /// probe were freed, and that `root`'s token keeps no handler for them.
    private func assertDroppedDerivedTokensAreFreedWithTheirProbes(
        of root: CancellationRequest, _ derive: (CancellationToken, DeinitProbe) -> CancellationToken,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let freed = Counter()
        weak var last: CancellationToken?
        for _ in 0..<rounds {
            let probe = DeinitProbe { freed.increment() }
            let derived = derive(root.token, probe)
            last = derived
        }
        XCTAssertNil(last, file: file, line: line)
        XCTAssertEqual(freed.value, rounds, file: file, line: line)
        XCTAssertEqual(root.token.pendingHandlerCount, 0, file: file, line: line)
    }

    // MARK: Dropped derived tokens are freed

    func testDroppedMappedTokensAreFreedWithWhatTheirTransformCaptured() {
        let root = CancellationRequest()
        let transforms = Counter()
        assertDroppedDerivedTokensAreFreedWithTheirProbes(of: root) { token, probe in
            token.map {
                probe.touch()
                transforms.increment()
                return true
            }
        }
        root.cancel()
        XCTAssertEqual(transforms.value, 0)
    }

    func testDroppedFlatMappedTokensAreFreedWithWhatTheirTransformCaptured() {
        let root = CancellationRequest()
        assertDroppedDerivedTokensAreFreedWithTheirProbes(of: root) { token, probe in
            token.flatMap {
                probe.touch()
                return CancellationToken.none
            }
        }
    }

    func testDroppedFlatMappedTokensFollowingALongLivedTokenAreFreed() {
        // After its own operand is cancelled, a flatMap token waits on the token its transform
        // returned; dropping it then leaves that (long-lived) token too.
        let root = CancellationRequest()
        weak var last: CancellationToken?
        for _ in 0..<rounds / 4 {
            let outer = CancellationRequest()
            let flat = outer.token.flatMap { root.token }
            outer.cancel()
            if flat.isCompleted || root.token.pendingHandlerCount != 1 {
                XCTFail("the flatMap token should wait on the root, and only it")
                break
            }
            last = flat
        }
        XCTAssertNil(last)
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
    }

    func testDroppedAndTokensAreFreed() {
        assertDroppedTokensAreFreed { $0 && $1 }
    }

    func testDroppedOrTokensAreFreed() {
        assertDroppedTokensAreFreed { $0 || $1 }
    }

    /// Makes `rounds` tokens from two long-lived operands with `combine` and drops each: none
    /// survives, and the operands keep no entry for them.
    private func assertDroppedTokensAreFreed(
        _ combine: (CancellationToken, CancellationToken) -> CancellationToken,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let left = CancellationRequest()
        let right = CancellationRequest()
        weak var last: CancellationToken?
        for _ in 0..<rounds {
            let combined = combine(left.token, right.token)
            last = combined
        }
        XCTAssertNil(last, file: file, line: line)
        XCTAssertEqual(left.token.pendingHandlerCount, 0, file: file, line: line)
        XCTAssertEqual(right.token.pendingHandlerCount, 0, file: file, line: line)
    }

    func testDroppedChainsOfDerivedTokensAreFreed() {
        let root = CancellationRequest()
        let other = CancellationRequest()
        let freed = Counter()
        for _ in 0..<rounds / 4 {
            let probe = DeinitProbe { freed.increment() }
            let chain = ((root.token || other.token).map { probe.touchedTrue() } && root.token).flatMap { other.token }
            _ = chain
        }
        XCTAssertEqual(freed.value, rounds / 4)
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
        XCTAssertEqual(other.token.pendingHandlerCount, 0)
    }

    // MARK: A derived token with handlers of its own stays alive

    func testUnheldDerivedTokensStillRunTheirHandlersWhenTheRootIsCancelled() {
        let root = CancellationRequest()
        let other = CancellationRequest()
        let log = Recorder<String>()
        let spy = TokenCancellableSpy()
        weak var mapped: CancellationToken?
        weak var either: CancellationToken?
        weak var both: CancellationToken?
        weak var flat: CancellationToken?
        weak var chained: CancellationToken?
        do {
            let m = root.token.map { true }
            m.onCancel { log.append("map") }
            mapped = m
            let e = root.token || other.token
            e.onComplete { log.append("or \($0)") }
            either = e
            let b = root.token && other.token
            b.onCancel(on: nil) { log.append("and") }
            both = b
            let f = root.token.flatMap { other.token }
            f.onComplete { log.append("flatMap \($0)") }
            flat = f
            // Two derived tokens, neither held: the outer one's registration keeps both alive.
            let c = root.token.map { true }.map { true }
            c.register(spy)
            chained = c
        }
        XCTAssertNotNil(mapped)
        XCTAssertNotNil(either)
        XCTAssertNotNil(both)
        XCTAssertNotNil(flat)
        XCTAssertNotNil(chained)
        root.cancel()
        XCTAssertEqual(Set(log.all), ["map", "or true"])
        XCTAssertEqual(spy.cancelCount, 1)
        XCTAssertNil(mapped)  // completed: nothing keeps it any more
        XCTAssertNil(either)
        XCTAssertNil(chained)
        XCTAssertNotNil(both)  // still waiting for `other`
        XCTAssertNotNil(flat)
        other.cancel()
        XCTAssertEqual(log.all.count, 4)
        XCTAssertEqual(Set(log.all), ["map", "or true", "and", "flatMap true"])
        XCTAssertNil(both)
        XCTAssertNil(flat)
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
        XCTAssertEqual(other.token.pendingHandlerCount, 0)
    }

    func testUnheldDerivedTokenRunsItsHandlersWhenItCompletesNotCancelled() {
        var root: CancellationRequest? = CancellationRequest()
        let completions = Recorder<Bool>()
        weak var mapped: CancellationToken?
        do {
            let m = root!.token.map { true }
            m.onComplete { completions.append($0) }
            mapped = m
        }
        XCTAssertNotNil(mapped)
        root = nil
        XCTAssertEqual(completions.all, [false])
        XCTAssertNil(mapped)
    }

    func testUnheldDerivedTokensCancelTheirTokenPromisesAndBoundChains() {
        let screen = CancellationRequest()
        let search = CancellationRequest()
        var resolver: Resolver<Int>?
        let promise = Promise<Int>(cancellationToken: screen.token || search.token) { pending in
            resolver = pending  // the task keeps its resolver
            return {}
        }
        let (chain, chainResolver) = CancellablePromise<Int>.pending()
        chain.cancel(on: search.token.map { true } || screen.token)
        search.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(chain.isCancelled)
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(screen.token.pendingHandlerCount, 0)
        _ = resolver
        _ = chainResolver
    }

    func testRemovingTheLastHandlerOfAnUnheldDerivedTokenFreesIt() {
        let root = CancellationRequest()
        let freed = Counter()
        weak var mapped: CancellationToken?
        let runs = Counter()
        var first: CancellationRegistration?
        var second: CancellationRegistration?
        do {
            let probe = DeinitProbe { freed.increment() }
            let m = root.token.map {
                probe.touch()
                return true
            }
            mapped = m
            first = m.onCancel { runs.increment() }
            second = m.onComplete { _ in runs.increment() }
        }
        XCTAssertTrue(first!.remove())
        XCTAssertNotNil(mapped)  // one handler left
        XCTAssertEqual(root.token.pendingHandlerCount, 1)
        XCTAssertTrue(second!.remove())
        XCTAssertNil(mapped)
        XCTAssertEqual(freed.value, 1)
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
        root.cancel()
        XCTAssertEqual(runs.value, 0)
    }

    func testAddingAndRemovingHandlersOnUnheldDerivedTokensDoesNotAccumulate() {
        let root = CancellationRequest()
        var most = 0
        var removed = 0
        for _ in 0..<rounds / 4 {
            let registration = (root.token.map { true } && root.token).onCancel {}
            most = max(most, root.token.pendingHandlerCount)
            if registration.remove() { removed += 1 }
        }
        XCTAssertEqual(most, 2)  // the `map` link and one of the `&&` links
        XCTAssertEqual(removed, rounds / 4)
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
    }

    // MARK: Registered objects that died

    func testUnheldDerivedTokensWhoseRegisteredObjectsDiedAreFreed() {
        let root = CancellationRequest()
        let other = CancellationRequest()
        let freed = Counter()
        for round in 0..<rounds {
            let probe = DeinitProbe { freed.increment() }
            let derived: CancellationToken
            switch round % 3 {
            case 0: derived = root.token.map { probe.touchedTrue() }
            case 1: derived = (root.token || other.token).map { probe.touchedTrue() }
            default: derived = root.token.map { probe.touchedTrue() }.map { true }
            }
            derived.register(TokenCancellableSpy())  // released at once
        }
        // Dead registrations are swept as the root grows: what is left is a small constant.
        XCTAssertLessThan(root.token.pendingHandlerCount, 64)
        XCTAssertLessThan(other.token.pendingHandlerCount, 64)
        XCTAssertGreaterThan(freed.value, rounds - 64)

        // Registered objects that are alive keep their derived tokens through every sweep. The
        // root's list stays within twice its live links plus the live entries below them.
        let alive = (0..<100).map { _ in TokenCancellableSpy() }
        for spy in alive { root.token.map { true }.register(spy) }
        for _ in 0..<10_000 { root.token.map { true }.register(TokenCancellableSpy()) }
        XCTAssertLessThanOrEqual(root.token.pendingHandlerCount, 2 * 100 + 100 + 16)
        root.cancel()
        XCTAssertTrue(alive.allSatisfy { $0.cancelCount == 1 })
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
    }

    func testReleasedCancellablesAreSweptFromAnUnheldDerivedTokenAsItGrows() {
        let root = CancellationRequest()
        let derived = root.token.map { true }
        for _ in 0..<10_000 { derived.register(TokenCancellableSpy()) }
        XCTAssertLessThan(derived.pendingHandlerCount, 64)
    }

    // MARK: Completed derived tokens leave their operands

    func testCompletedDerivedTokensLeaveTheirLongLivedOperands() {
        let root = CancellationRequest()
        var held: [CancellationToken] = []
        for _ in 0..<10_000 {
            let cancelled = CancellationRequest()
            var released: CancellationRequest? = CancellationRequest()
            let either = root.token || cancelled.token
            let both = root.token && released!.token
            cancelled.cancel()  // decides `either`
            released = nil  // decides `both`
            XCTAssertTrue(either.isCancelled)
            XCTAssertTrue(both.isCompleted)
            XCTAssertFalse(both.isCancelled)
            held.append(either)
            held.append(both)
        }
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
        withExtendedLifetime(held) {}
    }

    func testOrTokenReleasesAnOperandThatCompletedUndecided() {
        weak var weakLeft: CancellationToken?
        let right = CancellationRequest()
        let either: CancellationToken
        do {
            let left = CancellationRequest()
            weakLeft = left.token
            either = left.token || right.token
        }
        XCTAssertNil(weakLeft)  // completed "not cancelled": `either` needs only `right` now
        XCTAssertFalse(either.isCompleted)
        right.cancel()
        XCTAssertTrue(either.isCancelled)
    }

    // MARK: Token promises

    func testSettledTokenPromisesFreeTheirUnheldDerivedTokens() {
        let root = CancellationRequest()
        let other = CancellationRequest()
        for value in 0..<10_000 {
            let promise = Promise<Int>(cancellationToken: root.token || other.token) { resolver in
                resolver.fulfill(value)
                return {}
            }
            XCTAssertEqual(promise.value, value)
        }
        XCTAssertEqual(root.token.pendingHandlerCount, 0)
        XCTAssertEqual(other.token.pendingHandlerCount, 0)
    }

    func testAbandonedTokenPromisesDoNotAccumulateOnALongLivedToken() {
        let root = CancellationRequest()
        let released = Counter()
        let previous = conf.logHandler
        conf.logHandler = { _ in }  // every abandoned resolver reports a pending promise
        defer { conf.logHandler = previous }
        for _ in 0..<10_000 {
            let probe = DeinitProbe { released.increment() }
            // The task drops its resolver: nothing can settle the promise or observe it.
            _ = Promise<Int>(cancellationToken: root.token) { _ in { probe.touch() } }
        }
        XCTAssertLessThan(root.token.pendingHandlerCount, 64)
        XCTAssertGreaterThan(released.value, 10_000 - 64)

        // A task that keeps its resolver stays registered, and is cancelled.
        let cancels = Counter()
        var resolver: Resolver<Int>?
        let live = Promise<Int>(cancellationToken: root.token) { pending in
            resolver = pending
            return { cancels.increment() }
        }
        for _ in 0..<1_000 { _ = Promise<Int>(cancellationToken: root.token) { _ in {} } }
        root.cancel()
        XCTAssertEqual(cancels.value, 1)
        XCTAssertEqual(live.error as? CancellablePromiseError, .cancelled)
        _ = resolver
    }
}
