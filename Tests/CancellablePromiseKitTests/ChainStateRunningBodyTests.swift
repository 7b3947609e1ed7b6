import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// Debug builds only: these tests read what the chain machine records (`recorded`, `ChainAction`)
// or `forwardingHops`, which exist only in debug builds of the library.
#if DEBUG

// The rule of a running body's token (`CancellationToken.current`), pinned at the level of the
// state machine (`runningBodyToken` and the events that end a member): made on the first read,
// cancelled with the chain, the member alone or a join into a cancelled chain while the member is
// pending, completed "not cancelled" when the member settles or the chain is abandoned.

final class ChainStateRunningBodyTests: XCTestCase {
    private let error = ChainError(number: 25)

    /// The token a member's running body reads, made on the first read; the same one afterwards.
    private func read(_ member: Member, of chain: inout Chain) -> RunningBodyToken {
        chain.state.runningBodyToken(slot: member.slot, step: ObjectIdentifier(member.promise), in: chain.home)
    }

    private func madeToken(
        _ member: Member, of chain: inout Chain, file: StaticString = #filePath, line: UInt = #line
    ) -> CancellationToken {
        guard case .token(let token) = read(member, of: &chain) else {
            XCTFail("a running member of an active chain gets a token", file: file, line: line)
            return .none
        }
        return token
    }

    func testTheFirstReadMakesThePendingTokenAndLaterReadsReturnIt() {
        var chain = Chain(members: 2)
        XCTAssertNil(chain.state.bodyTokens, "no token until a body reads one")
        let token = madeToken(chain.members[1], of: &chain)
        XCTAssertFalse(token.isCompleted)
        XCTAssertEqual(read(chain.members[1], of: &chain), .token(token), "the same token")
        XCTAssertEqual(chain.state.bodyTokens?.count, 1, "one token, for the member that read it")
    }

