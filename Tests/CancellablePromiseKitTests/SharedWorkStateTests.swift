import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// The state machine of shared work (`SharedWork`), driven event by event: no threads, no locks,
// no promise ever settled by the machine itself. Each test pins one rule by the actions an event
// returns and the state it leaves. The machine is a value: a test copies it to try a transition
// that must do nothing, and checks the original is untouched.

/// The phase without its payload, to compare.
private enum PhaseKind: Equatable {
    case starting, running, committed, settled, cancelled
}

extension SharedWork {
    fileprivate var kind: PhaseKind {
        switch phase {
        case .starting: return .starting
        case .running: return .running
        case .committed: return .committed
        case .settled: return .settled
        case .cancelled: return .cancelled
        }
    }
}

final class SharedWorkStateTests: XCTestCase {
    /// Every resolver handed to a machine, settled in `tearDown` so that none is released pending.
    private var resolvers: [Resolver<Int>] = []

    override func tearDown() {
        for resolver in resolvers { resolver.fulfill(0) }
        resolvers = []
        super.tearDown()
    }

    // MARK: Helpers

    private func makeResolver() -> Resolver<Int> {
        let resolver = Promise<Int>.pending().resolver
        resolvers.append(resolver)
        return resolver
    }

    private func makeSource() -> CancellablePromise<Int> {
        let (source, resolver) = CancellablePromise<Int>.pending()
        resolvers.append(resolver)
        return source
    }

    /// A machine whose source `source` runs.
    private func running(_ source: CancellablePromise<Int>) -> SharedWork<Int> {
        SharedWork(phase: .running(source))
    }

    /// Joins a follower and returns its key, failing the test if it did not join.
    private func assertJoins(
        _ work: inout SharedWork<Int>, _ resolver: Resolver<Int>? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) -> FollowerKey {
        let joining = work.join(resolver ?? makeResolver())
        guard case .joined(let key) = joining else {
            XCTFail("expected the follower to join, got \(joining)", file: file, line: line)
            return FollowerKey(slot: .max, generation: 0)
        }
        return key
    }

    /// Joins two followers to `work` and cancels the first; returns the cancelled one's key.
    private func joinTwoFollowersAndCancelTheFirst(
        _ work: inout SharedWork<Int>, file: StaticString = #filePath, line: UInt = #line
    ) -> FollowerKey {
        let first = assertJoins(&work, file: file, line: line)
        _ = assertJoins(&work, file: file, line: line)
        _ = work.cancel(first)
        return first
    }

    private func assertPhase(
        _ work: SharedWork<Int>, _ kind: PhaseKind, followers: Int,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(work.kind, kind, "phase", file: file, line: line)
        XCTAssertEqual(work.followerCount, followers, "followers waiting", file: file, line: line)
    }

    /// A cancel that must only withdraw the follower: its resolver back, nothing cancelled.
    private func assertWithdraws(
        _ cancelling: SharedWork<Int>.Cancelling, _ resolver: Resolver<Int>,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertTrue(cancelling.follower === resolver, "the follower's resolver is released", file: file, line: line)
        XCTAssertNil(cancelling.sourceToCancel, "nothing is cancelled", file: file, line: line)
        XCTAssertFalse(cancelling.ended, file: file, line: line)
    }

    /// A cancel that must do nothing at all.
    private func assertNoAction(
        _ cancelling: SharedWork<Int>.Cancelling, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertNil(cancelling.follower, file: file, line: line)
        XCTAssertNil(cancelling.sourceToCancel, file: file, line: line)
        XCTAssertFalse(cancelling.ended, file: file, line: line)
    }

    // MARK: Joining

    /// A follower joins running work: it waits, and the phase does not change.
    func testAFollowerJoinsWhileTheSourceRuns() {
        var work = running(makeSource())
        _ = assertJoins(&work)
        _ = assertJoins(&work)
        assertPhase(work, .running, followers: 2)
    }

    /// A follower joins while the source is being made.
    func testAFollowerJoinsWhileTheSourceIsBeingMade() {
        var work = SharedWork<Int>(phase: .starting)
        _ = assertJoins(&work)
        assertPhase(work, .starting, followers: 1)
    }

