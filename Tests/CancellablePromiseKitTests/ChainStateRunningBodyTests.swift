import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// The rule of a running body's token (`CancellationToken.current`), pinned at the level of the
// state machine (`runningBodyToken` and the events that end a member): made on the first read,
// cancelled with the chain, the member alone or a join into a cancelled chain while the member is
// pending, completed "not cancelled" when the member settles or the chain is abandoned. Whether a
// member's token is kept is read from what the events that end it return (sent to a copy).

final class ChainStateRunningBodyTests: XCTestCase {
    private let error = ChainError(number: 25)

    /// The token a member's running body reads, made on the first read; the same one afterwards.
    private func read(_ member: Member, in state: inout ChainState, at home: MemberHome) -> RunningBodyToken {
        state.runningBodyToken(slot: member.slot, step: ObjectIdentifier(member.promise), in: home)
    }

    private func read(_ member: Member, of chain: inout Chain) -> RunningBodyToken {
        read(member, in: &chain.state, at: chain.home)
    }

    private func madeToken(
        _ member: Member, in state: inout ChainState, at home: MemberHome, file: StaticString = #filePath,
        line: UInt = #line
    ) -> CancellationToken {
        guard case .token(let token) = read(member, in: &state, at: home) else {
            XCTFail("a running member of an active chain gets a token", file: file, line: line)
            return .none
        }
        return token
    }

    private func madeToken(
        _ member: Member, of chain: inout Chain, file: StaticString = #filePath, line: UInt = #line
    ) -> CancellationToken {
        madeToken(member, in: &chain.state, at: chain.home, file: file, line: line)
    }

    func testTheFirstReadMakesThePendingTokenAndLaterReadsReturnIt() {
        var chain = Chain(members: 2)
        XCTAssertEqual(chain.state.tokensAbandoning(in: chain.home), [], "no token until a body reads one")
        let token = madeToken(chain.members[1], of: &chain)
        XCTAssertFalse(token.isCompleted)
        XCTAssertEqual(read(chain.members[1], of: &chain), .token(token), "the same token")
        // One token, for the member that read it.
        XCTAssertEqual(chain.tokensSettling(chain.members[1]), [false])
        XCTAssertEqual(chain.tokensSettling(chain.members[0]), [])
        XCTAssertEqual(chain.tokensCancelling, [true])
        XCTAssertEqual(chain.state.tokensAbandoning(in: chain.home), [false])
    }

