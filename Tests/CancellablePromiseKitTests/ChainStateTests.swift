import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// Debug builds only: these tests read what the chain machine records (`recorded`, `ChainAction`)
// or `forwardingHops`, which exist only in debug builds of the library.
#if DEBUG

// The rules of a chain's cancellation, pinned one by one at the level of the state machine that
// decides them (`ChainState`): each test sends events to a machine by hand, with no thread and
// no lock taken on a chain, and asserts what each event recorded (`ChainActions.recorded`, in
// order), running the actions where the effect is what counts. The machine's tables are read
// only where the state itself is the rule (a freed slot, a bound). Storages are made only as the
// members' homes and as roots of joins; they are never locked here. The threaded model test
// (CancellationModelTests) checks the interleavings of the same events. This file: listing,
// members leaving, links; ChainStateCancelTests: cancelling, abandoning, losers, joins.

final class ChainStateTests: XCTestCase {
    private let error = ChainError(number: 1)

    // MARK: Listing

    /// "An abandoned chain lists nothing": a member listed into it holds nothing.
    func testAMemberListedIntoAnAbandonedChainHoldsNothing() {
        var chain = Chain(members: 1)
        var abandoning = chain.releaseLastHandle()
        assertRecorded(abandoning, [.releasedMember])
        abandoning.run()
        var actions = ChainActions()
        let late = chain.state.listMember(in: chain.home, into: &actions)
        assertRecorded(actions, [.release([.closure])], "its closure released at once; its promise never held")
        assertPending(late)
        actions.run()
        assertReleasedUncalled(late.cancel)
    }

    /// A member that does not follow a step, listed into a cancelled chain, is rejected at once
    /// with the chain's error and its task cancelled.
    func testAFirstMemberListedIntoACancelledChainIsRejectedAtOnce() {
        var chain = Chain(members: 0)
        assertNothingRecorded(chain.cancel(with: error).actions, "an empty chain has nothing to cancel")
        var actions = ChainActions()
        let late = chain.state.listMember(in: chain.home, into: &actions)
        assertRecorded(actions, rejectedAndCalled([late]))
        assertRejected(late, with: error)
        assertNotCalled(late.cancel)
        actions.run()
        assertCalledOnce(late.cancel)
    }

