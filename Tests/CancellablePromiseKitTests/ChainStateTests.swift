import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// The rules of a chain's cancellation, pinned one by one at the level of the state machine that
// decides them (`ChainState`): each test sends events to a machine by hand, with no thread and
// no lock taken on a chain, and checks what the event recorded (`ChainActions`, run where the
// effect is what counts) and the state it left. Storages are made only as the members' homes and
// as roots of joins; they are never locked here. The threaded model test
// (CancellationModelTests) checks the interleavings of the same events.

// MARK: - Fixture

/// An error a test cancels with, told apart by its number.
private struct ChainError: Error, Equatable {
    let number: Int
}

/// Counts the calls of the closures it makes, and tells whether they were released: each
/// closure holds the only reference to an object the probe sees weakly.
private final class Probe {
    private final class Capture {}

    private(set) var calls = 0
    private weak var capture: Capture?

    /// A closure that counts its calls here.
    func makeBody() -> () -> Void {
        let capture = Capture()
        self.capture = capture
        return { [self, capture] in
            withExtendedLifetime(capture) {}
            calls += 1
        }
    }

    /// Whether the closure `makeBody` made is gone.
    var isReleased: Bool { capture == nil }
}

/// An attachment that records the keys it is told settled.
private final class RecordingAttachment: PromiseAttachment {
    private(set) var settledKeys: [UInt64] = []

    func promiseDidSettle(key: UInt64) { settledKeys.append(key) }

    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

/// Fulfils a promise when the test is done with it (if it is still pending), so that a promise
/// left pending on purpose is not reported by PromiseCore as one nothing can settle.
private final class SettledAtTheEnd {
    let resolver: Resolver<Int>

    init(_ resolver: Resolver<Int>) { self.resolver = resolver }

    deinit { resolver.fulfill(0) }
}

/// A member listed by hand: its key, its pending promise and the resolver that settles it, and
/// the probe of its cancel closure (a step has none: the probe's closure is never made).
private struct Member {
    let key: _CancelKey
    let promise: Promise<Int>
    private let settlement: SettledAtTheEnd
    let cancel: Probe

    init(key: _CancelKey, promise: Promise<Int>, resolver: Resolver<Int>, cancel: Probe) {
        self.key = key
        self.promise = promise
        self.settlement = SettledAtTheEnd(resolver)
        self.cancel = cancel
    }

    var resolver: Resolver<Int> { settlement.resolver }
    var index: Int { Int(key.index) }
}

extension ChainState {
    /// Reserves and lists a new member of `home` following `upstream`, recording what listing
    /// leaves to do into `actions`. `cancellable`: it has a cancel closure (a promise the chain
    /// adopted); a step or an observer has none.
    fileprivate mutating func listMember(
        in home: MemberHome, after upstream: Member? = nil, isObserver: Bool = false, cancellable: Bool = true,
        into actions: inout ChainActions
    ) -> Member {
        let (promise, resolver) = Promise<Int>.pending()
        let probe = Probe()
        let key = reserve(
            in: home, upstream: upstream?.key, isObserver: isObserver, cancelBody: cancellable ? probe.makeBody() : nil)
        list(key, target: promise, in: home, into: &actions)
        return Member(key: key, promise: promise, resolver: resolver, cancel: probe)
    }

    /// `listMember` in an active chain, where listing records nothing.
    fileprivate mutating func addMember(
        in home: MemberHome, after upstream: Member? = nil, isObserver: Bool = false, cancellable: Bool = true,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Member {
        var actions = ChainActions()
        let member = listMember(
            in: home, after: upstream, isObserver: isObserver, cancellable: cancellable, into: &actions)
        XCTAssertTrue(actions.isEmpty, "listing in an active chain records nothing", file: file, line: line)
        return member
    }

    /// A step (no cancel closure) following `upstream`, as `then` or an observer adds one.
    fileprivate mutating func addStep(
        in home: MemberHome, after upstream: Member, isObserver: Bool = false
    ) -> Member {
        addMember(in: home, after: upstream, isObserver: isObserver, cancellable: false)
    }

    fileprivate var isAbandoned: Bool {
        if case .abandoned = phase { return true }
        return false
    }

    fileprivate var isAbsorbed: Bool {
        if case .absorbed = phase { return true }
        return false
    }
}

/// A chain with no join: a root storage (the home of its members; never locked here) and its
/// state machine, held beside it as a value so that a test can copy it to try one event and
/// restore it to try another.
private struct Chain {
    let root = CancelStorage.make()
    var state = ChainState()
    var members: [Member] = []

