import PromiseCore
import XCTest

@testable import CancellablePromiseKit

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
    /// their closures uncalled too, and the group's storages are released.
    func testAbandoningReachesTheTablesOfAbsorbedStorages() {
        let (root, absorbed) = rootAbsorbing(2)
        let members = absorbed.map { root.chain.addMember(in: $0.home(under: root)) }
        let own = root.chain.addMember(in: root.ownHome)
        var actions = ChainActions()
        root.chain.lastHandleReleased(into: &actions)
        assertRecorded(
            actions, [.releasedMember, .releasedMember, .releasedMember, .releaseStorages(count: absorbed.count)],
            "the root's own table, then each absorbed one, then the group's storages")
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
        chain.state.cancelIfListed(member.key, in: chain.home, root: chain.root, into: &ignored)
        assertNothingRecorded(ignored)
        XCTAssertTrue(chain.state.isActive)

        chain.state = saved
        var actions = ChainActions()
        chain.state.cancelIfListed(other.key, in: chain.home, root: chain.root, into: &actions)
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
            let smaller = CancelStorage.make()
            let (absorption, actions) = smallerFirst ? join(smaller, larger) : join(larger, smaller)
            assertNothingRecorded(actions, "joining two active chains leaves nothing to do")
            XCTAssertTrue(absorption?.absorbed === smaller)
            XCTAssertTrue(absorption?.root === larger)
            XCTAssertEqual(absorption?.countsAsHandle, true)
            XCTAssertTrue(smaller.chain.isAbsorbed)
            XCTAssertTrue(larger.chain.isActive)
            XCTAssertEqual(larger.chain.group.count, 3)
            XCTAssertTrue(larger.chain.group.contains { $0 === smaller })
            withExtendedLifetime(absorbed) {}
        }
    }

    /// "Afterwards cancelling either cancels both": cancelling a root rejects the members of
    /// every absorbed table, listed before or after the join, with its error.
    func testCancellingARootReachesEveryAbsorbedTable() {
        let root = CancelStorage.make()
        let other = CancelStorage.make()
        let before = other.chain.addMember(in: other.ownHome)
        let own = root.chain.addMember(in: root.ownHome)
        let second = root.chain.addMember(in: root.ownHome)
        let joining = join(other, root)
        assertNothingRecorded(joining.actions)
        XCTAssertTrue(joining.absorption?.absorbed === other)
        let after = root.chain.addMember(in: other.home(under: root))

        var actions = ChainActions()
        XCTAssertTrue(root.chain.cancel(with: error, at: .library, root: root, into: &actions))
        assertRecorded(
            actions, rejectedAndCalled([own, second, before, after]) + [.releaseStorages(count: 1)],
            "the root's table, then the absorbed one; then the group's storage")
        for member in [before, after, own] { assertRejected(member, with: error) }
        XCTAssertEqual(root.chain.group.count, 0, "a cancelled chain lists no storage")
        actions.run()
        for member in [before, after, own] { assertCalledOnce(member.cancel) }
    }

    /// "Joining a cancelled chain cancels the other": the cancelled root absorbs the other,
    /// whichever side it is on; the other's tables (its own and those it absorbed) are
    /// cancelled with the root's error, and it counts as no handle (nothing is left to cancel).
    func testJoiningACancelledRootCancelsTheOtherChainsTablesWithItsError() {
        for cancelledFirst in [true, false] {
            let cancelledRoot = CancelStorage.make()
            var cancelling = ChainActions()
            cancelledRoot.chain.cancel(with: error, at: .library, root: cancelledRoot, into: &cancelling)
            let (active, absorbed) = rootAbsorbing(1)
            let own = active.chain.addMember(in: active.ownHome)
            let inAbsorbed = active.chain.addMember(in: absorbed[0].home(under: active))

            let joining = cancelledFirst ? join(cancelledRoot, active) : join(active, cancelledRoot)
            let absorption = joining.absorption
            var actions = joining.actions
            assertRecorded(
                actions, rejectedAndCalled([own, inAbsorbed]) + [.releaseStorages(count: 2)],
                "the other root's table, then the one it absorbed; then both storages")
            XCTAssertTrue(absorption?.absorbed === active)
            XCTAssertTrue(absorption?.root === cancelledRoot)
            XCTAssertEqual(absorption?.countsAsHandle, false)
            XCTAssertTrue(active.chain.isAbsorbed)
            XCTAssertEqual(cancelledRoot.chain.group.count, 0, "a cancelled chain lists no storage")
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
        func abandoned() -> CancelStorage {
            let storage = CancelStorage.make()
            var actions = ChainActions()
            storage.chain.lastHandleReleased(into: &actions)
            return storage
        }
        func cancelled() -> CancelStorage {
            let storage = CancelStorage.make()
            var actions = ChainActions()
            storage.chain.cancel(with: error, at: .library, root: storage, into: &actions)
            return storage
        }
        func active() -> CancelStorage { CancelStorage.make() }
        let pairs: [(String, CancelStorage, CancelStorage)] = [
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
                b.chain.cancel(with: error, at: .library, root: b, into: &cancelling)
                assertRecorded(cancelling, rejectedAndCalled([member]), name)
            }
        }
    }

    /// "A long-lived root that joins many short-lived chains stays about as large as what is
    /// still live": once enough absorbed tables were found empty, the empty ones are dropped
    /// from the group and released (how many is the machine's tuning: the bound here is loose);
    /// the busy ones stay, and a dropped one that reserves a slot again is listed again and
    /// cancelled with it.
    func testPruneGroupDropsEmptyAbsorbedTablesAndReserveListsThemAgain() {
        let root = CancelStorage.make()
        var busy: [(storage: CancelStorage, member: Member)] = []
        for _ in 0..<4 {
            let storage = CancelStorage.make()
            let member = storage.chain.addMember(in: storage.ownHome)
            assertNothingRecorded(join(storage, root).actions)
            busy.append((storage, member))
        }
        var empty: [CancelStorage] = []
        var released = 0
        for _ in 0..<100 {
            let storage = CancelStorage.make()
            var (_, actions) = join(storage, root)
            for action in actions.recorded {
                guard case .releaseStorages(let count) = action else { return XCTFail("unexpected \(action)") }
                released += count
            }
            actions.run()
            empty.append(storage)
        }
        XCTAssertGreaterThan(released, 0, "some join released the empty storages it dropped")
        XCTAssertEqual(root.chain.group.count, busy.count + empty.count - released)
        XCTAssertLessThan(root.chain.group.count, busy.count + empty.count / 2)
        for (storage, _) in busy {
            XCTAssertTrue(root.chain.group.contains { $0 === storage }, "a busy table stays in the group")
        }
        guard let dropped = empty.first(where: { !$0.chain.table.isInRootsGroup }) else {
            return XCTFail("no empty table was dropped")
        }

        let groupCount = root.chain.group.count
        let relisted = root.chain.addMember(in: dropped.home(under: root))
        var cancelling = ChainActions()
        root.chain.cancel(with: error, at: .library, root: root, into: &cancelling)
        assertRecorded(
            cancelling,
            rejectedAndCalled(busy.map(\.member) + [relisted]) + [.releaseStorages(count: groupCount + 1)],
            "each busy table, then the relisted one, are cancelled; the group, one storage larger, released")
        assertRejected(relisted, with: error)
        for (_, member) in busy { assertRejected(member, with: error) }
    }
}
