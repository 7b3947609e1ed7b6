import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// Debug builds only: these tests read what the chain machine records (`recorded`, `ChainAction`)
// or `forwardingHops`, which exist only in debug builds of the library.
#if DEBUG

// The rules of cancelling, abandoning and joining chains, at the level of the state machine
// that decides them (`ChainState`), in the manner of ChainStateTests: events sent by hand, with
// no thread and no lock, each asserted by what it recorded (`ChainActions.recorded`); tables are
// read only where the state itself is the rule (a phase, the storages a group lists).

final class ChainStateCancelTests: XCTestCase {
    private let error = ChainError(number: 1)
    private let otherError = ChainError(number: 2)

    // MARK: Liveness and abandonment

    /// "With no cancel handle left, its cancel closures are released uncalled and the work
    /// settles it normally": the last handle of an active chain abandons it.
    func testTheLastHandleOfAnActiveChainAbandonsItReleasingClosuresUncalledAndLeavingPromisesPending() {
        var chain = Chain(members: 3)
        var actions = chain.releaseLastHandle()
        assertRecorded(actions, [.releasedMember, .releasedMember, .releasedMember])
        XCTAssertTrue(chain.state.isAbandoned)
        XCTAssertEqual(chain.table.inUse, 3, "slots are freed by their promises' settle notifications")
        for member in chain.members { assertPending(member) }
        actions.run()
        for member in chain.members { assertReleasedUncalled(member.cancel) }
    }

    /// "A cancelled chain ... never changes again": its last handle does not abandon it.
    func testACancelledChainIsNotAbandonedByItsLastHandle() {
        var chain = Chain(members: 1)
        assertRecorded(chain.cancel(with: error).actions, rejectedAndCalled(chain.members))
        assertNothingRecorded(chain.releaseLastHandle())
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        XCTAssertFalse(chain.state.isAbandoned)
    }

    /// Nothing can cancel an abandoned chain, and a second last handle changes nothing.
    func testAnAbandonedChainIsNeitherCancelledNorAbandonedAgain() {
        var chain = Chain(members: 2)
        var abandoning = chain.releaseLastHandle()
        assertRecorded(abandoning, [.releasedMember, .releasedMember])
        abandoning.run()
        let saved = chain.state

        let (cancelled, actions) = chain.cancel(with: error)
        XCTAssertFalse(cancelled)
        assertNothingRecorded(actions)
        XCTAssertNil(chain.state.cancelledError)
        for member in chain.members { assertPending(member) }

        chain.state = saved
        assertNothingRecorded(chain.releaseLastHandle())
        XCTAssertTrue(chain.state.isAbandoned)
    }

    /// Abandoning reaches every table of a joined group: the absorbed storages' members release
    /// their closures uncalled too.
    func testAbandoningReachesTheTablesOfAbsorbedStorages() {
        let (root, absorbed) = rootAbsorbing(2)
        let members = absorbed.map { root.chain.addMember(in: $0.home(under: root)) }
        let own = root.chain.addMember(in: root.ownHome)
        var actions = ChainActions()
        XCTAssertFalse(root.chain.handlesGone(of: root.ownHome, into: &actions))
        assertRecorded(
            actions, [.releasedMember, .releasedMember, .releasedMember], "the root's own table, then each absorbed one"
        )
        XCTAssertTrue(root.chain.isAbandoned)
        actions.run()
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
        var cancelling = cancelledFollower.cancel(with: boxedCancellation).actions
        var abandoning = abandonedFollower.releaseLastHandle()
        assertRecorded(cancelling, rejectedAndCalled(cancelledFollower.members))
        assertRecorded(abandoning, [.releasedMember])
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
        let cancelling = chain.cancel(with: error)
        var actions = cancelling.actions
        XCTAssertTrue(cancelling.cancelled)
        assertRecorded(actions, rejectedAndCalled(chain.members), "in chain order, each closure once")
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        XCTAssertEqual(chain.table.inUse, 0, "a member rejected under the lock needs no notification")
        for member in chain.members {
            assertRejected(member, with: error)
            assertNotCalled(member.cancel)
        }
        actions.run()
        for member in chain.members { assertCalledOnce(member.cancel) }
    }