    var home: MemberHome { MemberHome(root, root: root) }
    var table: SlotTable { state.table }

    /// A chain with `count` members, each with a cancel closure and no upstream.
    init(members count: Int) {
        for _ in 0..<count { members.append(state.addMember(in: home)) }
    }

    /// Cancels the chain with `error`; returns whether it changed anything, and the actions.
    mutating func cancel(with error: any Error) -> (cancelled: Bool, actions: ChainActions) {
        var actions = ChainActions()
        let cancelled = state.cancel(with: error, at: .library, root: root, into: &actions)
        return (cancelled, actions)
    }

    mutating func releaseLastHandle() -> ChainActions {
        var actions = ChainActions()
        state.lastHandleReleased(into: &actions)
        return actions
    }

    /// Fulfils `member`'s promise and reports it settled.
    mutating func settle(_ member: Member) -> ChainActions {
        member.resolver.fulfill(1)
        return recorded(state.memberSettled(member.index, in: home))
    }

    mutating func link(_ member: Member, _ link: CancelLink, whileBodyRuns: Bool) -> ChainActions {
        var actions = ChainActions()
        state.link(member.key, link, whileBodyRuns: whileBodyRuns, in: home, into: &actions)
        return actions
    }

    /// Links a new probe's task from the first member, once while its body runs and once not,
    /// each time from the state the chain has now; hands the actions and the probe to `check`.
    mutating func linkFromTheFirstMemberWhileItsBodyRunsAndNot(_ check: (inout ChainActions, Probe) -> Void) {
        let saved = state
        for whileBodyRuns in [true, false] {
            state = saved
            let linked = Probe()
            var actions = link(members[0], .task(linked.makeBody()), whileBodyRuns: whileBodyRuns)
            check(&actions, linked)
        }
    }

    mutating func cancelLoser(_ member: Member, sharesChainWithWinner: Bool) -> ChainActions {
        var actions = ChainActions()
        state.cancelLoser(
            member.key, in: home, sharesChainWithWinner: sharesChainWithWinner, root: root, into: &actions)
        return actions
    }
}

extension CancelStorage {
    /// This storage as the home of members of the chain whose root is `root`.
    fileprivate func home(under root: CancelStorage) -> MemberHome { MemberHome(self, root: root) }

