import CancellablePromiseKit
import Foundation
import XCTest

@testable import CancellablePromiseKit

// The cancellation graph: what keeps a chain alive, how far a cancel reaches, in which order a
// cancelled chain settles, and how joins scale. Weak references and deinit counters, no sleeps.

final class CancellationGraphTests: XCTestCase {
    // MARK: Liveness

    func testAbandonedPendingChainsFreeEverythingTheyCaptured() {
        let freed = Counter()
        for _ in 0..<200_000 {
            let box = DeinitProbe { freed.increment() }
            _ = CancellablePromise<Int>.pending().promise.map(on: nil) { _ -> Int in
                _ = box
                return 1
            }
        }
        XCTAssertEqual(freed.value, 200_000, "an abandoned chain that nothing can settle is freed")
    }

    func testAbandonedChainReleasesCancelClosuresUncalledAndTheTaskSettlesItNormally() {
        let released = Counter()
        let called = Counter()
        let ran = Counter()
        let task = FakeTask<Int>()
        do {
            let probe = DeinitProbe { released.increment() }
            let head = CancellablePromise<Int>(using: task.promise) {
                _ = probe
                called.increment()
            }
            _ = head.map(on: nil) { $0 + 1 }.done(on: nil) { _ in ran.increment() }
        }
        XCTAssertEqual(released.value, 1, "no cancel handle left: the cancel closure is released")
        XCTAssertEqual(called.value, 0, "and not called")
        task.succeed(1)
        XCTAssertEqual(ran.value, 1, "the work settles the chain normally")
    }

    /// A promise of one chain made a member of another too: the chain it was in first still
    /// hears that it settled (its member leaves), once, and so does the second.
    func testAChainStillHearsAMemberThatAnotherChainAdopted() {
        let (first, resolver) = CancellablePromise<Int>.pending()
        let second = CancellablePromise(first.promise)
        let firstStorage = first.cancelContext.storage
        let secondStorage = second.cancelContext.storage
        XCTAssertFalse(firstStorage.root === secondStorage.root, "two chains")
        XCTAssertEqual(firstStorage.memberCount, 1)
        XCTAssertEqual(secondStorage.memberCount, 1)
        XCTAssertEqual(first.promise.debugDescription, "Promise<Int>.pending(handlers: 1)", "the first chain listens")
        resolver.fulfill(1)
        XCTAssertEqual(firstStorage.memberCount, 0)
        XCTAssertEqual(secondStorage.memberCount, 0)
        XCTAssertEqual(second.value, 1)
    }

    func testHoldingTheTailKeepsTheHeadCancellable() {
        let called = Counter()
        var tail: CancellablePromise<Int>?
        weak var weakHead: Promise<Int>?
        do {
            let head = CancellablePromise<Int> { _ in { called.increment() } }
            weakHead = head.promise
            tail = head.map(on: nil) { $0 }.map(on: nil) { $0 }
        }
        XCTAssertNotNil(weakHead)
        assertCancellingThenDroppingFrees(&tail, called: called) { weakHead }
    }

    func testWrapperWhoseBodyNeverSettlesIsFreedWithItsCancelPromiseFulfilled() {
        weak var weakWrapper: CancellablePromise<Int>?
        weak var weakCancelPromise: Promise<Void>?
        let observed = SendableBox<Result<Void>?>(nil)
        do {
            let wrapper = CancellablePromise<Int> { cancelPromise -> Promise<Int> in
                weakCancelPromise = cancelPromise
                cancelPromise.pipe { observed.value = $0 }
                return when(Promise<Int>.pending().promise, while: cancelPromise)
            }
            weakWrapper = wrapper
        }
        XCTAssertNil(weakWrapper)
        XCTAssertNil(weakCancelPromise)
        guard case .fulfilled? = observed.value else {
            return XCTFail(
                "cancelPromise must be fulfilled when the last cancel handle goes away: \(String(describing: observed.value))"
            )
        }
    }

    func testWrapperCancelPromiseStaysPendingWhileTheTailCanCancel() {
        let observed = SendableBox<Result<Void>?>(nil)
        let (inner, innerResolver) = Promise<Int>.pending()
        var tail: CancellablePromise<Int>?
        do {
            let wrapper = CancellablePromise<Int> { cancelPromise -> Promise<Int> in
                cancelPromise.pipe { observed.value = $0 }
                return inner
            }
            tail = wrapper.map(on: nil) { $0 }
        }
        XCTAssertNil(observed.value, "the tail can still cancel the wrapper")
        tail?.cancel()
        guard case .rejected(let error)? = observed.value else { return XCTFail("cancelled: cancelPromise rejects") }
        XCTAssertTrue(error.isCancelled)
        innerResolver.fulfill(1)
    }