    /// A chain is cancelled once: a second cancel records nothing and keeps the first error.
    func testASecondCancelRecordsNothingAndKeepsTheFirstError() {
        var chain = Chain(members: 2)
        var first = chain.cancel(with: error).actions
        assertRecorded(first, rejectedAndCalled(chain.members))
        first.run()
        let (cancelled, actions) = chain.cancel(with: otherError)
        XCTAssertFalse(cancelled)
        assertNothingRecorded(actions)
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
            assertRecorded(settling, [.releasedMember])
            settling.run()
        }
        let (cancelled, actions) = chain.cancel(with: error)
        XCTAssertTrue(cancelled)
        assertNothingRecorded(actions)
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
        var actions = chain.cancel(with: error).actions
        assertRecorded(actions, [.reject(slot: member.slot, wasPending: false), .releasedMember])
        XCTAssertEqual(member.promise.value, 7)
        XCTAssertEqual(chain.table.inUse, 1, "the slot waits for the notification")
        actions.run()
        assertReleasedUncalled(member.cancel)
        assertNothingRecorded(afterTheLock(chain.state.memberSettled(member.index, in: chain.home)))
        XCTAssertEqual(chain.table.inUse, 0)
    }

    /// What a bag or `autoCancel` asks (`cancelIfListed`): the chain is cancelled only while the
    /// member is still listed.
    func testCancelIfListedCancelsTheChainOnlyWhileTheMemberIsListed() {
        var chain = Chain(members: 2)
        let (member, other) = (chain.members[0], chain.members[1])
        // A copy restores the machine, not the promises: the case that settles none comes last.
        let saved = chain.state
        assertRecorded(chain.settle(member), [.releasedMember])
        var ignored = ChainActions()
        chain.state.cancelIfListed(member.key, in: chain.home, root: chain.root.id, into: &ignored)
        assertNothingRecorded(ignored)
        XCTAssertTrue(chain.state.isActive)

        chain.state = saved
        var actions = ChainActions()
        chain.state.cancelIfListed(other.key, in: chain.home, root: chain.root.id, into: &actions)
        // The restored machine still lists `member`, whose promise settled above: it is found
        // settled, not rejected, and its closure released.
        assertRecorded(
            actions, [.reject(slot: member.slot, wasPending: false), .releasedMember] + rejectedAndCalled([other]))
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        assertRejected(other, with: CancellablePromiseError.cancelled)
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
        assertNothingRecorded(chain.link(further, .task(linked.makeBody()), whileBodyRuns: true))

        var actions = chain.cancel(with: error).actions
        assertRecorded(
            actions,
            [
                .reject(slot: head.slot, wasPending: true), .call,
                .reject(slot: step.slot, wasPending: true),
                .release([.promise]),  // the observer: detached, left pending
                .release([.promise]),  // behind it
                .follow(.task, error), .release([.promise]),  // further behind: its link cancelled
                .reject(slot: unrelated.slot, wasPending: true), .call,
            ])
        for member in [head, step, unrelated] { assertRejected(member, with: error) }
        for member in [observer, behind, further] { assertPending(member) }
        XCTAssertEqual(chain.table.inUse, 3, "the detached members wait for their notifications")
        assertFollowed(&actions, linked, with: error)
        actions.run()
        assertCalledOnce(head.cancel)
        assertCalledOnce(unrelated.cancel)

        // Each settles when the observer ahead passes the cancellation on, and frees its slot.
        for member in [observer, behind, further] {
            member.resolver.reject(error)
            assertNothingRecorded(afterTheLock(chain.state.memberSettled(member.index, in: home)))
        }
        XCTAssertEqual(chain.table.inUse, 0)
    }

    // MARK: Exactly the losers

    /// "autoCancel cancels exactly the losers' pending work: never the winner, nothing the
    /// winner's value ... depends on (... branches of one chain), always the loser's own pending
    /// task": a loser in the winner's chain is cancelled alone.
    func testALoserSharingTheWinnersChainIsCancelledAlone() {
        var chain = Chain(members: 3)
        let (winner, loser, other) = (chain.members[0], chain.members[1], chain.members[2])
        let linked = Probe()
        assertNothingRecorded(chain.link(loser, .task(linked.makeBody()), whileBodyRuns: true))
        var actions = chain.cancelLoser(loser, sharesChainWithWinner: true)
        assertRecorded(
            actions, rejectedAndCalled([loser]) + [.follow(.task, CancellablePromiseError.cancelled)],
            "the loser alone: its promise, its closure, its link")
        assertRejected(loser, with: CancellablePromiseError.cancelled)
        XCTAssertTrue(chain.state.isActive, "the winner's chain is not cancelled")
        assertFollowed(&actions, linked, with: CancellablePromiseError.cancelled)
        actions.run()
        assertCalledOnce(loser.cancel)
        assertNotCalled(winner.cancel)
        assertNotCalled(other.cancel)
        // The others are still listed; the loser is not any more.
        assertRecorded(chain.cancel(with: error).actions, rejectedAndCalled([winner, other]))
    }

    /// A loser whose chain the winner does not share has its whole chain cancelled.
    func testALoserInAnotherChainHasItsWholeChainCancelled() {
        var chain = Chain(members: 2)
        var actions = chain.cancelLoser(chain.members[0], sharesChainWithWinner: false)
        assertRecorded(actions, rejectedAndCalled(chain.members))
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        for member in chain.members { assertRejected(member, with: CancellablePromiseError.cancelled) }
        actions.run()
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
            assertNothingRecorded(chain.cancelLoser(chain.members[0], sharesChainWithWinner: shares))
            XCTAssertTrue(chain.state.isActive)
        }
        // The other member is still listed.
        assertRecorded(chain.cancel(with: error).actions, rejectedAndCalled([chain.members[1]]))
    }

    // MARK: Union-by-size joins

    /// "Joining contexts costs O(1) amortised (merge the smaller into the larger)": the root
    /// whose group is smaller is absorbed, whichever side it is on, and counts as a handle of
    /// the other.
    func testJoinAbsorbsTheRootWhoseGroupIsSmaller() {
        for smallerFirst in [true, false] {
            let (larger, absorbed) = rootAbsorbing(2)
            let smaller = Node()
            let (absorption, actions) = smallerFirst ? join(smaller, larger) : join(larger, smaller)
            assertNothingRecorded(actions, "joining two active chains leaves nothing to do")
            XCTAssertEqual(absorption, .init(absorbed: smaller.id, root: larger.id, countsAsHandle: true))
            XCTAssertTrue(smaller.chain.isAbsorbed)
            XCTAssertTrue(larger.chain.isActive)
            XCTAssertEqual(larger.chain.absorbed.count, 3, "the smaller root's table moved into the larger's machine")
            XCTAssertTrue(larger.chain.absorbed.contains(smaller.id))
            withExtendedLifetime(absorbed) {}
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
        let joining = join(other, root)
        assertNothingRecorded(joining.actions)
        XCTAssertEqual(joining.absorption?.absorbed, other.id)
        let after = root.chain.addMember(in: other.home(under: root))

        var actions = ChainActions()
        XCTAssertTrue(root.chain.cancel(with: error, at: .library, root: root.id, into: &actions))
        assertRecorded(
            actions, rejectedAndCalled([own, second, before, after]), "the root's table, then the absorbed one")
        for member in [before, after, own] { assertRejected(member, with: error) }
        XCTAssertEqual(other.table(under: root).inUse, 0, "the rejected members left the absorbed table")
        actions.run()
        for member in [before, after, own] { assertCalledOnce(member.cancel) }
    }

    /// "Joining a cancelled chain cancels the other": the cancelled root absorbs the other,
    /// whichever side it is on; the other's tables (its own and those it absorbed) are
    /// cancelled with the root's error, and it counts as no handle (nothing is left to cancel).
    func testJoiningACancelledRootCancelsTheOtherChainsTablesWithItsError() {
        for cancelledFirst in [true, false] {
            let cancelledRoot = Node()
            var cancelling = ChainActions()
            cancelledRoot.chain.cancel(with: error, at: .library, root: cancelledRoot.id, into: &cancelling)
            let (active, absorbed) = rootAbsorbing(1)
            let own = active.chain.addMember(in: active.ownHome)
            let inAbsorbed = active.chain.addMember(in: absorbed[0].home(under: active))

            let joining = cancelledFirst ? join(cancelledRoot, active) : join(active, cancelledRoot)
            let absorption = joining.absorption
            var actions = joining.actions
            assertRecorded(
                actions, rejectedAndCalled([own, inAbsorbed]), "the other root's table, then the one it absorbed")
            XCTAssertEqual(absorption, .init(absorbed: active.id, root: cancelledRoot.id, countsAsHandle: false))
            XCTAssertTrue(active.chain.isAbsorbed)
            XCTAssertEqual(cancelledRoot.chain.listedCount, 0, "a cancelled chain lists nothing")
            for member in [own, inAbsorbed] {
                assertRejected(member, with: error)
                assertNotCalled(member.cancel)
            }
            actions.run()
            for member in [own, inAbsorbed] { assertCalledOnce(member.cancel) }
        }
    }

    /// "Nothing can cancel" an abandoned chain, and two cancelled chains have nothing left to
    /// cancel: such a join decides nothing, in either order.
    func testJoinDoesNothingWhenEitherChainIsAbandonedOrBothAreCancelled() {
        func abandoned() -> Node {
            let storage = Node()
            var actions = ChainActions()
            _ = storage.chain.handlesGone(of: storage.ownHome, into: &actions)
            return storage
        }
        func cancelled() -> Node {
            let storage = Node()
            var actions = ChainActions()
            storage.chain.cancel(with: error, at: .library, root: storage.id, into: &actions)
            return storage
        }
        func active() -> Node { Node() }
        let pairs: [(String, Node, Node)] = [
            ("abandoned + active", abandoned(), active()), ("active + abandoned", active(), abandoned()),
            ("abandoned + cancelled", abandoned(), cancelled()), ("cancelled + cancelled", cancelled(), cancelled()),
        ]
        for (name, a, b) in pairs {
            let member = b.chain.addMemberIfActive(in: b.ownHome)
            let (absorption, actions) = join(a, b)
            XCTAssertNil(absorption, name)
            assertNothingRecorded(actions, name)
            XCTAssertFalse(a.chain.isAbsorbed || b.chain.isAbsorbed, name)
            if let member {
                // Still listed in its own, still active chain.
                XCTAssertTrue(b.chain.isActive, name)
                var cancelling = ChainActions()
                b.chain.cancel(with: error, at: .library, root: b.id, into: &cancelling)
                assertRecorded(cancelling, rejectedAndCalled([member]), name)
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
            assertNothingRecorded(join(storage, root).actions)
            busy.append((storage, member))
        }
        var empty: [Node] = []
        for _ in 0..<100 {
            let storage = Node()
            assertNothingRecorded(join(storage, root).actions)
            var released = ChainActions()
            XCTAssertTrue(root.chain.handlesGone(of: storage.home(under: root), into: &released), "it held")
            assertNothingRecorded(released, "an idle storage is dropped, nothing is released")
            empty.append(storage)
        }
        XCTAssertLessThan(root.chain.absorbed.count, busy.count + empty.count / 2)
        for (storage, _) in busy {
            XCTAssertTrue(root.chain.absorbed.contains(storage.id), "a busy table stays in the group")
        }
        guard let dropped = empty.first(where: { !root.chain.absorbed.contains($0.id) }) else {
            return XCTFail("no empty table was dropped")
        }

        let relisted = root.chain.addMember(in: dropped.home(under: root))
        XCTAssertTrue(root.chain.absorbed.contains(dropped.id), "reserving a slot makes its table again")
        var cancelling = ChainActions()
        root.chain.cancel(with: error, at: .library, root: root.id, into: &cancelling)
        assertRecorded(
            cancelling, rejectedAndCalled(busy.map(\.member) + [relisted]),
            "each busy table, then the relisted one, are cancelled")
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
#endif