    /// This storage as the home of its own members, as a root.
    fileprivate var ownHome: MemberHome { MemberHome(self, root: self) }
}

/// Joins the chains of the roots `a` and `b`.
private func join(_ a: CancelStorage, _ b: CancelStorage) -> (absorption: ChainState.Absorption?, actions: ChainActions)
{
    var actions = ChainActions()
    let absorption = ChainState.join(&a.chain, a, &b.chain, b, into: &actions)
    return (absorption, actions)
}

/// A root that absorbed `count` storages with no members, one join at a time (each new storage
/// has the smaller group: it is the one absorbed).
private func rootAbsorbing(_ count: Int) -> (root: CancelStorage, absorbed: [CancelStorage]) {
    let root = CancelStorage.make()
    var absorbed: [CancelStorage] = []
    for _ in 0..<count {
        let storage = CancelStorage.make()
        _ = join(storage, root)
        absorbed.append(storage)
    }
    return (root, absorbed)
}

// MARK: - Assertions

private func assertListed(
    _ member: Member, in table: SlotTable, file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertEqual(table.listedIndex(of: member.key), member.index, "listed", file: file, line: line)
    XCTAssertTrue(member.promise.isPending, "a listed member's promise is pending", file: file, line: line)
}

private func assertDetached(
    _ member: Member, in table: SlotTable, file: StaticString = #filePath, line: UInt = #line
) {
    guard let index = table.index(of: member.key) else {
        return XCTFail("expected detached, the slot is free", file: file, line: line)
    }
    XCTAssertEqual(table.state(index), .detached, file: file, line: line)
}

/// The member's slot is free: its key names nothing any more.
private func assertFreed(
    _ member: Member, in table: SlotTable, file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertNil(table.index(of: member.key), "the key is stale", file: file, line: line)
    XCTAssertNil(table.listedIndex(of: member.key), file: file, line: line)
}

private func assertPending(_ member: Member, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertTrue(member.promise.isPending, "pending", file: file, line: line)
}

private func assertRejected<E: Error & Equatable>(
    _ member: Member, with expected: E, file: StaticString = #filePath, line: UInt = #line
) {
    guard case .rejected(let error)? = member.promise.result else {
        return XCTFail(
            "expected rejected with \(expected), got \(String(describing: member.promise.result))", file: file,
            line: line)
    }
    XCTAssertEqual(error as? E, expected, file: file, line: line)
}

private func assertCalledOnce(_ probe: Probe, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(probe.calls, 1, "called exactly once", file: file, line: line)
}

private func assertNotCalled(_ probe: Probe, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(probe.calls, 0, "not called", file: file, line: line)
}

private func assertReleasedUncalled(_ probe: Probe, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(probe.calls, 0, "not called", file: file, line: line)
    XCTAssertTrue(probe.isReleased, "released", file: file, line: line)
}

/// What a member that left holds, as the actions that release it after the lock (what the
/// storage does with `memberSettled`'s result).
private func recorded(_ left: LeftMember) -> ChainActions {
    var actions = ChainActions()
    actions.release(left.contents)
    return actions
}

private func assertNothingRecorded(_ actions: ChainActions, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertTrue(actions.isEmpty, "nothing to do after the lock", file: file, line: line)
}

/// `actions` follows exactly the one link whose closure `probe` made, with `expected`: takes it
/// and runs it (a task link's closure is what following it calls).
private func assertFollowed<E: Error & Equatable>(
    _ actions: inout ChainActions, _ probe: Probe, with expected: E, file: StaticString = #filePath, line: UInt = #line
) {
    guard let (link, error) = actions.nextLink() else { return XCTFail("no link followed", file: file, line: line) }
    XCTAssertNil(actions.nextLink(), "one link followed", file: file, line: line)
    XCTAssertEqual(error as? E, expected, "followed with this error", file: file, line: line)
    guard case .task(let body) = link else { return XCTFail("expected a task link", file: file, line: line) }
    body()
    assertCalledOnce(probe, file: file, line: line)
}

/// `actions` follows no link; run, they release the one `probe`'s closure is, uncalled.
private func assertLinkReleased(
    _ actions: inout ChainActions, _ probe: Probe, file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertNil(actions.nextLink(), "no link followed", file: file, line: line)
    actions.run()
    assertReleasedUncalled(probe, file: file, line: line)
}

// MARK: - Tests

final class ChainStateTests: XCTestCase {
    private let error = ChainError(number: 1)
    private let otherError = ChainError(number: 2)

    // MARK: Liveness and abandonment

    /// "With no cancel handle left, its cancel closures are released uncalled and the work
    /// settles it normally" (details 14, 15): the last handle of an active chain abandons it.
    func testTheLastHandleOfAnActiveChainAbandonsItReleasingClosuresUncalledAndLeavingPromisesPending() {
        var chain = Chain(members: 3)
        var actions = chain.releaseLastHandle()
        XCTAssertTrue(chain.state.isAbandoned)
        XCTAssertEqual(chain.state.listedCount, 0)
        XCTAssertEqual(chain.table.inUse, 3, "slots are freed by their promises' settle notifications")
        for member in chain.members {
            assertDetached(member, in: chain.table)
            assertPending(member)
        }
        actions.run()
        for member in chain.members { assertReleasedUncalled(member.cancel) }
    }

    /// "An abandoned chain lists nothing": a member listed into it holds nothing.
    func testAMemberListedIntoAnAbandonedChainHoldsNothing() {
        var chain = Chain(members: 1)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        var actions = ChainActions()
        let late = chain.state.listMember(in: chain.home, into: &actions)
        assertDetached(late, in: chain.table)
        XCTAssertEqual(chain.state.listedCount, 0)
        assertPending(late)
        actions.run()
        assertReleasedUncalled(late.cancel)
    }

    /// "A cancelled chain ... never changes again": its last handle does not abandon it.
    func testACancelledChainIsNotAbandonedByItsLastHandle() {
        var chain = Chain(members: 1)
        _ = chain.cancel(with: error)
        let actions = chain.releaseLastHandle()
        assertNothingRecorded(actions)
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        XCTAssertFalse(chain.state.isAbandoned)
    }