    func testCancellingWhileTheBodyRunsCancelsItsTokenAfterTheCancelClosures() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        var cancelling = chain.cancel(with: error)
        assertReturned(
            cancelling, rejectedAndCalled(chain.members) + [.completeToken(cancelled: true)],
            "its token is cancelled with its rejection")
        XCTAssertFalse(token.isCompleted, "completed after the lock")
        let closuresCalled = Recorder<[Int]>()
        let probes = UncheckedBox(chain.members.map(\.cancel))
        token.onCancel { closuresCalled.append(probes.value.map(\.calls)) }
        cancelling.run()
        XCTAssertTrue(token.isCancelled)
        XCTAssertEqual(closuresCalled.all, [[1, 1]], "the cancel closures ran first (the same run)")
        XCTAssertEqual(read(chain.members[0], of: &chain), .cancelled, "read again: cancelled")
        XCTAssertEqual(chain.tokensSettling(chain.members[0]), [], "no token kept")
    }

    func testCancellingWhileTheStepWaitsOnItsReturnedPromiseCancelsBoth() {
        var chain = Chain(members: 1)
        let step = chain.state.addStep(in: chain.home, after: chain.members[0])
        let token = madeToken(step, of: &chain)
        let returned = Probe()
        assertNone(chain.link(step, .task(returned.makeBody()), whileBodyRuns: true))
        var cancelling = chain.cancel(with: error)
        let theStep: [Returned] = [
            .rejected, .release(.promise), .completeToken(cancelled: true), .follow(.task, error),
        ]
        assertReturned(
            cancelling, rejectedAndCalled(chain.members) + theStep, "the returned promise's work is cancelled too")
        assertFollowed(&cancelling, returned, with: error)
        cancelling.run()
        XCTAssertTrue(token.isCancelled)
    }

    func testAMemberThatSettledOnItsOwnCompletesItsTokenNotCancelled() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        var settling = chain.settle(chain.members[0])
        assertLeft(settling, holding: [.releasedMember, .completeToken(cancelled: false)], "its token leaves with it")
        XCTAssertFalse(token.isCompleted, "completed after the lock")
        settling.run()
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
        XCTAssertEqual(chain.tokensSettling(chain.members[0]), [], "no token kept")
        let cancelling = chain.cancel(with: error)
        assertReturned(cancelling, rejectedAndCalled([chain.members[1]]), "a later cancel does not reach it")
    }

    /// A step's promise settles under its own lock and tells its chain after: a cancel that
    /// comes in between finds the member listed but cannot reject it (its cancel closure is
    /// spared). The step settled on its own, so its token must complete "not cancelled", as its
    /// own settle notification (still to come) would have it.
    func testACancelThatFindsTheMembersPromiseSettledOnItsOwnDoesNotCancelItsToken() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        chain.members[0].resolver.fulfill(1)  // its settle notification is still to come
        var cancelling = chain.cancel(with: error)
        assertReturned(
            cancelling, [.releasedMember] + rejectedAndCalled([chain.members[1]]), "no token completed: it is spared")
        cancelling.run()
        XCTAssertEqual(chain.members[0].cancel.calls, 0, "a member that settled first keeps its closure uncalled")
        XCTAssertFalse(token.isCancelled, "the step settled on its own before the cancel")
        assertSettlingCompletesTheTokenNotCancelled(chain.members[0], token, of: &chain)
    }

    /// The same for a loser cancelled alone: its promise settled on its own first.
    func testALoserThatSettledOnItsOwnBeforeItsCancelKeepsItsTokenNotCancelled() {
        var chain = Chain(members: 2)
        let token = madeToken(chain.members[0], of: &chain)
        chain.members[0].resolver.fulfill(1)  // its settle notification is still to come
        var losing = chain.cancelLoser(chain.members[0], sharesChainWithWinner: true)
        assertReturned(losing, [.releasedMember], "no token completed: it is spared")
        losing.run()
        XCTAssertFalse(token.isCancelled, "the loser settled on its own before it was cancelled")
        assertSettlingCompletesTheTokenNotCancelled(chain.members[0], token, of: &chain)
    }

    func testALoserCancelledAloneCancelsOnlyItsOwnToken() {
        var chain = Chain(members: 2)
        let loser = madeToken(chain.members[0], of: &chain)
        let other = madeToken(chain.members[1], of: &chain)
        var losing = chain.cancelLoser(chain.members[0], sharesChainWithWinner: true)
        assertReturned(losing, rejectedAndCalled([chain.members[0]]) + [.completeToken(cancelled: true)])
        losing.run()
        XCTAssertTrue(loser.isCancelled)
        XCTAssertFalse(other.isCompleted, "the winner's chain is not cancelled")
        XCTAssertEqual(chain.phase, .active)
        XCTAssertEqual(read(chain.members[0], of: &chain), .cancelled, "its body reads a cancelled token")
        XCTAssertEqual(read(chain.members[1], of: &chain), .token(other))
    }

    func testAnAbandonedChainCompletesItsTokensNotCancelled() {
        var chain = Chain(members: 1)
        let token = madeToken(chain.members[0], of: &chain)
        var abandoning = chain.releaseLastHandle()
        assertReturned(abandoning, [.completeToken(cancelled: false), .releasedMember])
        abandoning.run()
        XCTAssertTrue(token.isCompleted)
        XCTAssertFalse(token.isCancelled)
        XCTAssertEqual(read(chain.members[0], of: &chain), .none, "nothing can cancel it any more")
    }

    func testAJoinWhileABodyRunsKeepsItsTokenAndCancellingTheJoinedChainCancelsIt() {
        let a = Node()
        let b = Node()
        let member = b.chain.addMember(in: b.ownHome)
        let token = madeToken(member, in: &b.chain, at: b.ownHome)
        let joined = join(a, b)
        assertNone(joined.outcome)
        let root = joined.absorption?.root == a.id ? a : b
        let home = b.home(under: root)
        XCTAssertEqual(read(member, in: &root.chain, at: home), .token(token), "the token moved with its table")
        var cancelling = root.chain.cancel(with: error, at: .library, root: root.id)
        assertReturned(cancelling, rejectedAndCalled([member]) + [.completeToken(cancelled: true)])
        cancelling.run()
        XCTAssertTrue(token.isCancelled)
    }

    func testJoiningACancelledChainCancelsTheRunningBodysToken() {
        let cancelled = Node()
        _ = cancelled.chain.cancel(with: error, at: .library, root: cancelled.id)
        let other = Node()
        let member = other.chain.addMember(in: other.ownHome)
        let token = madeToken(member, in: &other.chain, at: other.ownHome)
        let joined = join(other, cancelled)
        var joining = joined.outcome
        assertReturned(joining, rejectedAndCalled([member]) + [.completeToken(cancelled: true)])
        joining.run()
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
        XCTAssertEqual(chain.tokensSettling(chain.members[0]), [], "no token kept for the member")
        XCTAssertEqual(chain.state.tokensAbandoning(in: chain.home), [], "nor for any slot")
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
            var attaching = chain.state.attach(key, target: promise, attached: attached, in: chain.home)
            if attached {
                assertNone(attaching)
                XCTAssertEqual(
                    chain.state.runningBodyToken(slot: key.slot, step: ObjectIdentifier(promise), in: chain.home),
                    .token(token), "the member's token now")
                var cancelling = chain.cancel(with: error)
                cancelling.run()
                XCTAssertTrue(token.isCancelled)
            } else {
                assertReturned(attaching, [.completeToken(cancelled: false)])
                attaching.run()
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
        var losing = chain.cancelLoser(loser, sharesChainWithWinner: true)
        losing.run()
        let newcomer = chain.state.addMember(in: chain.home)
        XCTAssertEqual(newcomer.slot, loser.slot, "the freed slot is taken again")
        let token = madeToken(newcomer, of: &chain)
        XCTAssertEqual(read(loser, of: &chain), .cancelled)
        XCTAssertEqual(read(newcomer, of: &chain), .token(token))
        XCTAssertFalse(token.isCompleted)
    }

    /// Settling `member` (whose promise settled on its own, its notification still to come)
    /// completes its token, kept until now, "not cancelled".
    private func assertSettlingCompletesTheTokenNotCancelled(
        _ member: Member, _ token: CancellationToken, of chain: inout Chain, file: StaticString = #filePath,
        line: UInt = #line
    ) {
        var settling = chain.state.memberSettled(member.index, in: chain.home)
        assertLeft(settling, holding: [.completeToken(cancelled: false)], file: file, line: line)
        settling.run()
        XCTAssertTrue(token.isCompleted, file: file, line: line)
        XCTAssertFalse(token.isCancelled, file: file, line: line)
    }
}