    /// A follower made after the source settled gets its result at once and does not wait.
    func testALateFollowerAfterTheSettleGetsTheResult() {
        var work = running(makeSource())
        _ = work.settle(.fulfilled(7))
        guard case .settled(let settled) = work.join(makeResolver()) else { return XCTFail("expected .settled") }
        XCTAssertEqual(settled.result.fulfilledValue, 7)
        assertPhase(work, .settled, followers: 0)
    }

    /// A follower made after every follower was cancelled gets the cancellation at once.
    func testALateFollowerAfterTheCancelGetsTheCancellation() {
        var work = running(makeSource())
        let key = assertJoins(&work)
        _ = work.cancel(key)
        guard case .cancelled(let error) = work.join(makeResolver()) else { return XCTFail("expected .cancelled") }
        XCTAssertEqual(error as? CancellablePromiseError, .cancelled)
        assertPhase(work, .cancelled, followers: 0)
    }

    // MARK: Cancelling

    /// A cancelled follower leaves: its resolver is handed back, the count drops, and the source
    /// runs on while another follower waits.
    func testACancelledFollowerLeavesAndTheCountDrops() {
        var work = running(makeSource())
        let resolver = makeResolver()
        let key = assertJoins(&work, resolver)
        _ = assertJoins(&work)
        assertWithdraws(work.cancel(key), resolver)
        assertPhase(work, .running, followers: 1)
    }

    /// The last follower cancelled cancels the source, once: a repeated cancel does nothing.
    func testTheLastCancelCancelsTheSourceExactlyOnce() {
        let source = makeSource()
        var work = running(source)
        let first = assertJoins(&work)
        let second = assertJoins(&work)
        _ = work.cancel(first)
        let last = work.cancel(second)
        XCTAssertTrue(last.sourceToCancel === source)
        XCTAssertTrue(last.ended)
        assertPhase(work, .cancelled, followers: 0)
        assertNoAction(work.cancel(second))
        assertNoAction(work.cancel(first))
        assertPhase(work, .cancelled, followers: 0)
    }

    /// Cancelling a follower that left already does nothing; the machine tried on is a copy.
    func testCancellingAFollowerTwiceDoesNothing() {
        var work = running(makeSource())
        let key = joinTwoFollowersAndCancelTheFirst(&work)
        var copy = work
        assertNoAction(copy.cancel(key))
        assertPhase(copy, .running, followers: 1)
        assertPhase(work, .running, followers: 1)
    }

    /// A key of a follower that left names nothing once its slot holds a newer follower.
    func testAStaleKeyDoesNotRemoveTheFollowerThatReusedItsSlot() {
        var work = running(makeSource())
        let old = joinTwoFollowersAndCancelTheFirst(&work)
        let newer = assertJoins(&work)
        XCTAssertEqual(newer.slot, old.slot, "the freed slot is reused")
        XCTAssertNotEqual(newer.generation, old.generation)
        assertNoAction(work.cancel(old))
        XCTAssertEqual(work.followerCount, 2)
    }

    /// Followers cancelled newest first or oldest first leave the same way: the last one, and
    /// only it, cancels the source.
    func testFollowersCancelledInEitherOrderCancelTheSourceOnlyAtTheLast() {
        for newestFirst in [false, true] {
            let source = makeSource()
            var work = running(source)
            var keys = (0..<100).map { _ in assertJoins(&work) }
            if newestFirst { keys.reverse() }
            for key in keys.dropLast() { XCTAssertNil(work.cancel(key).sourceToCancel) }
            XCTAssertTrue(work.cancel(keys.last!).sourceToCancel === source)
            assertPhase(work, .cancelled, followers: 0)
        }
    }

    // MARK: Abandoning

    /// An abandoned follower keeps its interest: it still waits, and the work lets go of the
    /// source, which it can no longer cancel.
    func testAnAbandonedFollowerKeepsItsInterestAndTheSourceIsLetGo() {
        let source = makeSource()
        var work = running(source)
        let key = assertJoins(&work)
        let committing = work.abandon(key)
        XCTAssertTrue(committing.sourceToRelease === source)
        assertPhase(work, .committed, followers: 1)
    }

