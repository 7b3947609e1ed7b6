import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// The rules of cancelling, abandoning and joining chains, at the level of the state machine
// that decides them (`ChainState`), in the manner of ChainStateTests: events sent by hand, with
// no thread and no lock, each asserted by what it returned (its `ChainOutcome`); the state is
// read through its documented queries only where the state itself is the rule (an absorbed
// root's phase, the storages a group lists).

final class ChainStateCancelTests: XCTestCase {
    private let error = ChainError(number: 1)
    private let otherError = ChainError(number: 2)

    // MARK: Liveness and abandonment

    /// "With no cancel handle left, its cancel closures are released uncalled and the work
    /// settles it normally": the last handle of an active chain abandons it.
    func testTheLastHandleOfAnActiveChainAbandonsItReleasingClosuresUncalledAndLeavingPromisesPending() {
        var chain = Chain(members: 3)
        var abandoning = chain.releaseLastHandle()
        assertReturned(abandoning, [.releasedMember, .releasedMember, .releasedMember])
        XCTAssertEqual(chain.phase, .abandoned)
        for member in chain.members {
            assertDetached(member, in: chain)  // freed by its promise's settle notification
            assertPending(member)
        }
        abandoning.run()
        for member in chain.members { assertReleasedUncalled(member.cancel) }
    }

    /// "A cancelled chain ... never changes again": its last handle does not abandon it.
    func testACancelledChainIsNotAbandonedByItsLastHandle() {
        var chain = Chain(members: 1)
        assertReturned(chain.cancel(with: error), rejectedAndCalled(chain.members))
        assertNone(chain.releaseLastHandle())
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        XCTAssertEqual(chain.phase, .cancelled)
    }

    /// Nothing can cancel an abandoned chain, and a second last handle changes nothing.
    func testAnAbandonedChainIsNeitherCancelledNorAbandonedAgain() {
        var chain = Chain(members: 2)
        var abandoning = chain.releaseLastHandle()
        assertReturned(abandoning, [.releasedMember, .releasedMember])
        abandoning.run()
        let saved = chain.state

        assertNone(chain.cancel(with: error), "an abandoned chain is not cancelled")
        XCTAssertNil(chain.state.cancelledError)
        for member in chain.members { assertPending(member) }

        chain.state = saved
        assertNone(chain.releaseLastHandle())
        XCTAssertEqual(chain.phase, .abandoned)
    }

    /// Abandoning reaches every table of a joined group: the absorbed storages' members release
    /// their closures uncalled too.
    func testAbandoningReachesTheTablesOfAbsorbedStorages() {
        let (root, absorbed) = rootAbsorbing(2)
        let members = absorbed.map { root.chain.addMember(in: $0.home(under: root)) }
        let own = root.chain.addMember(in: root.ownHome)
        var abandoning = root.chain.handlesGone(of: root.ownHome)
        assertReturned(
            abandoning, [.releasedMember, .releasedMember, .releasedMember],
            "the member of the root's own table and of each absorbed one")
        XCTAssertEqual(root.phase, .abandoned)
        abandoning.run()
        for member in members + [own] {
            assertPending(member)
            assertReleasedUncalled(member.cancel)
        }
    }

    /// "Cancelling one follower withdraws only its interest ... An abandoned follower ... keeps
    /// its interest and settles with the source": a follower's cancel closure (its withdrawal)
    /// is called when its chain is cancelled, released uncalled when abandoned.
    func testACancelledFollowerWithdrawsItsInterestAndAnAbandonedOneKeepsIt() {
        var cancelledFollower = Chain(members: 1)
        var abandonedFollower = Chain(members: 1)
        var cancelling = cancelledFollower.cancel(with: boxedCancellation)
        var abandoning = abandonedFollower.releaseLastHandle()
        assertReturned(cancelling, rejectedAndCalled(cancelledFollower.members))
        assertReturned(abandoning, [.releasedMember])
        cancelling.run()
        abandoning.run()
        assertCalledOnce(cancelledFollower.members[0].cancel)
        assertReleasedUncalled(abandonedFollower.members[0].cancel)
        assertPending(abandonedFollower.members[0])
    }

    // MARK: Cancelling