    /// A step or observer listed into a cancelled chain is left for its upstream to settle; what
    /// it linked while reserved is cancelled with the chain's error.
    func testAStepListedIntoACancelledChainIsDetachedWithItsLinksCancelled() {
        var chain = Chain(members: 1)
        let head = chain.members[0]
        assertRecorded(chain.cancel(with: error).actions, rejectedAndCalled([head]))
        for isObserver in [false, true] {
            let (promise, resolver) = Promise<Int>.pending()
            let key = chain.state.reserve(in: chain.home, upstream: head.key, isObserver: isObserver, cancelBody: nil)
            let linked = Probe()
            var linking = ChainActions()
            chain.state.link(
                key, .task(linked.makeBody()), whileBodyRuns: true, in: chain.home, reaching: nil, root: chain.root.id,
                into: &linking)
            assertNothingRecorded(linking, "a reserved member keeps its link")
            var actions = ChainActions()
            chain.state.list(key, target: promise, in: chain.home, into: &actions)
            assertRecorded(actions, [.follow(.task, error)], "not rejected: its link is cancelled")
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
        assertRecorded(actions, [.releasedMember])
        assertFreed(member, in: chain.table)
        actions.run()
        assertReleasedUncalled(member.cancel)

        assertNothingRecorded(afterTheLock(chain.state.memberSettled(member.index, in: chain.home)))
        XCTAssertEqual(chain.table.inUse, 1)
        // The other member is still listed: cancelling rejects it, and it alone.
        assertRecorded(chain.cancel(with: error).actions, rejectedAndCalled([chain.members[1]]))
    }

    /// The attachment a promise had before the chain adopted it (not a producer's task, which
    /// the cancel closure stands for) is told when it settles, with the key it knows it by.
    func testASettledMemberStillTellsTheAttachmentItHadBeforeBeingListed() {
        var chain = Chain(members: 0)
        let earlier = RecordingAttachment()
        let (promise, resolver) = Promise<Int>.pending()
        XCTAssertTrue(promise.replaceAttachment(with: earlier, key: 7).attached)
        let key = chain.state.reserve(in: chain.home, upstream: nil, isObserver: false, cancelBody: nil)
        let outcome = promise.replaceAttachment(with: chain.root, key: key.slot)
        XCTAssertNil(outcome.replaced, "kept by the promise, not handed back")
        var attaching = ChainActions()
        chain.state.attach(key, target: promise, attached: outcome.attached, in: chain.home, into: &attaching)
        assertNothingRecorded(attaching)
        let member = Member(key: key, promise: promise, resolver: resolver, cancel: Probe())
        XCTAssertEqual(earlier.settledKeys, [], "told only when it settles")

        var actions = chain.settle(member)
        assertRecorded(actions, [.release([.promise])], "the chain keeps nothing of the earlier attachment")
        actions.run()
        XCTAssertEqual(earlier.settledKeys, [7], "the promise told it itself")
        XCTAssertEqual(chain.table.inUse, 0)
    }

    /// A member left detached (abandoned, or waiting behind an observer) is freed by its
    /// promise's settle notification.
    func testASettleAfterADetachFreesTheSlot() {
        var chain = Chain(members: 2)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        for member in chain.members {
            var settling = chain.settle(member)
            assertNothingRecorded(settling, "what it held was released when it was detached")
            settling.run()
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
        var actions = ChainActions()
        chain.state.attach(key, target: Promise<Int>.value(1), attached: false, in: chain.home, into: &actions)
        assertRecorded(actions, [.release([.closure])])
        XCTAssertEqual(chain.table.inUse, 0)
        actions.run()
        assertReleasedUncalled(probe)
    }

    // MARK: Links only while waiting

    /// "Cancelling the chain cancels it": a link of a waiting member is kept, and followed with
    /// the chain's error when the chain is cancelled.
    func testALinkOfAWaitingMemberIsFollowedWithTheChainsErrorWhenTheChainIsCancelled() {
        var chain = Chain(members: 1)
        let linked = Probe()
        assertNothingRecorded(chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: true))
        var actions = chain.cancel(with: error).actions
        assertRecorded(actions, rejectedAndCalled(chain.members) + [.follow(.task, error)])
        assertFollowed(&actions, linked, with: error)
    }

    /// "The link ends when it settles": a member that settles releases its link uncalled, and a
    /// later cancel follows nothing.
    func testALinkEndsWhenItsMemberSettles() {
        var chain = Chain(members: 1)
        let linked = Probe()
        assertNothingRecorded(chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: true))
        var settling = chain.settle(chain.members[0])
        assertRecorded(settling, [.release([.closure, .link, .promise])])
        assertLinkReleased(&settling, linked)
        assertNothingRecorded(chain.cancel(with: error).actions)
    }

    /// "A settled promise links nothing": in an active chain, a link arriving after its member
    /// left is released, not followed.
    func testALinkAfterTheMemberSettledIsReleasedInAnActiveChain() {
        var chain = Chain(members: 1)
        var settling = chain.settle(chain.members[0])
        settling.run()
        let linked = Probe()
        var actions = chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: false)
        assertRecorded(actions, [.release(.link)])
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
            assertRecorded(actions, [.follow(.task, error)])
            assertFollowed(&actions, linked, with: error)
        }
    }

    /// An `autoCancel` loser cancelled alone while its body ran: what the body then returns is
    /// cancelled, though the chain is active; a link that does not come from its running body
    /// is released.
    func testALinkFromTheBodyOfALoserCancelledAloneIsFollowed() {
        var chain = Chain(members: 2)
        let loser = chain.members[1]
        var losing = chain.cancelLoser(loser, sharesChainWithWinner: true)
        assertRecorded(losing, rejectedAndCalled([loser]))
        losing.run()
        XCTAssertTrue(chain.state.isActive)
        let saved = chain.state
        let linked = Probe()
        var actions = chain.link(loser, .task(linked.makeBody()), whileBodyRuns: true)
        assertRecorded(actions, [.follow(.task, CancellablePromiseError.cancelled)])
        assertFollowed(&actions, linked, with: CancellablePromiseError.cancelled)

        chain.state = saved
        let released = Probe()
        var later = chain.link(loser, .task(released.makeBody()), whileBodyRuns: false)
        assertRecorded(later, [.release(.link)])
        assertLinkReleased(&later, released)
    }

    /// "Nothing ... keeps abandoned work alive": an abandoned chain keeps no link, from a running
    /// body or not, and follows none.
    func testAnAbandonedChainKeepsNoLink() {
        var chain = Chain(members: 1)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        chain.linkFromTheFirstMemberWhileItsBodyRunsAndNot { actions, linked in
            assertRecorded(actions, [.release(.link)])
            assertLinkReleased(&actions, linked)
        }
    }
}
#endif