    func testMillionLinkPendingCancellableChainIsDroppedWithoutStackOverflow() {
        weak var weakHead: Promise<Int>?
        do {
            let (head, _) = CancellablePromise<Int>.pending()
            weakHead = head.promise
            var tail = head
            for _ in 0..<1_000_000 { tail = tail.map(on: nil) { $0 } }
        }
        XCTAssertNil(weakHead)
    }

    func testTokenKeepsAChainCancellableThatNobodyElseHolds() {
        let request = CancellationRequest()
        let called = Counter()
        do {
            _ = CancellablePromise<Int> { _ in { called.increment() } }.cancel(on: request.token)
        }
        request.cancel()
        XCTAssertEqual(called.value, 1)
    }

    // MARK: Links last only while waiting

    /// Two chains, `a` and `b`, whose `then` bodies returned one shared cancellable promise
    /// and now wait on it.
    private func chainsWaitingOnASharedPromise() -> (
        shared: FakeTask<Int>, sharedPromise: CancellablePromise<Int>, b: CancellablePromise<Int>,
        chainA: CancellablePromise<Int>, chainB: CancellablePromise<Int>
    ) {
        let shared = FakeTask<Int>()
        let sharedPromise = shared.promise.cancellize()
        let (a, aResolver) = CancellablePromise<Int>.pending()
        let (b, bResolver) = CancellablePromise<Int>.pending()
        let chainA = a.then(on: nil) { _ in sharedPromise }
        let chainB = b.then(on: nil) { _ in sharedPromise }
        aResolver.fulfill(1)
        bResolver.fulfill(2)
        return (shared, sharedPromise, b, chainA, chainB)
    }

    func testSharedPromiseDoesNotJoinTheChainsThatReturnedIt() {
        let (shared, sharedPromise, _, chainA, chainB) = chainsWaitingOnASharedPromise()
        shared.succeed(3)
        XCTAssertEqual(chainA.value, 3)
        XCTAssertEqual(chainB.value, 3)

        let laterB = FakeTask<Int>()
        let bLater = chainB.then(on: nil) { _ in laterB.promise.cancellize() }
        chainA.cancel()
        XCTAssertFalse(laterB.isCancelled, "a cancel does not reach another chain through a settled promise")
        XCTAssertFalse(bLater.isCancelled)
        XCTAssertFalse(sharedPromise.isCancelled)
        laterB.succeed(4)
        XCTAssertEqual(bLater.value, 4)
    }

    func testCancellingOneChainWaitingOnASharedPromiseRejectsTheOtherWithoutCancellingIt() {
        let (shared, _, b, chainA, chainB) = chainsWaitingOnASharedPromise()
        let other = FakeTask<Int>()
        let otherPromise = other.promise.cancellize(cancelContext: b.cancelContext)
        chainA.cancel()
        XCTAssertTrue(shared.isCancelled, "the promise A waits on is cancelled with A")
        XCTAssertEqual(chainB.error as? CancellablePromiseError, .cancelled, "its rejection flows down B")
        XCTAssertFalse(chainB.isCancelled, "B itself was not cancelled")
        XCTAssertFalse(other.isCancelled, "B's other pending work is untouched")
        other.succeed(5)
        XCTAssertEqual(otherPromise.value, 5)
    }

    func testReturningASettledCancellablePromiseLinksNothing() {
        let settled = CancellablePromise<Int>.value(1)
        let (a, resolver) = CancellablePromise<Int>.pending()
        let chain = a.then(on: nil) { _ in settled }
        resolver.fulfill(0)
        XCTAssertEqual(chain.value, 1)
        let later = FakeTask<Int>()
        let afterSettled = settled.then(on: nil) { _ in later.promise.cancellize() }
        chain.cancel()
        XCTAssertFalse(settled.isCancelled)
        XCTAssertFalse(later.isCancelled)
        later.succeed(2)
        XCTAssertEqual(afterSettled.value, 2)
    }