    /// "First, under the lock, every pending promise of the chain is settled as rejected ...
    /// then, outside the lock, the cancel closures run", each exactly once.
    func testCancelRejectsEveryListedPromiseBeforeItReturnsAndCallsEachClosureOnceAfter() {
        var chain = Chain(members: 3)
        var cancelling = chain.cancel(with: error)
        assertReturned(cancelling, rejectedAndCalled(chain.members), "each promise rejected, each closure once")
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        for member in chain.members {
            assertRejected(member, with: error)
            assertFreed(member, in: chain)  // rejected under the lock: no notification needed
            assertNotCalled(member.cancel)
        }
        cancelling.run()
        for member in chain.members { assertCalledOnce(member.cancel) }
    }

    /// A chain is cancelled once: a second cancel returns nothing and keeps the first error.
    func testASecondCancelReturnsNothingAndKeepsTheFirstError() {
        var chain = Chain(members: 2)
        var first = chain.cancel(with: error)
        assertReturned(first, rejectedAndCalled(chain.members))
        first.run()
        assertNone(chain.cancel(with: otherError))
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        for member in chain.members {
            assertRejected(member, with: error)
            assertCalledOnce(member.cancel)
        }
    }

    /// "A settled chain holds nothing": cancelling it after every member settled marks it
    /// cancelled and calls no closure.
    func testCancelAfterEveryMemberSettledCallsNoClosure() {
        var chain = Chain(members: 2)
        for member in chain.members {
            var settling = chain.settle(member)
            assertLeft(settling, holding: [.releasedMember])
            settling.run()
        }
        assertNone(chain.cancel(with: error))
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        for member in chain.members { assertReleasedUncalled(member.cancel) }
    }

    /// "A settled link's cancel closure is not called": a member whose promise settled on its
    /// own before its notification arrived keeps its result, its closure is released uncalled,
    /// and its slot waits for the notification.
    func testCancelLeavesAMemberThatSettledOnItsOwnToItsNotificationWithoutCallingItsClosure() {
        var chain = Chain(members: 1)
        let member = chain.members[0]
        member.resolver.fulfill(7)
        var cancelling = chain.cancel(with: error)
        assertReturned(cancelling, [.releasedMember], "not rejected: released uncalled")
        XCTAssertEqual(member.promise.value, 7)
        assertDetached(member, in: chain)
        cancelling.run()
        assertReleasedUncalled(member.cancel)
        assertLeft(chain.state.memberSettled(member.index, in: chain.home))
        assertFreed(member, in: chain)
    }

    /// What a bag or `autoCancel` asks (`cancelIfListed`): the chain is cancelled only while the
    /// member is still listed.
    func testCancelIfListedCancelsTheChainOnlyWhileTheMemberIsListed() {
        var chain = Chain(members: 2)
        let (member, other) = (chain.members[0], chain.members[1])
        // A copy restores the machine, not the promises: the case that settles none comes last.
        let saved = chain.state
        assertLeft(chain.settle(member), holding: [.releasedMember])
        assertNone(chain.state.cancelIfListed(member.key, in: chain.home, root: chain.root.id))
        XCTAssertEqual(chain.phase, .active)

        chain.state = saved
        let cancelling = chain.state.cancelIfListed(other.key, in: chain.home, root: chain.root.id)
        // The restored machine still lists `member`, whose promise settled above: it is found
        // settled, not rejected, and its closure released.
        assertReturned(cancelling, [.releasedMember] + rejectedAndCalled([other]))
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        assertRejected(other, with: CancellablePromiseError.cancelled)
    }

    /// What a bag does for a stored finalizer, whose promise is not a member: the chain is
    /// cancelled only while that promise is pending, decided under the chain's lock.
    func testCancelIfPendingCancelsTheChainOnlyWhileTheFinalizersPromiseIsPending() {
        var chain = Chain(members: 1)
        let (finalizer, seal) = Promise<Int>.pending()
        let saved = chain.state
        seal.fulfill(1)
        assertNone(chain.state.cancelIfPending(finalizer, root: chain.root.id))
        XCTAssertEqual(chain.phase, .active)
        assertPending(chain.members[0])

        chain.state = saved
        let (pendingFinalizer, pendingSeal) = Promise<Int>.pending()
        assertReturned(
            chain.state.cancelIfPending(pendingFinalizer, root: chain.root.id), rejectedAndCalled(chain.members))
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        assertRejected(chain.members[0], with: CancellablePromiseError.cancelled)
        pendingSeal.fulfill(0)
    }

