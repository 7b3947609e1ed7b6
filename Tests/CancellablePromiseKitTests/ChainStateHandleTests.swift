import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// Debug builds only: these tests read what the chain machine records (`recorded`, `ChainAction`)
// or `forwardingHops`, which exist only in debug builds of the library.
#if DEBUG

// The rules of handles and joins, pinned at the level of the state machine (`handlesGone`,
// `join`): which storage stops counting as a handle when its own last handle goes, what moves
// into the absorbing root's machine, and that a key never names a later member even when its
// table was dropped and made again. No storage is made: storages are identities (`Node`).

final class ChainStateHandleTests: XCTestCase {
    private let error = ChainError(number: 7)

    /// An absorbed storage counts as a handle of the root that absorbed it while it has handles
    /// of its own: its last handle going away releases that hold once (the storage then releases
    /// the root's handle), and abandons nothing; a second report changes nothing.
    func testTheLastHandleOfAnAbsorbedStorageReleasesItsHoldOnItsRootOnce() {
        let (root, absorbed) = rootAbsorbing(1)
        let member = root.chain.addMember(in: absorbed[0].home(under: root))
        var actions = ChainActions()
        XCTAssertTrue(root.chain.handlesGone(of: absorbed[0].home(under: root), into: &actions), "its hold is released")
        assertNothingRecorded(actions, "an absorbed storage's handles abandon nothing")
        XCTAssertTrue(root.chain.isActive)
        XCTAssertFalse(root.chain.handlesGone(of: absorbed[0].home(under: root), into: &actions), "released once")
        assertNothingRecorded(actions)

        // The member stays listed in the active chain: cancelling the chain still reaches it.
        var cancelling = ChainActions()
        root.chain.cancel(with: error, at: .library, root: root.id, into: &cancelling)
        assertRecorded(cancelling, rejectedAndCalled([member]))
    }

    /// A storage absorbed by a cancelled root counts as no handle: its last handle releases
    /// nothing.
    func testAStorageAbsorbedByACancelledRootHoldsNothing() {
        let cancelledRoot = Node()
        var ignored = ChainActions()
        cancelledRoot.chain.cancel(with: error, at: .library, root: cancelledRoot.id, into: &ignored)
        let other = Node()
        let joined = join(other, cancelledRoot)
        XCTAssertEqual(joined.absorption, .init(absorbed: other.id, root: cancelledRoot.id, countsAsHandle: false))
        var actions = ChainActions()
        XCTAssertFalse(cancelledRoot.chain.handlesGone(of: other.home(under: cancelledRoot), into: &actions))
        assertNothingRecorded(actions)
    }

    /// Holds survive a later join: a storage absorbed by a root that is then absorbed itself
    /// still releases its hold (on the storage it was absorbed by) when its handles go, decided
    /// by the machine of the chain's new root; and the first root's own hold on the new root is
    /// released by its own handles.
    func testHoldsMoveWithTheTablesWhenTheirRootIsAbsorbed() {
        let (middle, absorbed) = rootAbsorbing(1)
        let inner = absorbed[0]
        let (top, _) = rootAbsorbing(3)
        let joined = join(middle, top)
        XCTAssertEqual(joined.absorption, .init(absorbed: middle.id, root: top.id, countsAsHandle: true))
        XCTAssertTrue(top.chain.absorbed.contains(inner.id), "the tables the absorbed root had moved too")
        XCTAssertTrue(top.chain.absorbed.contains(middle.id))
        var actions = ChainActions()
        XCTAssertTrue(top.chain.handlesGone(of: inner.home(under: top), into: &actions), "the inner storage's hold")
        XCTAssertTrue(top.chain.handlesGone(of: middle.home(under: top), into: &actions), "the middle root's hold")
        assertNothingRecorded(actions)
        XCTAssertTrue(top.chain.isActive, "the top root keeps its own handles")
    }