    func testLinkEndsWhenTheReturnedPromiseSettles() {
        let inner = FakeTask<Int>()
        let innerPromise = inner.promise.cancellize()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let chain = head.then(on: nil) { _ in innerPromise }
        let next = FakeTask<Int>()
        let tail = chain.then(on: nil) { _ in next.promise.cancellize() }
        resolver.fulfill(1)
        inner.succeed(2)
        tail.cancel()
        XCTAssertTrue(next.isCancelled, "the chain waits on `next`: it is cancelled")
        XCTAssertFalse(innerPromise.isCancelled, "`inner` settled before: its chain is not cancelled")
    }

    func testCancellingWhileWaitingCancelsTheReturnedPromiseAndItsUpstream() {
        let upstream = FakeTask<Int>()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let chain = head.then(on: nil) { _ in upstream.promise.cancellize().map(on: nil) { $0 * 2 } }
        resolver.fulfill(1)
        chain.cancel()
        XCTAssertTrue(upstream.isCancelled)
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
    }

    /// Cancels `chain`, whose far end has a cancel closure counting on `called` (`farEnd` reads a
    /// weak reference to it): checks the closure ran once and the chain is rejected with the
    /// cancellation, then drops the chain and checks its far end was freed with it.
    private func assertCancellingThenDroppingFrees(
        _ chain: inout CancellablePromise<Int>?, called: Counter, farEnd: () -> AnyObject?,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        chain?.cancel()
        XCTAssertEqual(called.value, 1, file: file, line: line)
        XCTAssertEqual(chain?.error as? CancellablePromiseError, .cancelled, file: file, line: line)
        chain = nil
        XCTAssertNil(farEnd(), file: file, line: line)
    }

    /// Builds `depth` chains, each waiting on the next one through a `then` body: returns the
    /// outermost chain and the innermost task's promise.
    private func linkedChains(
        depth: Int,
        cancelled: Counter
    ) -> (outer: CancellablePromise<Int>, innermost: Promise<Int>) {
        let task = CancellablePromise<Int> { _ in { cancelled.increment() } }
        var inner = task
        for _ in 0..<depth {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let next = inner
            inner = head.then(on: nil) { _ in next }
            resolver.fulfill(0)
        }
        return (inner, task.promise)
    }

    func testDeepLinkChainCancelsIterativelyAndIsFreed() {
        weak var weakInnermost: Promise<Int>?
        let called = Counter()
        var outer: CancellablePromise<Int>?
        do {
            let chains = linkedChains(depth: 100_000, cancelled: called)
            outer = chains.outer
            weakInnermost = chains.innermost
        }
        XCTAssertNotNil(weakInnermost, "the outer chain can cancel it")
        assertCancellingThenDroppingFrees(&outer, called: called) { weakInnermost }
    }

    func testDeepLinkChainIsAbandonedIterativelyWhenDropped() {
        weak var weakInnermost: Promise<Int>?
        let called = Counter()
        do {
            let chains = linkedChains(depth: 100_000, cancelled: called)
            weakInnermost = chains.innermost
        }
        XCTAssertNil(weakInnermost, "no handle left and nothing can settle it: freed")
        XCTAssertEqual(called.value, 0)
    }

    // MARK: autoCancel

