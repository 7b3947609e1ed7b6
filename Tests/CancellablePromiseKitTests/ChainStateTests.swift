import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// The rules of a chain's cancellation, pinned one by one at the level of the state machine that
// decides them (`ChainState`): each test sends events to a machine by hand, with no thread and
// no lock taken on a chain, and asserts what each event returned (its `ChainOutcome`, by its
// summary), running the outcome where the effect is what counts. The machine's state is read
// only through what events return (a freed slot: settling it, in a copy, finds no member) and
// through its documented queries. Storages are made only as the members' homes and as roots of
// joins; they are never locked here. The threaded model test (CancellationModelTests) checks the
// interleavings of the same events. This file: listing, members leaving, links;
// ChainStateCancelTests: cancelling, abandoning, losers, joins.

final class ChainStateTests: XCTestCase {
    private let error = ChainError(number: 1)

    // MARK: Listing

    /// "An abandoned chain lists nothing": a member listed into it holds nothing.
    func testAMemberListedIntoAnAbandonedChainHoldsNothing() {
        var chain = Chain(members: 1)
        var abandoning = chain.releaseLastHandle()
        assertReturned(abandoning, [.releasedMember])
        abandoning.run()
        let listed = chain.state.listMember(in: chain.home)
        let late = listed.member
        var listing = listed.outcome
        assertReturned(listing, [.release(.closure)], "its closure released at once; its promise never held")
        assertDetached(late, in: chain)
        assertPending(late)
        listing.run()
        assertReleasedUncalled(late.cancel)
    }

    /// A member that does not follow a step, listed into a cancelled chain, is rejected at once
    /// with the chain's error and its task cancelled.
    func testAFirstMemberListedIntoACancelledChainIsRejectedAtOnce() {
        var chain = Chain(members: 0)
        assertNone(chain.cancel(with: error), "an empty chain has nothing to cancel")
        let listed = chain.state.listMember(in: chain.home)
        let late = listed.member
        var listing = listed.outcome
        assertReturned(listing, rejectedAndCalled([late]))
        assertRejected(late, with: error)
        assertFreed(late, in: chain)
        assertNotCalled(late.cancel)
        listing.run()
        assertCalledOnce(late.cancel)
    }

    /// A step or observer listed into a cancelled chain is left for its upstream to settle; what
    /// it linked while reserved is cancelled with the chain's error.
    func testAStepListedIntoACancelledChainIsDetachedWithItsLinksCancelled() {
        var chain = Chain(members: 1)
        let head = chain.members[0]
        assertReturned(chain.cancel(with: error), rejectedAndCalled([head]))
        for isObserver in [false, true] {
            let (promise, resolver) = Promise<Int>.pending()
            let key = chain.state.reserve(in: chain.home, upstream: head.key, isObserver: isObserver, cancelBody: nil)
            let linked = Probe()
            let linking = chain.state.link(
                key, .task(linked.makeBody()), whileBodyRuns: true, in: chain.home, reaching: nil, root: chain.root.id)
            assertNone(linking, "a reserved member keeps its link")
            var listing = chain.state.list(key, target: promise, in: chain.home)
            assertReturned(listing, [.follow(.task, error)], "not rejected: its link is cancelled")
            let step = Member(key: key, promise: promise, resolver: resolver, cancel: Probe())
            assertPending(step)
            assertDetached(step, in: chain)
            assertFollowed(&listing, linked, with: error)
        }
    }

    // MARK: Members leaving

    /// "A settled chain holds nothing": a member that settled frees its slot, its key goes stale,
    /// and its closure is released uncalled; a settle reported twice changes nothing.
    func testASettledMemberFreesItsSlotAndItsKeyGoesStale() {
        var chain = Chain(members: 2)
        let member = chain.members[0]
        var settling = chain.settle(member)
        assertLeft(settling, holding: [.releasedMember])
        XCTAssertFalse(chain.state.keepsLink(for: member.key, in: chain.home, root: chain.root.id), "the key is stale")
        settling.run()
        assertReleasedUncalled(member.cancel)

        assertNone(chain.state.memberSettled(member.index, in: chain.home), "a second report finds the slot free")
        // The other member is still listed: cancelling rejects it, and it alone.
        assertReturned(chain.cancel(with: error), rejectedAndCalled([chain.members[1]]))
        assertRejected(chain.members[1], with: error)
    }

    /// The attachment a promise had before the chain adopted it (not a producer's task, which
    /// the cancel closure stands for) is told when it settles, with the key it knows it by.
    func testASettledMemberStillTellsTheAttachmentItHadBeforeBeingListed() {
        var chain = Chain(members: 0)
        let earlier = RecordingAttachment()
        let (promise, resolver) = Promise<Int>.pending()
        XCTAssertTrue(promise.replaceAttachment(with: earlier, key: 7).attached)
        let key = chain.state.reserve(in: chain.home, upstream: nil, isObserver: false, cancelBody: nil)
        let replacing = promise.replaceAttachment(with: chain.root, key: key.slot)
        XCTAssertNil(replacing.replaced, "kept by the promise, not handed back")
        assertNone(chain.state.attach(key, target: promise, attached: replacing.attached, in: chain.home))
        let member = Member(key: key, promise: promise, resolver: resolver, cancel: Probe())
        XCTAssertEqual(earlier.settledKeys, [], "told only when it settles")

        var settling = chain.settle(member)
        assertLeft(settling, holding: [.release(.promise)], "the chain keeps nothing of the earlier attachment")
        settling.run()
        XCTAssertEqual(earlier.settledKeys, [7], "the promise told it itself")
        assertFreed(member, in: chain)
    }