    /// Once a follower was abandoned, cancelling every other one cancels nothing.
    func testAfterAnAbandonmentTheLastCancelDoesNotCancelTheSource() {
        var work = running(makeSource())
        let abandoned = assertJoins(&work)
        let resolver = makeResolver()
        let kept = assertJoins(&work, resolver)
        _ = work.abandon(abandoned)
        assertWithdraws(work.cancel(kept), resolver)
        assertPhase(work, .committed, followers: 1)
        _ = assertJoins(&work)
        assertPhase(work, .committed, followers: 2)
    }

    /// The source is let go of once, however many followers are abandoned.
    func testAbandoningSeveralFollowersReleasesTheSourceOnce() {
        var work = running(makeSource())
        let first = assertJoins(&work)
        let second = assertJoins(&work)
        XCTAssertNotNil(work.abandon(first).sourceToRelease)
        XCTAssertNil(work.abandon(second).sourceToRelease)
        assertPhase(work, .committed, followers: 2)
    }

    /// The report of abandonment that follows a cancel (the cancel closure is released after it
    /// ran) does nothing: the follower left already.
    func testAbandoningACancelledFollowerDoesNothing() {
        var work = running(makeSource())
        let cancelled = joinTwoFollowersAndCancelTheFirst(&work)
        XCTAssertNil(work.abandon(cancelled).sourceToRelease)
        assertPhase(work, .running, followers: 1)
    }

    /// A follower abandoned while the source is being made commits the work: the source is then
    /// made and kept running, not cancelled, even once every other follower was cancelled.
    func testAFollowerAbandonedWhileStartingCommitsTheWork() {
        var work = SharedWork<Int>(phase: .starting)
        let abandoned = assertJoins(&work)
        let kept = assertJoins(&work)
        XCTAssertNil(work.abandon(abandoned).sourceToRelease, "there is no source yet")
        assertPhase(work, .committed, followers: 2)
        let cancelling = work.cancel(kept)
        XCTAssertFalse(cancelling.ended)
        XCTAssertNil(work.started(makeSource()), "the source is not cancelled")
        assertPhase(work, .committed, followers: 1)
    }

    /// Releasing the handle lets go of a source no follower waits on; a settled or cancelled
    /// work has nothing to let go of.
    func testReleasingTheHandleLetsGoOfTheSource() {
        let source = makeSource()
        var work = running(source)
        XCTAssertTrue(work.release().sourceToRelease === source)
        assertPhase(work, .committed, followers: 0)
        XCTAssertNil(work.release().sourceToRelease)

        var settled = running(makeSource())
        _ = settled.settle(.fulfilled(1))
        XCTAssertNil(settled.release().sourceToRelease)
        assertPhase(settled, .settled, followers: 0)
    }

    /// Releasing the handle while a follower waits keeps the source: the follower can still be
    /// cancelled, and the last follower cancelled cancels it.
    func testReleasingTheHandleWhileAFollowerWaitsKeepsTheSourceCancellable() {
        let source = makeSource()
        var work = running(source)
        let key = assertJoins(&work)
        XCTAssertNil(work.release().sourceToRelease)
        assertPhase(work, .running, followers: 1)
        let cancelling = work.cancel(key)
        XCTAssertTrue(cancelling.ended)
        XCTAssertTrue(cancelling.sourceToCancel === source)
    }

    /// Settling says whether it ended the work: once, not for a source settling after the work
    /// ended.
    func testSettlingSaysWhetherItEndedTheWork() {
        var work = running(makeSource())
        _ = assertJoins(&work)
        XCTAssertTrue(work.settle(.fulfilled(1)).ended)
        XCTAssertFalse(work.settle(.fulfilled(2)).ended)

        var starting = SharedWork<Int>(phase: .starting)
        XCTAssertTrue(starting.settle(.fulfilled(1)).ended, "a source settling before it was started")
    }

    // MARK: Starting

    /// The source made while followers wait runs; nothing is cancelled.
    func testTheSourceMadeWhileFollowersWaitRuns() {
        var work = SharedWork<Int>(phase: .starting)
        _ = assertJoins(&work)
        let source = makeSource()
        XCTAssertNil(work.started(source))
        assertPhase(work, .running, followers: 1)
        guard case .running(let kept) = work.phase else { return XCTFail() }
        XCTAssertTrue(kept === source)
    }