    /// Nothing can cancel an abandoned chain, and a second last handle changes nothing.
    func testAnAbandonedChainIsNeitherCancelledNorAbandonedAgain() {
        var chain = Chain(members: 2)
        var abandoning = chain.releaseLastHandle()
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
        XCTAssertEqual(root.chain.listedCount, 3)
        var actions = ChainActions()
        root.chain.lastHandleReleased(into: &actions)
        XCTAssertTrue(root.chain.isAbandoned)
        XCTAssertEqual(root.chain.listedCount, 0)
        XCTAssertEqual(root.chain.group.count, 0, "an abandoned chain lists no storage")
        for storage in absorbed { XCTAssertFalse(storage.chain.table.isInRootsGroup) }
        actions.run()
        for member in members + [own] {
            assertPending(member)
            assertReleasedUncalled(member.cancel)
        }
    }

    /// "Cancelling one follower withdraws only its interest ... An abandoned follower ... keeps
    /// its interest and settles with the source" (detail 24): a follower's cancel closure (its
    /// withdrawal) is called when its chain is cancelled, released uncalled when abandoned.
    func testACancelledFollowerWithdrawsItsInterestAndAnAbandonedOneKeepsIt() {
        var cancelledFollower = Chain(members: 1)
        var abandonedFollower = Chain(members: 1)
        var cancelling = cancelledFollower.cancel(with: boxedCancellation).actions
        var abandoning = abandonedFollower.releaseLastHandle()
        cancelling.run()
        abandoning.run()
        assertCalledOnce(cancelledFollower.members[0].cancel)
        assertReleasedUncalled(abandonedFollower.members[0].cancel)
        assertPending(abandonedFollower.members[0])
    }

    // MARK: Cancelling

    /// "First, under the lock, every pending promise of the chain is settled as rejected ...
    /// then, outside the lock, the cancel closures run" (detail 2), each exactly once.
    func testCancelRejectsEveryListedPromiseBeforeItReturnsAndCallsEachClosureOnceAfter() {
        var chain = Chain(members: 3)
        let cancelling = chain.cancel(with: error)
        var actions = cancelling.actions
        XCTAssertTrue(cancelling.cancelled)
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        XCTAssertEqual(chain.state.listedCount, 0)
        XCTAssertEqual(chain.table.inUse, 0, "a member rejected under the lock needs no notification")
        for member in chain.members {
            assertRejected(member, with: error)
            assertNotCalled(member.cancel)
            assertFreed(member, in: chain.table)
        }
        actions.run()
        for member in chain.members { assertCalledOnce(member.cancel) }
    }

    /// A chain is cancelled once: a second cancel records nothing and keeps the first error.
    func testASecondCancelRecordsNothingAndKeepsTheFirstError() {
        var chain = Chain(members: 2)
        var first = chain.cancel(with: error).actions
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
            settling.run()
        }
        let (cancelled, actions) = chain.cancel(with: error)
        XCTAssertTrue(cancelled)
        assertNothingRecorded(actions)
        XCTAssertEqual(chain.state.cancelledError as? ChainError, error)
        for member in chain.members { assertReleasedUncalled(member.cancel) }
    }

    /// "A settled link's cancel closure is not called" (detail 3): a member whose promise
    /// settled on its own before its notification arrived keeps its result, its closure is
    /// released uncalled, and its slot waits for the notification.
    func testCancelLeavesAMemberThatSettledOnItsOwnToItsNotificationWithoutCallingItsClosure() {
        var chain = Chain(members: 1)
        let member = chain.members[0]
        member.resolver.fulfill(7)
        var actions = chain.cancel(with: error).actions
        XCTAssertEqual(member.promise.value, 7)
        assertDetached(member, in: chain.table)
        actions.run()
        assertReleasedUncalled(member.cancel)
        _ = recorded(chain.state.memberSettled(member.index, in: chain.home))
        XCTAssertEqual(chain.table.inUse, 0)
    }