    func testCancellingWhileTheBodyRunsCancelsItsTokenAfterTheCancelClosures() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        var (_, actions) = chain.cancel(with: error)
        assertRecorded(
            actions,
            rejectedAndCalled([chain.members[0]]) + [.completeToken(cancelled: true)]
                + rejectedAndCalled([chain.members[1]]),
            "its token is cancelled as its rejection takes effect")
        XCTAssertFalse(token.isCompleted, "completed after the lock")
        let order = Recorder<String>()
        token.onCancel { order.append("token") }
        actions.run()
        XCTAssertTrue(token.isCancelled)
        XCTAssertEqual(order.all, ["token"])
        XCTAssertEqual(chain.members.map(\.cancel.calls), [1, 1], "the cancel closures ran first (the same run)")
        XCTAssertEqual(read(chain.members[0], of: &chain), .cancelled, "read again: cancelled")
        XCTAssertEqual(chain.state.bodyTokens?.count ?? 0, 0, "no token kept")
    }

    func testCancellingWhileTheStepWaitsOnItsReturnedPromiseCancelsBoth() {
        var chain = Chain(members: 1)
        let step = chain.state.addStep(in: chain.home, after: chain.members[0])
        let token = madeToken(step, of: &chain)
        let returned = Probe()
        assertNothingRecorded(chain.link(step, .task(returned.makeBody()), whileBodyRuns: true))
        var (_, actions) = chain.cancel(with: error)
        XCTAssertTrue(actions.recorded.contains(.completeToken(cancelled: true)))
        XCTAssertTrue(actions.recorded.contains(.follow(.task, error)), "the returned promise's work is cancelled too")
        actions.run()
        XCTAssertTrue(token.isCancelled)
    }

    func testAMemberThatSettledOnItsOwnCompletesItsTokenNotCancelled() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        chain.members[0].resolver.fulfill(1)
        var left = chain.state.memberSettled(chain.members[0].index, in: chain.home)
        XCTAssertTrue(left.token === token, "the member's token leaves with it")
        XCTAssertFalse(token.isCompleted, "completed after the lock")
        left.release()
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
        XCTAssertEqual(chain.state.bodyTokens?.count ?? 0, 0, "no token kept")
        let (_, actions) = chain.cancel(with: error)
        assertRecorded(actions, rejectedAndCalled([chain.members[1]]), "a later cancel does not reach it")
    }

    /// A step's promise settles under its own lock and tells its chain after: a cancel that
    /// comes in between finds the member listed but cannot reject it (its cancel closure is
    /// spared). The step settled on its own, so its token must complete "not cancelled", as its
    /// own settle notification (still to come) would have it.
    func testACancelThatFindsTheMembersPromiseSettledOnItsOwnDoesNotCancelItsToken() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        chain.members[0].resolver.fulfill(1)  // its settle notification is still to come
        var (_, actions) = chain.cancel(with: error)
        actions.run()
        XCTAssertEqual(chain.members[0].cancel.calls, 0, "a member that settled first keeps its closure uncalled")
        XCTAssertFalse(token.isCancelled, "the step settled on its own before the cancel")
        var left = chain.state.memberSettled(chain.members[0].index, in: chain.home)
        left.release()
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
    }

    /// The same for a loser cancelled alone: its promise settled on its own first.
    func testALoserThatSettledOnItsOwnBeforeItsCancelKeepsItsTokenNotCancelled() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        chain.members[0].resolver.fulfill(1)  // its settle notification is still to come
        var actions = chain.cancelLoser(chain.members[0], sharesChainWithWinner: true)
        actions.run()
        XCTAssertFalse(token.isCancelled, "the loser settled on its own before it was cancelled")
        var left = chain.state.memberSettled(chain.members[0].index, in: chain.home)
        left.release()
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
    }

    func testALoserCancelledAloneCancelsOnlyItsOwnToken() {
        var chain = Chain(members: 2)
        let loser = madeToken(chain.members[0], of: &chain)
        let other = madeToken(chain.members[1], of: &chain)
        var actions = chain.cancelLoser(chain.members[0], sharesChainWithWinner: true)
        assertRecorded(actions, rejectedAndCalled([chain.members[0]]) + [.completeToken(cancelled: true)])
        actions.run()
        XCTAssertTrue(loser.isCancelled)
        XCTAssertFalse(other.isCompleted, "the winner's chain is not cancelled")
        XCTAssertTrue(chain.state.isActive)
        XCTAssertEqual(read(chain.members[0], of: &chain), .cancelled, "its body reads a cancelled token")
        XCTAssertEqual(read(chain.members[1], of: &chain), .token(other))
    }

    func testAnAbandonedChainCompletesItsTokensNotCancelled() {
        var chain = Chain(members: 1)
        let token = madeToken(chain.members[0], of: &chain)
        var actions = chain.releaseLastHandle()
        XCTAssertEqual(actions.recorded.first, .completeToken(cancelled: false))
        actions.run()
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
        XCTAssertEqual(read(chain.members[0], of: &chain), .none, "nothing can cancel it any more")
    }

    func testAJoinWhileABodyRunsKeepsItsTokenAndCancellingTheJoinedChainCancelsIt() {
        let a = Node()
        let b = Node()
        let member = b.chain.addMember(in: b.ownHome)
        guard
            case .token(let token) = b.chain.runningBodyToken(
                slot: member.slot, step: ObjectIdentifier(member.promise), in: b.ownHome)
        else { return XCTFail("a token") }
        let joined = join(a, b)
        assertNothingRecorded(joined.actions)
        let root = joined.absorption!.root == a.id ? a : b
        let home = b.home(under: root)
        XCTAssertEqual(
            root.chain.runningBodyToken(slot: member.slot, step: ObjectIdentifier(member.promise), in: home),
            .token(token), "the token moved with its table")
        var actions = ChainActions()
        root.chain.cancel(with: error, at: .library, root: root.id, into: &actions)
        XCTAssertTrue(actions.recorded.contains(.completeToken(cancelled: true)))
        actions.run()
        XCTAssertTrue(token.isCancelled)
    }

    func testJoiningACancelledChainCancelsTheRunningBodysToken() {
        let cancelled = Node()
        var ignored = ChainActions()
        cancelled.chain.cancel(with: error, at: .library, root: cancelled.id, into: &ignored)
        let other = Node()
        let member = other.chain.addMember(in: other.ownHome)
        guard
            case .token(let token) = other.chain.runningBodyToken(
                slot: member.slot, step: ObjectIdentifier(member.promise), in: other.ownHome)
        else { return XCTFail("a token") }
        var (_, actions) = join(other, cancelled)
        XCTAssertTrue(actions.recorded.contains(.completeToken(cancelled: true)))
        actions.run()
        XCTAssertTrue(token.isCancelled)
    }

    func testABodyWhoseStepNoLongerHoldsItsSlotReadsACancelledTokenAndMakesNone() {
        var chain = Chain(members: 1)
        let stranger = Promise<Int>.pending().promise
        XCTAssertEqual(
            chain.state.runningBodyToken(slot: chain.members[0].slot, step: ObjectIdentifier(stranger), in: chain.home),
            .cancelled)
        XCTAssertEqual(
            chain.state.runningBodyToken(slot: 9, step: ObjectIdentifier(stranger), in: chain.home), .cancelled)
        XCTAssertEqual(chain.state.bodyTokens?.count ?? 0, 0, "no token kept")
    }

    func testAnInitialisersBodyTokenBecomesTheFirstMembersOrCompletesIfItSettledFirst() {
        for attached in [true, false] {
            var chain = Chain(members: 0)
            guard
                case .token(let token) = chain.state.runningBodyToken(
                    slot: ChainState.firstBodySlot, step: nil, in: chain.home)
            else { return XCTFail("a token") }
            let (promise, resolver) = Promise<Int>.pending()
            let key = chain.state.reserve(in: chain.home, upstream: nil, isObserver: false, cancelBody: nil)
            var actions = ChainActions()
            chain.state.attach(key, target: promise, attached: attached, in: chain.home, into: &actions)
            if attached {
                assertNothingRecorded(actions)
                XCTAssertEqual(
                    chain.state.runningBodyToken(slot: key.slot, step: ObjectIdentifier(promise), in: chain.home),
                    .token(token), "the member's token now")
                var (_, cancelling) = chain.cancel(with: error)
                cancelling.run()
                XCTAssertTrue(token.isCancelled)
            } else {
                assertRecorded(actions, [.completeToken(cancelled: false)])
                actions.run()
                XCTAssertTrue(token.isCompleted)
                XCTAssertFalse(token.isCancelled)
            }
            resolver.fulfill(0)
        }
    }

    /// A loser cancelled alone frees its slot at once, while its body may still run; a later
    /// member that takes the slot and reads its token does not hand that token to the loser,
    /// whose body reads a cancelled one.
    func testALoserWhoseSlotAnotherMemberTookReadsACancelledTokenNotTheNewcomers() {
        var chain = Chain(members: 2)
        let loser = chain.members[0]
        var actions = chain.cancelLoser(loser, sharesChainWithWinner: true)
        actions.run()
        let newcomer = chain.state.addMember(in: chain.home)
        XCTAssertEqual(newcomer.slot, loser.slot, "the freed slot is taken again")
        let token = madeToken(newcomer, of: &chain)
        XCTAssertEqual(read(loser, of: &chain), .cancelled)
        XCTAssertEqual(read(newcomer, of: &chain), .token(token))
        XCTAssertFalse(token.isCompleted)
    }
}
#endif