    /// A member left detached (abandoned, or waiting behind an observer) is freed by its
    /// promise's settle notification.
    func testASettleAfterADetachFreesTheSlot() {
        var chain = Chain(members: 2)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        for member in chain.members {
            var settling = chain.settle(member)
            assertLeft(settling, "what it held was released when it was detached")
            settling.run()
            assertFreed(member, in: chain)
        }
        XCTAssertEqual(chain.state.capacity(of: chain.home), 0, "a settled chain holds no slot array")
    }

    /// "If `promise` has settled already there is nothing to cancel and nothing is listed": a
    /// promise that settled before it could be attached frees its slot and its closure is
    /// released uncalled.
    func testAttachingAPromiseThatAlreadySettledFreesItsSlotAndReleasesItsClosureUncalled() {
        var chain = Chain(members: 0)
        let probe = Probe()
        let key = chain.state.reserve(in: chain.home, upstream: nil, isObserver: false, cancelBody: probe.makeBody())
        var attaching = chain.state.attach(key, target: Promise<Int>.value(1), attached: false, in: chain.home)
        assertReturned(attaching, [.release(.closure)])
        assertSlotFree(Int(key.slot), in: chain.state, at: chain.home)
        attaching.run()
        assertReleasedUncalled(probe)
    }

    // MARK: Links only while waiting

    /// "Cancelling the chain cancels it": a link of a waiting member is kept, and followed with
    /// the chain's error when the chain is cancelled.
    func testALinkOfAWaitingMemberIsFollowedWithTheChainsErrorWhenTheChainIsCancelled() {
        var chain = Chain(members: 1)
        let linked = Probe()
        assertNone(chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: true))
        var cancelling = chain.cancel(with: error)
        assertReturned(cancelling, rejectedAndCalled(chain.members) + [.follow(.task, error)])
        assertFollowed(&cancelling, linked, with: error)
    }

    /// "The link ends when it settles": a member that settles releases its link uncalled, and a
    /// later cancel follows nothing.
    func testALinkEndsWhenItsMemberSettles() {
        var chain = Chain(members: 1)
        let linked = Probe()
        assertNone(chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: true))
        var settling = chain.settle(chain.members[0])
        assertLeft(settling, holding: [.release([.closure, .link, .promise])])
        assertLinkReleased(&settling, linked)
        assertNone(chain.cancel(with: error))
    }

    /// "A settled promise links nothing": in an active chain, a link arriving after its member
    /// left is released, not followed.
    func testALinkAfterTheMemberSettledIsReleasedInAnActiveChain() {
        var chain = Chain(members: 1)
        var settling = chain.settle(chain.members[0])
        settling.run()
        let linked = Probe()
        var linking = chain.link(chain.members[0], .task(linked.makeBody()), whileBodyRuns: false)
        assertReturned(linking, [.release(.link)])
        assertLinkReleased(&linking, linked)
        XCTAssertEqual(chain.phase, .active)
    }

    /// A member that left a cancelled chain discards its body's result: what it returned is
    /// cancelled with the chain's error, whether its body was running or not.
    func testALinkAfterTheMemberLeftIsFollowedInACancelledChain() {
        var chain = Chain(members: 1)
        var cancelling = chain.cancel(with: error)
        cancelling.run()
        chain.linkFromTheFirstMemberWhileItsBodyRunsAndNot { linking, linked in
            assertReturned(linking, [.follow(.task, error)])
            assertFollowed(&linking, linked, with: error)
        }
    }

    /// An `autoCancel` loser cancelled alone while its body ran: what the body then returns is
    /// cancelled, though the chain is active; a link that does not come from its running body
    /// is released.
    func testALinkFromTheBodyOfALoserCancelledAloneIsFollowed() {
        var chain = Chain(members: 2)
        let loser = chain.members[1]
        var losing = chain.cancelLoser(loser, sharesChainWithWinner: true)
        assertReturned(losing, rejectedAndCalled([loser]))
        losing.run()
        XCTAssertEqual(chain.phase, .active)
        let saved = chain.state
        let linked = Probe()
        var linking = chain.link(loser, .task(linked.makeBody()), whileBodyRuns: true)
        assertReturned(linking, [.follow(.task, CancellablePromiseError.cancelled)])
        assertFollowed(&linking, linked, with: CancellablePromiseError.cancelled)

        chain.state = saved
        let released = Probe()
        var later = chain.link(loser, .task(released.makeBody()), whileBodyRuns: false)
        assertReturned(later, [.release(.link)])
        assertLinkReleased(&later, released)
    }

    /// "Nothing ... keeps abandoned work alive": an abandoned chain keeps no link, from a running
    /// body or not, and follows none.
    func testAnAbandonedChainKeepsNoLink() {
        var chain = Chain(members: 1)
        var abandoning = chain.releaseLastHandle()
        abandoning.run()
        chain.linkFromTheFirstMemberWhileItsBodyRunsAndNot { linking, linked in
            assertReturned(linking, [.release(.link)])
            assertLinkReleased(&linking, linked)
        }
    }
}