    /// A member that does not follow a step, listed into a cancelled chain, is rejected at once
    /// with the chain's error and its task cancelled.
    func testAFirstMemberListedIntoACancelledChainIsRejectedAtOnce() {
        var chain = Chain(members: 0)
        _ = chain.cancel(with: error)
        var actions = ChainActions()
        let late = chain.state.listMember(in: chain.home, into: &actions)
        assertRejected(late, with: error)
        assertNotCalled(late.cancel)
        XCTAssertEqual(chain.table.inUse, 0)
        actions.run()
        assertCalledOnce(late.cancel)
    }

    /// What a bag or `autoCancel` asks (`cancelIfListed`): the chain is cancelled only while the
    /// member is still listed.
    func testCancelIfListedCancelsTheChainOnlyWhileTheMemberIsListed() {
        var chain = Chain(members: 2)
        let (member, other) = (chain.members[0], chain.members[1])
        // A copy restores the machine, not the promises: the case that settles none comes last.
        let saved = chain.state
        _ = chain.settle(member)
        var ignored = ChainActions()
        chain.state.cancelIfListed(member.key, in: chain.home, root: chain.root, into: &ignored)
        assertNothingRecorded(ignored)
        XCTAssertTrue(chain.state.isActive)
        assertListed(other, in: chain.table)

        chain.state = saved
        var actions = ChainActions()
        chain.state.cancelIfListed(other.key, in: chain.home, root: chain.root, into: &actions)
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        assertRejected(other, with: CancellablePromiseError.cancelled)
    }

    // MARK: Links only while waiting

    /// "Cancelling the chain cancels it" (detail 16): a link of a waiting member is kept, and
    /// followed with the chain's error when the chain is cancelled.
    func testALinkOfAWaitingMemberIsFollowedWithTheChainsErrorWhenTheChainIsCancelled() {
        var chain = Chain(members: 1)
        let linked = Probe()
        assertNothingRecorded(chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: true))
        var actions = chain.cancel(with: error).actions
        assertFollowed(&actions, linked, with: error)
    }