    func testAutoCancelCancelsTheLoserThatIsABranchOfTheWinnersChain() {
        let slow = FakeTask<Int>()
        let (head, resolver) = CancellablePromise<Int>.pending()
        // The slow branch's body runs first (it starts the slow task), then the fast one wins.
        let slowBranch = head.then(on: nil) { _ in slow.promise.cancellize() }
        let fast = head.map(on: nil) { $0 }
        let winner = race([fast, slowBranch], autoCancel: true)
        resolver.fulfill(7)
        XCTAssertEqual(winner.value, 7)
        XCTAssertTrue(slow.isCancelled, "the loser's own pending task is cancelled")
        XCTAssertEqual(slowBranch.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(fast.isCancelled, "the winner's chain is not cancelled")
        XCTAssertFalse(head.isCancelled)
    }

    func testAutoCancelNeverCancelsTheSamePromiseGivenTwice() {
        let (input, resolver) = CancellablePromise<Int>.pending()
        let result = race([input, input], autoCancel: true)
        resolver.fulfill(1)
        XCTAssertEqual(result.value, 1)
        XCTAssertFalse(input.isCancelled)
    }

    func testFireAndForgetRaceStillCancelsItsLosers() {
        let winner = FakeTask<Int>()
        let loser = FakeTask<Int>()
        let done = Counter()
        do {
            _ = race([winner.promise.cancellize(), loser.promise.cancellize()], autoCancel: true)
                .done(on: nil) { _ in done.increment() }
        }
        winner.succeed(1)
        XCTAssertEqual(done.value, 1)
        XCTAssertTrue(loser.isCancelled)
    }

    func testWhenFulfilledAutoCancelRejectsWithTheFailingInputsError() {
        struct Failure: Error, Equatable {}
        let (a, aResolver) = CancellablePromise<Int>.pending()
        let other = FakeTask<Int>()
        let b = other.promise.cancellize()
        let all = when(fulfilled: [a, b], autoCancel: true)
        aResolver.reject(Failure())
        XCTAssertEqual(all.error as? Failure, Failure())
        XCTAssertTrue(other.isCancelled)
        XCTAssertFalse(a.isCancelled, "the input that settled the combinator is not cancelled")
    }

    func testWhenFulfilledConcurrentlyCancelsPendingInputsOnRejection() {
        struct Failure: Error {}
        let tasks = (0..<4).map { _ in FakeTask<Int>() }
        let all = when(fulfilled: tasks.map { $0.promise.cancellize() }.makeIterator(), concurrently: 2)
        tasks[0].fail(Failure())
        XCTAssertTrue(all.error is Failure)
        XCTAssertFalse(tasks[0].isCancelled)
        XCTAssertTrue(tasks[1].isCancelled, "a rejection cancels the inputs still pending")
    }

    func testAbandonedRaceOfUnsettleableInputsIsFreed() {
        weak var weakInput: Promise<Int>?
        do {
            // Resolvers dropped: nothing can settle the inputs; without autoCancel nothing
            // holds them either.
            let a = CancellablePromise<Int>.pending().promise
            let b = CancellablePromise<Int>.pending().promise
            weakInput = a.promise
            _ = race([a, b])
        }
        XCTAssertNil(weakInput)
    }

    func testSettledAutoCancelRaceHoldsNothing() {
        weak var weakLoser: Promise<Int>?
        let (winner, resolver) = CancellablePromise<Int>.pending()
        let result: CancellablePromise<Int>
        do {
            let loser = CancellablePromise<Int>.pending().promise
            weakLoser = loser.promise
            result = race([winner, loser], autoCancel: true)
        }
        resolver.fulfill(1)
        XCTAssertEqual(result.value, 1)
        XCTAssertNil(weakLoser)
    }

    // MARK: Timeout

    func testTimedOutChainCanBeRecovered() {
        let scheduler = TestScheduler()
        let task = FakeTask<Int>()
        let recovered = task.promise.cancellize().timeout(seconds: 0.01, scheduler: scheduler).recover(on: nil) {
            error -> Promise<Int> in
            guard error is PromiseTimeoutError else { throw error }
            return .value(-1)
        }
        scheduler.advance(by: 0.01)
        XCTAssertEqual(recovered.value, -1)
        XCTAssertTrue(task.isCancelled, "the timeout cancels the task")
    }

    // MARK: Order

    func testDownstreamHandlerRunsAfterTheEnsureThenCleanupResolved() {
        let events = Locked<[String]>([])
        let (cleanup, cleanupResolver) = Guarantee<Void>.pending()
        let task = FakeTask<Int>()
        let chain = task.promise.cancellize()
            .ensureThen(on: nil) {
                events.withLock { $0.append("cleanup started") }
                return cleanup
            }
            .map(on: nil) { $0 }
        chain.catch(on: nil, policy: .allErrors) { _ in events.withLock { $0.append("catch") } }
        chain.cancel()
        XCTAssertEqual(events.withLock { $0 }, ["cleanup started"], "the catch waits for the cleanup")
        XCTAssertNil(chain.result, "a step after the observer settles when the observer passes the cancellation on")
        cleanupResolver(())
        XCTAssertEqual(events.withLock { $0 }, ["cleanup started", "catch"])
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
    }

    func testObserversSeeTheCancellationInChainOrder() {
        let events = Locked<[String]>([])
        let queue = DispatchQueue(label: "observers")
        let task = FakeTask<Int>()
        let tail = task.promise.cancellize()
            .ensure(on: queue) { events.withLock { $0.append("ensure 1") } }
            .map(on: nil) { $0 }
            .tap(on: nil) { _ in events.withLock { $0.append("tap 2") } }
            .ensure(on: nil) { events.withLock { $0.append("ensure 3") } }
        tail.cancel()
        _ = waitForResult(tail)
        XCTAssertEqual(events.withLock { $0 }, ["ensure 1", "tap 2", "ensure 3"])
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
    }

    func testRecoverAfterAnObserverNeverRunsForTheChainsCancellation() {
        let task = FakeTask<Int>()
        let recovered = Flag()
        let tail = task.promise.cancellize()
            .ensure(on: nil) {}
            .recover(on: nil, policy: .allErrors) { _ -> Promise<Int> in
                recovered.raise()
                return .value(0)
            }
        tail.cancel()
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(recovered.value)
    }

    // MARK: Joins

    func testHundredThousandJoinsIntoOneContextAreLinear() {
        let shared = CancelContext()
        var members: [CancellablePromise<Int>] = []
        members.reserveCapacity(100_000)
        for index in 0..<100_000 {
            let member = CancellablePromise<Int>.pending().promise
            // Alternate which side is passed first, so that both merge directions occur.
            if index.isMultiple(of: 2) {
                members.append(member.cancellize(cancelContext: shared))
            } else {
                _ = CancellablePromise<Int>(member.promise, cancelContext: shared).cancellize(
                    cancelContext: member.cancelContext)
                members.append(member)
            }
        }
        shared.cancel()
        XCTAssertTrue(members.allSatisfy { $0.isCancelled && $0.isRejected })
    }

    func testALongLivedContextForgetsTheChainsItJoinedOnceTheyAreDone() {
        let shared = CancelContext()
        let (sharedSource, sharedResolver) = Promise<Int>.pending()
        let sharedMember = CancellablePromise(sharedSource, cancelContext: shared)
        let (liveSource, liveResolver) = Promise<Int>.pending()
        let live = liveSource.cancellize()
        _ = live.cancellize(cancelContext: shared)
        for _ in 0..<10_000 {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            _ = promise.map(on: nil) { $0 }.cancellize(cancelContext: shared)
            resolver.fulfill(1)
        }
        XCTAssertLessThanOrEqual(shared.storage.absorbedCount, 256, "joined chains that are done are dropped")
        XCTAssertEqual(shared.storage.memberCount, 2)
        shared.cancel()
        XCTAssertTrue(sharedMember.isRejected)
        XCTAssertTrue(live.isRejected && live.isCancelled, "a live joined chain is still cancelled with it")
        withExtendedLifetime((sharedResolver, liveResolver)) {}
    }

    /// What keeps a joined chain's storage alive is its own members and handles, not the
    /// long-lived root that absorbed it: 100,000 chains joined into one context and done are freed
    /// while the context lives, and the context keeps only a few of their (idle) entries.
    func testChainsJoinedIntoALongLivedContextAreFreedOnceDone() {
        let shared = CancelContext()
        let (sharedSource, sharedResolver) = Promise<Int>.pending()
        let sharedMember = CancellablePromise(sharedSource, cancelContext: shared)
        weak var firstContext: CancelContext?
        weak var lastPromise: CancellablePromise<Int>?
        for index in 0..<100_000 {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let tail = promise.map(on: nil) { $0 + 1 }
            if index.isMultiple(of: 2) {
                _ = tail.cancellize(cancelContext: shared)
            } else {
                _ = sharedMember.cancellize(cancelContext: tail.cancelContext)
            }
            if index == 0 { firstContext = tail.cancelContext }
            lastPromise = tail
            resolver.fulfill(index)
        }
        XCTAssertNil(firstContext, "the first joined chain's context is gone")
        XCTAssertNil(lastPromise, "the last joined chain is gone")
        XCTAssertLessThanOrEqual(shared.storage.absorbedCount, 256, "idle entries are dropped")
        XCTAssertEqual(shared.storage.memberCount, 1, "only the long-lived member is listed")
        shared.cancel()
        XCTAssertTrue(sharedMember.isRejected)
        withExtendedLifetime(sharedResolver) {}
    }

    func testJoiningACancelledChainCancelsTheOther() {
        let cancelled = CancelContext()
        cancelled.cancel()
        let task = FakeTask<Int>()
        let promise = task.promise.cancellize()
        _ = promise.cancellize(cancelContext: cancelled)
        XCTAssertTrue(promise.isCancelled)
        XCTAssertTrue(task.isCancelled)
    }

    func testIsCancelledNeverGoesBackWhileAnotherThreadJoins() {
        for _ in 0..<2_000 {
            let a = CancellablePromise<Int>.pending().promise
            let b = CancellablePromise<Int>.pending().promise
            let seenFalseAfterCancel = Flag()
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 {
                    a.cancel()
                    for _ in 0..<20 where !a.isCancelled { seenFalseAfterCancel.raise() }
                } else {
                    _ = b.cancellize(cancelContext: a.cancelContext)
                }
            }
            XCTAssertFalse(seenFalseAfterCancel.value)
            XCTAssertTrue(b.isCancelled)
        }
    }