    // MARK: Chain order

    /// "Cancellation settles in chain order": an observer and the members behind it are not
    /// rejected by a cancel (the observer passes the cancellation on after its body) but leave
    /// the chain with their links cancelled; members behind no observer are rejected.
    func testCancelDetachesMembersBehindAnObserverAndRejectsTheOthers() {
        var chain = Chain(members: 0)
        let home = chain.home
        let head = chain.state.addMember(in: home)
        let step = chain.state.addStep(in: home, after: head)
        let observer = chain.state.addStep(in: home, after: step, isObserver: true)
        let behind = chain.state.addStep(in: home, after: observer)
        let further = chain.state.addStep(in: home, after: behind)
        let unrelated = chain.state.addMember(in: home)
        let linked = Probe()
        assertNone(chain.link(further, .task(linked.makeBody()), whileBodyRuns: true))

        var cancelling = chain.cancel(with: error)
        let theStep: [Returned] = [.rejected, .release(.promise)]  // no closure
        // The observer and the members behind it: detached, left pending; the last one's link
        // is cancelled.
        let waiting: [Returned] = [.release(.promise), .release(.promise), .release(.promise), .follow(.task, error)]
        assertReturned(cancelling, rejectedAndCalled([head, unrelated]) + theStep + waiting)
        for member in [head, step, unrelated] {
            assertRejected(member, with: error)
            assertFreed(member, in: chain)
        }
        for member in [observer, behind, further] {
            assertPending(member)
            assertDetached(member, in: chain)  // waits for its notification
        }
        assertFollowed(&cancelling, linked, with: error)
        cancelling.run()
        assertCalledOnce(head.cancel)
        assertCalledOnce(unrelated.cancel)

        // Each settles when the observer ahead passes the cancellation on, and frees its slot.
        for member in [observer, behind, further] {
            member.resolver.reject(error)
            assertLeft(chain.state.memberSettled(member.index, in: home))
            assertFreed(member, in: chain)
        }
    }

    // MARK: Exactly the losers

    /// "autoCancel cancels exactly the losers' pending work: never the winner, nothing the
    /// winner's value ... depends on (... branches of one chain), always the loser's own pending
    /// task": a loser in the winner's chain is cancelled alone.
    func testALoserSharingTheWinnersChainIsCancelledAlone() {
        var chain = Chain(members: 3)
        let (winner, loser, other) = (chain.members[0], chain.members[1], chain.members[2])
        let linked = Probe()
        assertNone(chain.link(loser, .task(linked.makeBody()), whileBodyRuns: true))
        var losing = chain.cancelLoser(loser, sharesChainWithWinner: true)
        assertReturned(
            losing, rejectedAndCalled([loser]) + [.follow(.task, CancellablePromiseError.cancelled)],
            "the loser alone: its promise, its closure, its link")
        assertRejected(loser, with: CancellablePromiseError.cancelled)
        XCTAssertEqual(chain.phase, .active, "the winner's chain is not cancelled")
        assertFollowed(&losing, linked, with: CancellablePromiseError.cancelled)
        losing.run()
        assertCalledOnce(loser.cancel)
        assertNotCalled(winner.cancel)
        assertNotCalled(other.cancel)
        // The others are still listed; the loser is not any more.
        assertReturned(chain.cancel(with: error), rejectedAndCalled([winner, other]))
        for member in [winner, other] { assertRejected(member, with: error) }
    }

    /// A loser whose chain the winner does not share has its whole chain cancelled.
    func testALoserInAnotherChainHasItsWholeChainCancelled() {
        var chain = Chain(members: 2)
        var losing = chain.cancelLoser(chain.members[0], sharesChainWithWinner: false)
        assertReturned(losing, rejectedAndCalled(chain.members))
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        for member in chain.members { assertRejected(member, with: CancellablePromiseError.cancelled) }
        losing.run()
        for member in chain.members { assertCalledOnce(member.cancel) }
    }