    /// Every follower cancelled while the source is being made ends the work at once, and the
    /// source is handed back to be cancelled when it is made.
    func testEveryFollowerCancelledWhileStartingCancelsTheSourceOnceMade() {
        var work = SharedWork<Int>(phase: .starting)
        let key = assertJoins(&work)
        let cancelling = work.cancel(key)
        XCTAssertTrue(cancelling.ended)
        XCTAssertNil(cancelling.sourceToCancel, "there is no source yet")
        assertPhase(work, .cancelled, followers: 0)
        let source = makeSource()
        XCTAssertTrue(work.started(source) === source)
        assertPhase(work, .cancelled, followers: 0)
    }

    // MARK: Settling

    /// The source settling settles every follower waiting, abandoned ones included, and none that
    /// was cancelled; the machine keeps only the result.
    func testSettlingSettlesEveryWaitingFollower() {
        var work = running(makeSource())
        let waiting = makeResolver()
        let abandoned = makeResolver()
        let cancelled = makeResolver()
        _ = assertJoins(&work, waiting)
        let abandonedKey = assertJoins(&work, abandoned)
        let cancelledKey = assertJoins(&work, cancelled)
        _ = work.cancel(cancelledKey)
        _ = work.abandon(abandonedKey)
        let settling = work.settle(.fulfilled(4))
        let settled = Set(settling.followers.map(ObjectIdentifier.init))
        XCTAssertEqual(settled, [ObjectIdentifier(waiting), ObjectIdentifier(abandoned)])
        XCTAssertNil(settling.source, "the committed work no longer held the source")
        assertPhase(work, .settled, followers: 0)
        XCTAssertTrue(work.isEnded)
    }

    /// Settling running work hands back the source, to be released after unlocking.
    func testSettlingRunningWorkReleasesTheSource() {
        let source = makeSource()
        var work = running(source)
        _ = assertJoins(&work)
        let settling = work.settle(.rejected(SharedTestError()))
        XCTAssertTrue(settling.source === source)
        XCTAssertEqual(settling.followers.count, 1)
        guard case .settled(let result) = work.phase else { return XCTFail() }
        XCTAssertEqual(result.result.rejectedError as? SharedTestError, SharedTestError())
    }

    /// A source freed unsettled ends the work as if cancelled and hands back every follower's
    /// resolver to be released; once the work ended, losing the source does nothing.
    func testALostSourceEndsTheWorkAndReleasesItsFollowers() {
        var work = running(makeSource())
        let abandoned = makeResolver()
        let key = assertJoins(&work, abandoned)
        _ = work.abandon(key)
        let released = work.lose()
        XCTAssertEqual(released.map(ObjectIdentifier.init), [ObjectIdentifier(abandoned)])
        assertPhase(work, .cancelled, followers: 0)
        XCTAssertTrue(work.isEnded)
        XCTAssertTrue(work.lose().isEmpty)

        var settled = running(makeSource())
        _ = assertJoins(&settled)
        _ = settled.settle(.fulfilled(1))
        XCTAssertTrue(settled.lose().isEmpty)
        assertPhase(settled, .settled, followers: 0)
    }

    /// Events after the work ended do nothing: a second settle, a cancel, an abandonment.
    func testEventsAfterTheWorkEndedDoNothing() {
        var work = running(makeSource())
        let key = assertJoins(&work)
        _ = work.settle(.fulfilled(1))
        var copy = work
        let again = copy.settle(.fulfilled(2))
        XCTAssertTrue(again.followers.isEmpty)
        XCTAssertNil(again.source)
        assertNoAction(copy.cancel(key))
        XCTAssertNil(copy.abandon(key).sourceToRelease)
        guard case .settled(let result) = copy.phase else { return XCTFail() }
        XCTAssertEqual(result.result.fulfilledValue, 1, "the first result stays")

        var cancelled = running(makeSource())
        let only = assertJoins(&cancelled)
        _ = cancelled.cancel(only)
        let late = cancelled.settle(.fulfilled(3))
        XCTAssertTrue(late.followers.isEmpty, "a source settling after it was cancelled settles nobody")
        assertPhase(cancelled, .cancelled, followers: 0)
    }
}