    func testSettledContextReleasesItsMemberStorage() {
        let context = CancelContext()
        var resolvers: [Resolver<Int>] = []
        for _ in 0..<10_000 {
            let (promise, resolver) = Promise<Int>.pending()
            _ = promise.cancellize(cancelContext: context).map(on: nil) { $0 }
            resolvers.append(resolver)
        }
        XCTAssertEqual(context.storage.memberCount, 20_000)
        for resolver in resolvers { resolver.fulfill(1) }
        XCTAssertEqual(context.storage.memberCount, 0)
        XCTAssertEqual(context.storage.memberCapacity, 0, "a settled chain keeps no member array")
    }

    func testALongLivedContextGivesBackMemberStorageAsMostMembersSettle() {
        let context = CancelContext()
        let (promises, resolvers) = pendingMembers(10_000, of: context)
        XCTAssertGreaterThanOrEqual(context.storage.memberCapacity, 9_999)
        for (index, resolver) in resolvers.enumerated() where index >= 100 { resolver.fulfill(index) }
        XCTAssertEqual(context.storage.memberCount, 100)
        XCTAssertLessThanOrEqual(
            context.storage.memberCapacity, 4 * 100 + 64, "the member array shrinks with what is still pending")
        context.cancel()
        XCTAssertTrue(promises.prefix(100).allSatisfy { $0.promise.isRejected })
        XCTAssertTrue(promises.dropFirst(100).allSatisfy { $0.promise.isFulfilled })
    }