    /// "The input that settled a combinator is never cancelled by autoCancel": a loser that
    /// settled is not cancelled, alone or with its chain.
    func testASettledLoserIsNotCancelled() {
        var chain = Chain(members: 2)
        var settling = chain.settle(chain.members[0])
        settling.run()
        let saved = chain.state
        for shares in [true, false] {
            chain.state = saved
            assertNone(chain.cancelLoser(chain.members[0], sharesChainWithWinner: shares))
            XCTAssertEqual(chain.phase, .active)
        }
        // The other member is still listed.
        assertReturned(chain.cancel(with: error), rejectedAndCalled([chain.members[1]]))
        assertRejected(chain.members[1], with: error)
    }

    // MARK: Union-by-size joins

    /// "Joining contexts costs O(1) amortised (merge the smaller into the larger)": the root
    /// whose group is smaller is absorbed, whichever side it is on, and counts as a handle of
    /// the other.
    func testJoinAbsorbsTheRootWhoseGroupIsSmaller() {
        for smallerFirst in [true, false] {
            let (larger, _) = rootAbsorbing(2)
            let smaller = Node()
            let joined = smallerFirst ? join(smaller, larger) : join(larger, smaller)
            assertNone(joined.outcome, "joining two active chains leaves nothing to do")
            XCTAssertEqual(joined.absorption, .init(absorbed: smaller.id, root: larger.id, countsAsHandle: true))
            XCTAssertEqual(smaller.chain.phaseName, .absorbed)
            XCTAssertEqual(larger.phase, .active)
            XCTAssertEqual(larger.chain.absorbedCount, 3, "the smaller root's table moved into the larger's machine")
            XCTAssertTrue(larger.chain.contains(smaller.id, root: larger.id))
        }
    }

    /// "Afterwards cancelling either cancels both": cancelling a root rejects the members of
    /// every absorbed table, listed before or after the join, with its error.
    func testCancellingARootReachesEveryAbsorbedTable() {
        let root = Node()
        let other = Node()
        let before = other.chain.addMember(in: other.ownHome)
        let own = root.chain.addMember(in: root.ownHome)
        let second = root.chain.addMember(in: root.ownHome)
        let joined = join(other, root)
        assertNone(joined.outcome)
        XCTAssertEqual(joined.absorption?.absorbed, other.id)
        let after = root.chain.addMember(in: other.home(under: root))

        var cancelling = root.chain.cancel(with: error, at: .library, root: root.id)
        assertReturned(
            cancelling, rejectedAndCalled([own, second, before, after]), "the root's table and the absorbed one")
        for member in [before, after, own, second] { assertRejected(member, with: error) }
        for member in [before, after] {
            assertFreed(member, in: root.chain, at: other.home(under: root))  // left the absorbed table
        }
        cancelling.run()
        for member in [before, after, own, second] { assertCalledOnce(member.cancel) }
    }

    /// "Joining a cancelled chain cancels the other": the cancelled root absorbs the other,
    /// whichever side it is on; the other's tables (its own and those it absorbed) are
    /// cancelled with the root's error, and it counts as no handle (nothing is left to cancel).
    func testJoiningACancelledRootCancelsTheOtherChainsTablesWithItsError() {
        for cancelledFirst in [true, false] {
            let cancelledRoot = Node()
            assertNone(cancelledRoot.chain.cancel(with: error, at: .library, root: cancelledRoot.id))
            let (active, absorbed) = rootAbsorbing(1)
            let own = active.chain.addMember(in: active.ownHome)
            let inAbsorbed = active.chain.addMember(in: absorbed[0].home(under: active))

            let joined = cancelledFirst ? join(cancelledRoot, active) : join(active, cancelledRoot)
            XCTAssertEqual(joined.absorption, .init(absorbed: active.id, root: cancelledRoot.id, countsAsHandle: false))
            var joining = joined.outcome
            assertReturned(
                joining, rejectedAndCalled([own, inAbsorbed]), "the other root's table and the one it absorbed")
            XCTAssertEqual(active.chain.phaseName, .absorbed)
            XCTAssertEqual(cancelledRoot.chain.listedCount, 0, "a cancelled chain lists nothing")
            for member in [own, inAbsorbed] {
                assertRejected(member, with: error)
                assertNotCalled(member.cancel)
            }
            joining.run()
            for member in [own, inAbsorbed] { assertCalledOnce(member.cancel) }
        }
    }

