import PromiseCore
import XCTest

@testable import CancellablePromiseKit

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
        let home = absorbed[0].home(under: root)
        assertReturned(root.chain.handlesGone(of: home), [.releasesHold], "its hold is released, nothing abandoned")
        XCTAssertEqual(root.phase, .active)
        assertNone(root.chain.handlesGone(of: home), "released once")

        // The member stays listed in the active chain: cancelling the chain still reaches it.
        let cancelling = root.chain.cancel(with: error, at: .library, root: root.id)
        assertReturned(cancelling, rejectedAndCalled([member]))
        assertRejected(member, with: error)
    }

    /// A storage absorbed by a cancelled root counts as no handle: its last handle releases
    /// nothing.
    func testAStorageAbsorbedByACancelledRootHoldsNothing() {
        let cancelledRoot = Node()
        _ = cancelledRoot.chain.cancel(with: error, at: .library, root: cancelledRoot.id)
        let other = Node()
        let joined = join(other, cancelledRoot)
        XCTAssertEqual(joined.absorption, .init(absorbed: other.id, root: cancelledRoot.id, countsAsHandle: false))
        assertNone(cancelledRoot.chain.handlesGone(of: other.home(under: cancelledRoot)))
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
        XCTAssertTrue(top.chain.contains(inner.id, root: top.id), "the tables the absorbed root had moved too")
        XCTAssertTrue(top.chain.contains(middle.id, root: top.id))
        assertReturned(top.chain.handlesGone(of: inner.home(under: top)), [.releasesHold], "the inner storage's hold")
        assertReturned(top.chain.handlesGone(of: middle.home(under: top)), [.releasesHold], "the middle root's hold")
        XCTAssertEqual(top.phase, .active, "the top root keeps its own handles")
    }

    /// The root's last handle abandons the whole group, absorbed tables included; a hold
    /// released afterwards changes nothing in the abandoned chain.
    func testTheRootsLastHandleAbandonsTheGroupAndLaterHoldsChangeNothing() {
        let (root, absorbed) = rootAbsorbing(1)
        let member = root.chain.addMember(in: absorbed[0].home(under: root))
        var abandoning = root.chain.handlesGone(of: root.ownHome)
        assertReturned(abandoning, [.releasedMember])
        XCTAssertEqual(root.phase, .abandoned)
        assertReturned(root.chain.handlesGone(of: absorbed[0].home(under: root)), [.releasesHold], "nothing else")
        XCTAssertEqual(root.phase, .abandoned)
        abandoning.run()
        assertPending(member)
        assertReleasedUncalled(member.cancel)
    }

    /// Keys are counted once for every table of a chain: a member's key from before its table
    /// was dropped (empty, and holding nothing: absorbed by a cancelled root) names nothing after
    /// the table is made again, and a storage absorbed with keys of its own never sees them
    /// repeated by the root's count.
    func testAKeyNeverNamesALaterMemberAfterItsTableWasDroppedOrMoved() {
        let root = Node()
        _ = root.chain.cancel(with: error, at: .library, root: root.id)
        let storage = Node()
        let home = storage.home(under: root)
        // Keys made in the storage's own machine, before it is absorbed.
        var old: [Member] = []
        for _ in 0..<3 { old.append(storage.chain.addMember(in: storage.ownHome)) }
        let joined = join(storage, root)
        var joining = joined.outcome
        assertReturned(joining, rejectedAndCalled(old), "its members are rejected and their closures called")
        joining.run()
        for member in old {
            member.resolver.fulfill(1)
            assertNone(root.chain.memberSettled(member.index, in: home), "freed when it was rejected")
        }

        // Its now empty table is dropped by a pass over many empty ones, then made again.
        for _ in 0..<100 { _ = join(Node(), root) }
        XCTAssertTrue(root.dropped(storage), "the empty table was dropped")
        let tables = root.chain.absorbedCount
        let fresh = (0..<3).map { _ in root.chain.reserve(in: home, upstream: nil, isObserver: false, cancelBody: nil) }
        XCTAssertEqual(root.chain.absorbedCount, tables + 1, "reserving made the table again")
        XCTAssertEqual(Set(fresh.map(\.slot)), Set(old.map(\.key.slot)), "the slots are reused")
        XCTAssertTrue(Set(fresh.map(\.generation)).isDisjoint(with: old.map(\.key.generation)), "the keys are not")
        // A link is kept for a reserved member; one for a key that names no member is followed.
        for stale in old {
            XCTAssertFalse(root.chain.keepsLink(for: stale.key, in: home, root: root.id), "a stale key names no member")
        }
        for key in fresh { XCTAssertTrue(root.chain.keepsLink(for: key, in: home, root: root.id)) }
    }

    /// A link followed while a cancellation spreads cancels the chain it reaches, unless that is
    /// the chain links must not reach (an `autoCancel` winner's, which a loser may wait on).
    func testALinkFollowedIntoTheExcludedChainCancelsNothing() {
        var chain = Chain(members: 1)
        let root = chain.root.id
        assertNone(chain.state.linkedCancel(with: error, at: .library, root: root, excluding: root))
        XCTAssertEqual(chain.phase, .active, "the excluded chain is not cancelled")

        let cancelling = chain.state.linkedCancel(with: error, at: .library, root: root, excluding: Node().id)
        assertReturned(cancelling, rejectedAndCalled(chain.members))
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        assertNone(
            chain.state.linkedCancel(with: error, at: .library, root: root, excluding: nil),
            "a second cancel returns nothing more")
    }

    /// A step whose body returned a promise of its own chain links nothing, whichever storage of
    /// the chain that promise is in (the root, or one the root absorbed), in an active or a
    /// cancelled chain: the link is released uncalled. A storage of another chain is linked, even
    /// one whose identity an idle entry of this chain still carries.
    func testALinkIntoItsOwnChainLinksNothing() {
        let (root, absorbed) = rootAbsorbing(2)
        let waiting = root.chain.addMember(in: root.ownHome)
        // The second absorbed storage lost its handles and its members: its entry is idle.
        assertReturned(root.chain.handlesGone(of: absorbed[1].home(under: root)), [.releasesHold])
        let saved = root.chain
        func link(_ probe: Probe, reaching: ObjectIdentifier) -> ChainOutcome {
            root.chain.link(
                waiting.key, .task(probe.makeBody()), whileBodyRuns: true, in: root.ownHome, reaching: reaching,
                root: root.id)
        }
        for cancelled in [false, true] {
            root.chain = saved
            if cancelled { _ = root.chain.cancel(with: error, at: .library, root: root.id) }
            for reaching in [root.id, absorbed[0].id] {
                let linked = Probe()
                var linking = link(linked, reaching: reaching)
                assertReturned(linking, [.release(.link)], "cancelled: \(cancelled)")
                linking.run()
                assertReleasedUncalled(linked)
            }
        }
        root.chain = saved
        for reaching in [Node().id, absorbed[1].id] {
            assertNone(link(Probe(), reaching: reaching), "another chain's promise is linked while the member waits")
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
        func cancelLoser(winner: (storage: ObjectIdentifier, key: SlotKey)) -> ChainOutcome {
            root.chain.cancelLoser(loser.key, in: root.ownHome, winner: winner, root: root.id)
        }

        assertNone(cancelLoser(winner: (root.id, loser.key)), "the winner given twice is not its own loser")

        assertReturned(
            cancelLoser(winner: (absorbed[0].id, winner.key)), rejectedAndCalled([loser]),
            "a winner in an absorbed storage shares the chain")
        XCTAssertEqual(root.phase, .active, "the winner's chain is not cancelled")

        // A copy restores the machine, not the promises: the loser, rejected above, is found
        // settled and released uncalled; the winner is rejected and its closure called.
        root.chain = saved
        assertReturned(
            cancelLoser(winner: (Node().id, winner.key)), [.releasedMember] + rejectedAndCalled([winner]),
            "both members leave the chain")
        XCTAssertEqual(root.phase, .cancelled, "a winner of another chain: the loser's chain is cancelled")
        assertRejected(winner, with: CancellablePromiseError.cancelled)
    }

    /// A followed link never reaches the chain the cancel must not reach, named by any of its
    /// live storages (the winner's, absorbed since it settled), not only by its root.
    func testALinkedCancelExcludingAnAbsorbedStorageOfTheChainCancelsNothing() {
        let (root, absorbed) = rootAbsorbing(1)
        _ = root.chain.addMember(in: root.ownHome)
        assertNone(root.chain.linkedCancel(with: error, at: .library, root: root.id, excluding: absorbed[0].id))
        XCTAssertEqual(root.phase, .active)
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
}