    // MARK: Who cancelled this?

    func testDebugDescriptionNamesWhereAndWithWhatTheChainWasCancelled() {
        let (head, _) = CancellablePromise<Int>.pending()
        let tail = head.map(on: nil) { $0 }
        XCTAssertTrue(tail.debugDescription.contains("pending: 2"), tail.debugDescription)
        let line = #line + 1
        head.cancel()
        let site = "cancelled at CancellablePromiseKitTests/CancellationGraphTests.swift:\(line)"
        XCTAssertTrue(
            tail.debugDescription.contains("\(site) with CancellablePromiseError.cancelled, pending: 0"),
            tail.debugDescription)
        XCTAssertTrue(tail.cancelContext.debugDescription.contains(site), tail.cancelContext.debugDescription)
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled, "the error stays matchable")
    }

    func testCancellingThroughTheCancellableProtocolRecordsNoCallSite() {
        let (head, _) = CancellablePromise<Int>.pending()
        let cancellable: any Cancellable = head
        cancellable.cancel()
        XCTAssertTrue(head.debugDescription.contains("cancelled at CancellablePromiseKit with"), head.debugDescription)
    }
}

extension CancellationGraphTests {
    /// `count` pending promises made cancellable in `context`, and their resolvers.
    func pendingMembers(_ count: Int, of context: CancelContext) -> ([CancellablePromise<Int>], [Resolver<Int>]) {
        var resolvers: [Resolver<Int>] = []
        var promises: [CancellablePromise<Int>] = []
        for _ in 0..<count {
            let (promise, resolver) = Promise<Int>.pending()
            promises.append(promise.cancellize(cancelContext: context))
            resolvers.append(resolver)
        }
        return (promises, resolvers)
    }

    func testALongLivedContextGivesBackTheSlotsOfItsNewestMembersAsTheySettleNewestFirst() {
        let context = CancelContext()
        let (keep, keepResolver) = Promise<Int>.pending()
        let kept = keep.cancellize(cancelContext: context)
        let (promises, resolvers) = pendingMembers(10_000, of: context)
        for (index, resolver) in resolvers.enumerated().reversed() { resolver.fulfill(index) }
        XCTAssertEqual(context.storage.memberCount, 1)
        XCTAssertLessThanOrEqual(context.storage.memberCapacity, 64, "the table's end is given back")
        // The table still works: new members reuse it, and a cancel reaches them.
        let (late, _) = Promise<Int>.pending()
        let lateMember = late.cancellize(cancelContext: context)
        context.cancel()
        XCTAssertTrue(kept.promise.isRejected)
        XCTAssertTrue(lateMember.promise.isRejected)
        XCTAssertTrue(promises.allSatisfy { $0.promise.isFulfilled })
        keepResolver.fulfill(0)
    }
}