    /// "Nothing can cancel" an abandoned chain, and two cancelled chains have nothing left to
    /// cancel: such a join decides nothing, in either order.
    func testJoinDoesNothingWhenEitherChainIsAbandonedOrBothAreCancelled() {
        func made(_ phase: ChainState.PhaseName) -> (root: Node, member: Member?) {
            let storage = Node()
            switch phase {
            case .abandoned: assertNone(storage.chain.handlesGone(of: storage.ownHome))
            case .cancelled: assertNone(storage.chain.cancel(with: error, at: .library, root: storage.id))
            case .active: return (storage, storage.chain.addMember(in: storage.ownHome))
            case .absorbed: XCTFail("not a root")
            }
            return (storage, nil)
        }
        let pairs: [(ChainState.PhaseName, ChainState.PhaseName)] = [
            (.abandoned, .active), (.active, .abandoned), (.abandoned, .cancelled), (.cancelled, .cancelled),
        ]
        for (aPhase, bPhase) in pairs {
            let name = "\(aPhase) + \(bPhase)"
            let (a, _) = made(aPhase)
            let (b, member) = made(bPhase)
            let joined = join(a, b)
            XCTAssertNil(joined.absorption, name)
            assertNone(joined.outcome, name)
            XCTAssertEqual([a.chain.phaseName, b.chain.phaseName], [aPhase, bPhase], "neither is absorbed: \(name)")
            if let member {
                // Still listed in its own, still active chain.
                let cancelling = b.chain.cancel(with: error, at: .library, root: b.id)
                assertReturned(cancelling, rejectedAndCalled([member]), name)
            }
        }
    }

    /// "A long-lived root that joins many short-lived chains stays about as large as what is
    /// still live": once enough absorbed storages were found idle (an empty table, no handle
    /// left), they are dropped (how many is the machine's tuning: the bound here is loose); the
    /// busy ones stay, and a dropped one that reserves a slot again gets a table again and is
    /// cancelled with the chain.
    func testPruneGroupDropsEmptyAbsorbedTablesAndReserveListsThemAgain() {
        let root = Node()
        var busy: [(storage: Node, member: Member)] = []
        for _ in 0..<4 {
            let storage = Node()
            let member = storage.chain.addMember(in: storage.ownHome)
            assertNone(join(storage, root).outcome)
            busy.append((storage, member))
        }
        var empty: [Node] = []
        for _ in 0..<100 {
            let storage = Node()
            assertNone(join(storage, root).outcome)
            assertReturned(
                root.chain.handlesGone(of: storage.home(under: root)), [.releasesHold],
                "it held; nothing else is released")
            empty.append(storage)
        }
        XCTAssertLessThan(root.chain.absorbedCount, busy.count + empty.count / 2)
        for (storage, _) in busy {
            XCTAssertTrue(root.chain.contains(storage.id, root: root.id), "a busy table stays in the group")
            XCTAssertFalse(root.dropped(storage))
        }
        guard let dropped = empty.first(where: { root.dropped($0) }) else {
            return XCTFail("no empty table was dropped")
        }

        let tables = root.chain.absorbedCount
        let relisted = root.chain.addMember(in: dropped.home(under: root))
        XCTAssertEqual(root.chain.absorbedCount, tables + 1, "reserving a slot makes its table again")
        XCTAssertTrue(root.chain.contains(dropped.id, root: root.id))
        let cancelling = root.chain.cancel(with: error, at: .library, root: root.id)
        assertReturned(
            cancelling, rejectedAndCalled(busy.map(\.member) + [relisted]),
            "each busy table and the relisted one are cancelled")
        assertRejected(relisted, with: error)
        for (_, member) in busy { assertRejected(member, with: error) }
    }

    /// An observer passes its source's result on in an active chain, and the chain's own
    /// cancellation once the chain was cancelled (so the steps after it settle with it).
    func testAnObserverPassesTheChainsCancellationOnOnceItWasCancelled() {
        var chain = Chain(members: 1)
        let observer = chain.state.addStep(in: chain.home, after: chain.members[0], isObserver: true)
        XCTAssertNil(chain.state.errorPassedOnByObservers)
        _ = chain.cancel(with: error)
        XCTAssertEqual(chain.state.errorPassedOnByObservers as? ChainError, error)
        observer.resolver.fulfill(1)
    }
}