    /// "The link ends when it settles": a member that settles releases its link uncalled, and a
    /// later cancel follows nothing.
    func testALinkEndsWhenItsMemberSettles() {
        var chain = Chain(members: 1)
        let linked = Probe()
        _ = chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: true)
        var settling = chain.settle(chain.members[0])
        assertLinkReleased(&settling, linked)
        var cancelling = chain.cancel(with: error).actions
        XCTAssertNil(cancelling.nextLink())
    }

    /// "A settled promise links nothing": in an active chain, a link arriving after its member
    /// left is released, not followed.
    func testALinkAfterTheMemberSettledIsReleasedInAnActiveChain() {
        var chain = Chain(members: 1)
        var settling = chain.settle(chain.members[0])
        settling.run()
        let linked = Probe()
        var actions = chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: false)
        assertLinkReleased(&actions, linked)
        XCTAssertTrue(chain.state.isActive)
    }

    /// A member that left a cancelled chain discards its body's result: what it returned is
    /// cancelled with the chain's error, whether its body was running or not.
    func testALinkAfterTheMemberLeftIsFollowedInACancelledChain() {
        var chain = Chain(members: 1)
        var cancelling = chain.cancel(with: error).actions
        cancelling.run()
        chain.linkFromTheFirstMemberWhileItsBodyRunsAndNot { actions, linked in
            assertFollowed(&actions, linked, with: error)
        }
    }

    /// An `autoCancel` loser cancelled alone while its body ran (detail 17): what the body then
    /// returns is cancelled, though the chain is active.
    func testALinkFromTheBodyOfALoserCancelledAloneIsFollowed() {
        var chain = Chain(members: 2)
        let loser = chain.members[1]
        var losing = chain.cancelLoser(loser, sharesChainWithWinner: true)
        losing.run()
        XCTAssertTrue(chain.state.isActive)
        let linked = Probe()
        var actions = chain.link(loser, .task(linked.makeBody()), whileBodyRuns: true)
        assertFollowed(&actions, linked, with: CancellablePromiseError.cancelled)
    }

    /// "Nothing ... keeps abandoned work alive": an abandoned chain keeps no link, from a running
    /// body or not, and follows none.
    func testAnAbandonedChainKeepsNoLink() {
        var chain = Chain(members: 1)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        chain.linkFromTheFirstMemberWhileItsBodyRunsAndNot { actions, linked in
            assertLinkReleased(&actions, linked)
        }
    }

    // MARK: Union-by-size joins

    /// "Joining contexts costs O(1) amortised (merge the smaller into the larger)" (detail 16):
    /// the root whose group is smaller is absorbed, whichever side it is on, and counts as a
    /// handle of the other.
    func testJoinAbsorbsTheRootWhoseGroupIsSmaller() {
        for smallerFirst in [true, false] {
            let (larger, absorbed) = rootAbsorbing(2)
            let smaller = CancelStorage.make()
            let (absorption, actions) = smallerFirst ? join(smaller, larger) : join(larger, smaller)
            XCTAssertTrue(absorption?.absorbed === smaller)
            XCTAssertTrue(absorption?.root === larger)
            XCTAssertEqual(absorption?.countsAsHandle, true)
            XCTAssertTrue(smaller.chain.isAbsorbed)
            XCTAssertTrue(larger.chain.isActive)
            XCTAssertEqual(larger.chain.group.count, 3)
            XCTAssertTrue(larger.chain.group.contains { $0 === smaller })
            XCTAssertTrue(smaller.chain.table.isInRootsGroup)
            withExtendedLifetime((actions, absorbed)) {}
        }
    }

    /// "Afterwards cancelling either cancels both": cancelling a root rejects the members of
    /// every absorbed table, listed before or after the join, with its error.
    func testCancellingARootReachesEveryAbsorbedTable() {
        let root = CancelStorage.make()
        let other = CancelStorage.make()
        let before = other.chain.addMember(in: other.ownHome)
        let own = root.chain.addMember(in: root.ownHome)
        _ = root.chain.addMember(in: root.ownHome)
        let absorption = join(other, root).absorption
        XCTAssertTrue(absorption?.absorbed === other)
        let after = root.chain.addMember(in: other.home(under: root))
        XCTAssertEqual(root.chain.listedCount, 4)

        var actions = ChainActions()
        XCTAssertTrue(root.chain.cancel(with: error, at: .library, root: root, into: &actions))
        for member in [before, after, own] { assertRejected(member, with: error) }
        XCTAssertEqual(root.chain.listedCount, 0)
        XCTAssertEqual(root.chain.group.count, 0, "a cancelled chain lists no storage")
        XCTAssertFalse(other.chain.table.isInRootsGroup)
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
            assertNothingRecorded(actions)
            XCTAssertFalse(a.chain.isAbsorbed || b.chain.isAbsorbed, name)
            if let member { assertListed(member, in: b.chain.table) }
        }
    }

    /// "A long-lived root that joins many short-lived chains stays about as large as what is
    /// still live": once enough absorbed tables were found empty, the empty ones are dropped
    /// from the group (how many is the machine's tuning: the bound here is loose); the busy ones
    /// stay, and a dropped one that reserves a slot again is listed again and cancelled with it.
    func testPruneGroupDropsEmptyAbsorbedTablesAndReserveListsThemAgain() {
        let root = CancelStorage.make()
        var busy: [(storage: CancelStorage, member: Member)] = []
        for _ in 0..<4 {
            let storage = CancelStorage.make()
            let member = storage.chain.addMember(in: storage.ownHome)
            _ = join(storage, root)
            busy.append((storage, member))
        }
        var empty: [CancelStorage] = []
        for _ in 0..<100 {
            let storage = CancelStorage.make()
            var (_, actions) = join(storage, root)
            actions.run()
            empty.append(storage)
        }
        XCTAssertLessThan(root.chain.group.count, busy.count + empty.count / 2)
        for (storage, _) in busy {
            XCTAssertTrue(root.chain.group.contains { $0 === storage }, "a busy table stays in the group")
        }
        guard let dropped = empty.first(where: { !$0.chain.table.isInRootsGroup }) else {
            return XCTFail("no empty table was dropped")
        }
        XCTAssertFalse(root.chain.group.contains { $0 === dropped })

        let groupCount = root.chain.group.count
        let relisted = root.chain.addMember(in: dropped.home(under: root))
        XCTAssertEqual(root.chain.group.count, groupCount + 1)
        XCTAssertTrue(dropped.chain.table.isInRootsGroup)
        var cancelling = ChainActions()
        root.chain.cancel(with: error, at: .library, root: root, into: &cancelling)
        assertRejected(relisted, with: error)
        for (_, member) in busy { assertRejected(member, with: error) }
    }

    // MARK: Exactly the losers

    /// "autoCancel cancels exactly the losers' pending work: never the winner, nothing the
    /// winner's value ... depends on (... branches of one chain), always the loser's own pending
    /// task" (detail 17): a loser in the winner's chain is cancelled alone.
    func testALoserSharingTheWinnersChainIsCancelledAlone() {
        var chain = Chain(members: 3)
        let (winner, loser, other) = (chain.members[0], chain.members[1], chain.members[2])
        let linked = Probe()
        _ = chain.link(loser, .task(linked.makeBody()), whileBodyRuns: true)
        var actions = chain.cancelLoser(loser, sharesChainWithWinner: true)
        assertRejected(loser, with: CancellablePromiseError.cancelled)
        XCTAssertTrue(chain.state.isActive, "the winner's chain is not cancelled")
        assertListed(winner, in: chain.table)
        assertListed(other, in: chain.table)
        assertFreed(loser, in: chain.table)
        assertFollowed(&actions, linked, with: CancellablePromiseError.cancelled)
        actions.run()
        assertCalledOnce(loser.cancel)
        assertNotCalled(winner.cancel)
        assertNotCalled(other.cancel)
    }

    /// A loser whose chain the winner does not share has its whole chain cancelled.
    func testALoserInAnotherChainHasItsWholeChainCancelled() {
        var chain = Chain(members: 2)
        var actions = chain.cancelLoser(chain.members[0], sharesChainWithWinner: false)
        XCTAssertEqual(chain.state.cancelledError as? CancellablePromiseError, .cancelled)
        for member in chain.members { assertRejected(member, with: CancellablePromiseError.cancelled) }
        actions.run()
        for member in chain.members { assertCalledOnce(member.cancel) }
    }

    /// "The input that settled a combinator is never cancelled by autoCancel" (detail 8): a
    /// loser that settled is not cancelled, alone or with its chain.
    func testASettledLoserIsNotCancelled() {
        var chain = Chain(members: 2)
        var settling = chain.settle(chain.members[0])
        settling.run()
        let saved = chain.state
        for shares in [true, false] {
            chain.state = saved
            assertNothingRecorded(chain.cancelLoser(chain.members[0], sharesChainWithWinner: shares))
            XCTAssertTrue(chain.state.isActive)
            assertListed(chain.members[1], in: chain.table)
        }
    }

    // MARK: Chain order

    /// "Cancellation settles in chain order" (details 2, 19): an observer and the members behind
    /// it are not rejected by a cancel (the observer passes the cancellation on after its body)
    /// but leave the chain with their links cancelled; members behind no observer are rejected.
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
        _ = chain.link(further, .task(linked.makeBody()), whileBodyRuns: true)

        var actions = chain.cancel(with: error).actions
        for member in [head, step, unrelated] { assertRejected(member, with: error) }
        for member in [observer, behind, further] {
            assertPending(member)
            assertDetached(member, in: chain.table)
        }
        XCTAssertEqual(chain.state.listedCount, 0)
        assertFollowed(&actions, linked, with: error)
        actions.run()
        assertCalledOnce(head.cancel)
        assertCalledOnce(unrelated.cancel)

        // Each settles when the observer ahead passes the cancellation on, and frees its slot.
        for member in [observer, behind, further] {
            member.resolver.reject(error)
            _ = recorded(chain.state.memberSettled(member.index, in: home))
            assertFreed(member, in: chain.table)
        }
        XCTAssertEqual(chain.table.inUse, 0)
    }

    /// A step or observer listed into a cancelled chain is left for its upstream to settle; what
    /// it linked while reserved is cancelled with the chain's error.
    func testAStepListedIntoACancelledChainIsDetachedWithItsLinksCancelled() {
        var chain = Chain(members: 1)
        let head = chain.members[0]
        _ = chain.cancel(with: error)
        for isObserver in [false, true] {
            let (promise, resolver) = Promise<Int>.pending()
            let key = chain.state.reserve(in: chain.home, upstream: head.key, isObserver: isObserver, cancelBody: nil)
            let linked = Probe()
            var linking = ChainActions()
            chain.state.link(key, .task(linked.makeBody()), whileBodyRuns: true, in: chain.home, into: &linking)
            assertNothingRecorded(linking)
            var actions = ChainActions()
            chain.state.list(key, target: promise, in: chain.home, into: &actions)
            let step = Member(key: key, promise: promise, resolver: resolver, cancel: Probe())
            assertPending(step)
            assertDetached(step, in: chain.table)
            assertFollowed(&actions, linked, with: error)
        }
    }

    // MARK: Members leaving

    /// "A settled chain holds nothing": a member that settled frees its slot, its key goes stale,
    /// and its closure is released uncalled; a settle reported twice changes nothing.
    func testASettledMemberFreesItsSlotAndItsKeyGoesStale() {
        var chain = Chain(members: 2)
        let member = chain.members[0]
        var actions = chain.settle(member)
        XCTAssertEqual(chain.table.inUse, 1)
        XCTAssertEqual(chain.state.listedCount, 1)
        assertFreed(member, in: chain.table)
        actions.run()
        assertReleasedUncalled(member.cancel)

        let again = recorded(chain.state.memberSettled(member.index, in: chain.home))
        assertNothingRecorded(again)
        XCTAssertEqual(chain.table.inUse, 1)
        assertListed(chain.members[1], in: chain.table)
    }

    /// The attachment a promise had before the chain adopted it (not a producer's task, which
    /// the cancel closure stands for) is still told when it settles, once, with the key it knows
    /// it by: the promise keeps it as a settle listener, and the chain keeps nothing of it.
    func testASettledMemberStillTellsTheAttachmentItHadBeforeBeingListed() {
        var chain = Chain(members: 0)
        let earlier = RecordingAttachment()
        let (promise, resolver) = Promise<Int>.pending()
        XCTAssertTrue(promise.replaceAttachment(with: earlier, key: 7).attached)
        let key = chain.state.reserve(in: chain.home, upstream: nil, isObserver: false, cancelBody: nil)
        let outcome = promise.replaceAttachment(with: chain.root, key: key.index)
        XCTAssertNil(outcome.replaced, "kept by the promise, not handed back")
        var attaching = ChainActions()
        chain.state.attach(key, target: promise, attached: outcome.attached, in: chain.home, into: &attaching)
        assertNothingRecorded(attaching)
        let member = Member(key: key, promise: promise, resolver: resolver, cancel: Probe())
        assertListed(member, in: chain.table)
        XCTAssertEqual(earlier.settledKeys, [], "told only when it settles")

        var actions = chain.settle(member)
        actions.run()
        XCTAssertEqual(earlier.settledKeys, [7])
        assertFreed(member, in: chain.table)
    }

    /// A member left detached (abandoned, or waiting behind an observer) is freed by its
    /// promise's settle notification.
    func testASettleAfterADetachFreesTheSlot() {
        var chain = Chain(members: 2)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        XCTAssertEqual(chain.table.inUse, 2)
        for member in chain.members {
            var settling = chain.settle(member)
            settling.run()
            assertFreed(member, in: chain.table)
        }
        XCTAssertEqual(chain.table.inUse, 0)
        XCTAssertEqual(chain.table.capacity, 0, "a settled chain holds no slot array")
    }

    /// "If `promise` has settled already there is nothing to cancel and nothing is listed": a
    /// promise that settled before it could be attached frees its slot and its closure is
    /// released uncalled.
    func testAttachingAPromiseThatAlreadySettledFreesItsSlotAndReleasesItsClosureUncalled() {
        var chain = Chain(members: 0)
        let probe = Probe()
        let key = chain.state.reserve(in: chain.home, upstream: nil, isObserver: false, cancelBody: probe.makeBody())
        XCTAssertEqual(chain.table.inUse, 1)
        var actions = ChainActions()
        chain.state.attach(key, target: Promise<Int>.value(1), attached: false, in: chain.home, into: &actions)
        XCTAssertEqual(chain.table.inUse, 0)
        XCTAssertEqual(chain.state.listedCount, 0)
        XCTAssertNil(chain.table.index(of: key))
        actions.run()
        assertReleasedUncalled(probe)
    }
}

extension ChainState {
    /// `addMember` if the chain is active (listing elsewhere records actions); `nil` otherwise.
    fileprivate mutating func addMemberIfActive(in home: MemberHome) -> Member? {
        isActive ? addMember(in: home) : nil
    }
}
