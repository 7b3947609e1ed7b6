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
    /// was dropped (empty) names nothing after the table is made again, and a storage absorbed
    /// with keys of its own never sees them repeated by the root's count.
    func testAKeyNeverNamesALaterMemberAfterItsTableWasDroppedOrMoved() {
        let root = Node()
        let storage = Node()
        // Keys made in the storage's own machine, before it is absorbed.
        var old: [Member] = []
        for _ in 0..<3 { old.append(storage.chain.addMember(in: storage.ownHome)) }
        _ = join(storage, root)
        for member in old { assertRecorded(settle(member, in: storage.home(under: root), of: root), [.releasedMember]) }

        // Its now empty table is dropped by a pass over many empty ones, then made again.
        for _ in 0..<100 { _ = join(Node(), root) }
        XCTAssertFalse(root.chain.absorbed.contains(storage.id), "the empty table was dropped")
        var newer: [Member] = []
        for _ in 0..<3 { newer.append(root.chain.addMember(in: storage.home(under: root))) }
        for (stale, fresh) in zip(old, newer) {
            XCTAssertEqual(stale.key.slot, fresh.key.slot, "the slot is reused")
            XCTAssertNotEqual(stale.key.generation, fresh.key.generation, "the key is not")
            XCTAssertFalse(root.chain.readTable(storage.home(under: root)) { $0.isListed(stale.key) })
        }
        var actions = ChainActions()
        root.chain.cancelIfListed(old[0].key, in: storage.home(under: root), root: root.id, into: &actions)
        assertNothingRecorded(actions, "a stale key cancels nothing")
        XCTAssertTrue(root.chain.isActive)
    }

    private func settle(_ member: Member, in home: MemberHome, of root: Node) -> ChainActions {
        member.resolver.fulfill(1)
        return afterTheLock(root.chain.memberSettled(member.index, in: home))
    }
}