    /// The root's last handle abandons the whole group, absorbed tables included; a hold
    /// released afterwards changes nothing in the abandoned chain.
    func testTheRootsLastHandleAbandonsTheGroupAndLaterHoldsChangeNothing() {
        let (root, absorbed) = rootAbsorbing(1)
        let member = root.chain.addMember(in: absorbed[0].home(under: root))
        var actions = ChainActions()
        XCTAssertFalse(root.chain.handlesGone(of: root.ownHome, into: &actions))
        assertRecorded(actions, [.releasedMember])
        XCTAssertTrue(root.chain.isAbandoned)
        var later = ChainActions()
        XCTAssertTrue(root.chain.handlesGone(of: absorbed[0].home(under: root), into: &later))
        assertNothingRecorded(later)
        actions.run()
        assertPending(member)
        assertReleasedUncalled(member.cancel)
    }

    /// Keys are counted once for every table of a chain: a member's key from before its table
    /// was dropped (empty, and holding nothing: absorbed by a cancelled root) names nothing after
    /// the table is made again, and a storage absorbed with keys of its own never sees them
    /// repeated by the root's count.
    func testAKeyNeverNamesALaterMemberAfterItsTableWasDroppedOrMoved() {
        let root = Node()
        var cancelling = ChainActions()
        root.chain.cancel(with: error, at: .library, root: root.id, into: &cancelling)
        let storage = Node()
        // Keys made in the storage's own machine, before it is absorbed.
        var old: [Member] = []
        for _ in 0..<3 { old.append(storage.chain.addMember(in: storage.ownHome)) }
        var joining = join(storage, root).actions
        XCTAssertEqual(joining.recorded.count, 2 * old.count, "its members are rejected and their closures called")
        joining.run()
        for member in old { assertNothingRecorded(settle(member, in: storage.home(under: root), of: root)) }

        // Its now empty table is dropped by a pass over many empty ones, then made again.
        var others: [Node] = []
        for _ in 0..<100 {
            let other = Node()
            _ = join(other, root)
            others.append(other)
        }
        XCTAssertFalse(root.chain.absorbed.contains(storage.id), "the empty table was dropped")
        let home = storage.home(under: root)
        let fresh = (0..<3).map { _ in root.chain.reserve(in: home, upstream: nil, isObserver: false, cancelBody: nil) }
        XCTAssertTrue(root.chain.absorbed.contains(storage.id), "reserving made the table again")
        XCTAssertEqual(Set(fresh.map(\.slot)), Set(old.map(\.key.slot)), "the slots are reused")
        XCTAssertTrue(Set(fresh.map(\.generation)).isDisjoint(with: old.map(\.key.generation)), "the keys are not")
        for stale in old {
            XCTAssertNil(root.chain.readTable(home) { $0.index(of: stale.key) }, "a stale key names no member")
        }
        for key in fresh { XCTAssertNotNil(root.chain.readTable(home) { $0.index(of: key) }) }
        withExtendedLifetime(others) {}
    }

    /// A link followed while a cancellation spreads cancels the chain it reaches, unless that is
    /// the chain links must not reach (an `autoCancel` winner's, which a loser may wait on).
    func testALinkFollowedIntoTheExcludedChainCancelsNothing() {
        var chain = Chain(members: 1)
        var actions = ChainActions()
        chain.state.linkedCancel(
            with: error, at: .library, root: chain.root.id, excluding: chain.root.id, into: &actions)
        assertNothingRecorded(actions)
        XCTAssertTrue(chain.state.isActive, "the excluded chain is not cancelled")

        chain.state.linkedCancel(with: error, at: .library, root: chain.root.id, excluding: Node().id, into: &actions)
        assertRecorded(actions, rejectedAndCalled(chain.members))
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        chain.state.linkedCancel(with: error, at: .library, root: chain.root.id, excluding: nil, into: &actions)
        assertRecorded(actions, rejectedAndCalled(chain.members), "a second cancel records nothing more")
    }

    /// A step whose body returned a promise of its own chain links nothing, whichever storage of
    /// the chain that promise is in (the root, or one the root absorbed), in an active or a
    /// cancelled chain: the link is released uncalled. A storage of another chain is linked, even
    /// one whose identity an idle entry of this chain still carries.
    func testALinkIntoItsOwnChainLinksNothing() {
        let (root, absorbed) = rootAbsorbing(2)
        let waiting = root.chain.addMember(in: root.ownHome)
        // The second absorbed storage lost its handles and its members: its entry is idle.
        var ignored = ChainActions()
        XCTAssertTrue(root.chain.handlesGone(of: absorbed[1].home(under: root), into: &ignored))
        let saved = root.chain
        for cancelled in [false, true] {
            root.chain = saved
            if cancelled { root.chain.cancel(with: error, at: .library, root: root.id, into: &ignored) }
            for reaching in [root.id, absorbed[0].id] {
                let linked = Probe()
                var actions = ChainActions()
                root.chain.link(
                    waiting.key, .task(linked.makeBody()), whileBodyRuns: true, in: root.ownHome, reaching: reaching,
                    root: root.id, into: &actions)
                assertRecorded(actions, [.release([.link])], "cancelled: \(cancelled)")
                actions.run()
                assertReleasedUncalled(linked)
            }
        }
        root.chain = saved
        for reaching in [Node().id, absorbed[1].id] {
            var actions = ChainActions()
            root.chain.link(
                waiting.key, .task(Probe().makeBody()), whileBodyRuns: true, in: root.ownHome, reaching: reaching,
                root: root.id, into: &actions)
            assertNothingRecorded(actions, "another chain's promise is linked while the member waits")
        }
    }

    /// Which inputs of an `autoCancel` combinator are losers, and whether a loser shares the
    /// winner's chain, is decided by the loser's machine from the winner's storage and key: the
    /// winner itself (the same member given twice) is left alone; a winner listed in a storage
    /// this root absorbed shares the chain, so the loser is cancelled alone; a winner of another
    /// chain has the loser's whole chain cancelled.
    func testALoserIsToldApartFromTheWinnerAndItsChainByTheMachine() {
        let (root, absorbed) = rootAbsorbing(1)
        let loser = root.chain.addMember(in: root.ownHome)
        let winner = root.chain.addMember(in: absorbed[0].home(under: root))
        let saved = root.chain

        var actions = ChainActions()
        root.chain.cancelLoser(
            loser.key, in: root.ownHome, winner: (root.id, loser.key), root: root.id, into: &actions)
        assertNothingRecorded(actions, "the winner given twice is not its own loser")

        root.chain.cancelLoser(
            loser.key, in: root.ownHome, winner: (absorbed[0].id, winner.key), root: root.id, into: &actions)
        assertRecorded(actions, rejectedAndCalled([loser]), "a winner in an absorbed storage shares the chain")
        XCTAssertTrue(root.chain.isActive, "the winner's chain is not cancelled")

        root.chain = saved
        var other = ChainActions()
        root.chain.cancelLoser(
            loser.key, in: root.ownHome, winner: (Node().id, winner.key), root: root.id, into: &other)
        XCTAssertFalse(root.chain.isActive, "a winner of another chain: the loser's chain is cancelled")
        XCTAssertEqual(other.recorded.count, 4, "both members rejected and their closures called")
    }

    /// A followed link never reaches the chain the cancel must not reach, named by any of its
    /// live storages (the winner's, absorbed since it settled), not only by its root.
    func testALinkedCancelExcludingAnAbsorbedStorageOfTheChainCancelsNothing() {
        let (root, absorbed) = rootAbsorbing(1)
        _ = root.chain.addMember(in: root.ownHome)
        var actions = ChainActions()
        root.chain.linkedCancel(
            with: error, at: .library, root: root.id, excluding: absorbed[0].id, into: &actions)
        assertNothingRecorded(actions)
        XCTAssertTrue(root.chain.isActive)
    }

    /// The index of absorbed storages finds every object it recorded, and none it did not,
    /// however many (it grows as they come).
    func testTheIdentityIndexFindsWhatItRecordedAndNothingElse() {
        let objects = (0..<5_000).map { _ in Node() }
        var index = IdentityIndex()
        for (position, object) in objects.enumerated() where position.isMultiple(of: 2) {
            index.insert(object.id, at: position)
        }
        for (position, object) in objects.enumerated() {
            XCTAssertEqual(index.position(of: object.id), position.isMultiple(of: 2) ? position : nil)
        }
        index.insert(objects[0].id, at: 7)
        XCTAssertEqual(index.position(of: objects[0].id), 7, "recording again moves the position")
    }

    private func settle(_ member: Member, in home: MemberHome, of root: Node) -> ChainActions {
        member.resolver.fulfill(1)
        return afterTheLock(root.chain.memberSettled(member.index, in: home))
    }
}
#endif
