import Dispatch
import Foundation
import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// `SharedCancellablePromise`: followers settle as the source does; each cancels only itself;
// the source is cancelled when every follower was cancelled. An abandoned follower keeps waiting
// and settles with the source.

/// A task the test settles by hand, counting the calls and releases of its cancel closure.
final class SharedSourceTask: @unchecked Sendable {
    let promise: CancellablePromise<Int>
    let resolver: Resolver<Int>
    let cancelCount = Counter()
    let closureReleased = Flag()

    init() {
        var captured: Resolver<Int>?
        let cancelCount = self.cancelCount
        let probe = DeinitProbe { [closureReleased] in closureReleased.raise() }
        promise = CancellablePromise<Int> { resolver in
            captured = resolver
            return {
                probe.touch()
                cancelCount.increment()
            }
        }
        resolver = captured!
    }
}

/// Records what a follower settled with, without holding a cancel handle of its chain.
final class FollowerOutcome: @unchecked Sendable {
    private let result = SendableBox<PromiseCore.Result<Int>?>(nil)

    init(_ follower: CancellablePromise<Int>) {
        follower.pipe { [result] in result.value = $0 }
    }

    var value: Int? { result.value?.fulfilledValue }
    var error: Error? { result.value?.rejectedError }
    var isPending: Bool { result.value == nil }
    var isCancellation: Bool { (error as? CancellablePromiseError) == .cancelled }
}

struct SharedTestError: Error, Equatable {}

final class SharedCancellablePromiseTests: XCTestCase {
    /// A pending source task shared, and the first two followers asked of it.
    private func makeSharedSourceWithTwoFollowers() -> (
        task: SharedSourceTask, shared: SharedCancellablePromise<Int>,
        first: CancellablePromise<Int>, second: CancellablePromise<Int>
    ) {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        return (task, shared, shared.follower(), shared.follower())
    }

    // MARK: Settling

    func testFollowersSettleWithTheSourceValue() {
        let (task, shared, first, second) = makeSharedSourceWithTwoFollowers()
        XCTAssertEqual(shared.followerCount, 2)
        task.resolver.fulfill(7)
        XCTAssertEqual(first.value, 7)
        XCTAssertEqual(second.value, 7)
        XCTAssertEqual(shared.followerCount, 0)
        XCTAssertTrue(shared.isEnded)
        XCTAssertFalse(shared.isCancelled)
        XCTAssertEqual(task.cancelCount.value, 0)
    }

    func testFollowersRejectWithTheSourceError() {
        let task = SharedSourceTask()
        let shared = SharedCancellablePromise(task.promise)
        let follower = shared.follower()
        task.resolver.reject(SharedTestError())
        XCTAssertEqual(follower.error as? SharedTestError, SharedTestError())
        XCTAssertFalse(shared.isCancelled)
    }

    func testEachFollowerIsAChainOfItsOwn() {
        let (task, _, first, second) = makeSharedSourceWithTwoFollowers()
        XCTAssertFalse(first.cancelContext === second.cancelContext)
        XCTAssertFalse(first.cancelContext === task.promise.cancelContext)
    }

    func testAFollowerMadeAfterTheSourceSettledGetsItsResultAtOnce() {
        let shared = CancellablePromise.value(3).shared()
        let follower = shared.follower()
        XCTAssertEqual(follower.value, 3)
        XCTAssertFalse(follower.isCancelled)
        follower.cancel()
        XCTAssertEqual(follower.value, 3, "cancelling after it settled does nothing")
        XCTAssertEqual(shared.follower().value, 3)
    }

    func testABodyThatThrowsRejectsEveryFollower() {
        let shared = SharedCancellablePromise<Int> { () throws -> Promise<Int> in throw SharedTestError() }
        XCTAssertEqual(shared.follower().error as? SharedTestError, SharedTestError())
    }

    func testABodyReturningAPromiseIsShared() {
        let (promise, resolver) = Promise<Int>.pending()
        let shared = SharedCancellablePromise { promise }
        let follower = shared.follower()
        resolver.fulfill(5)
        XCTAssertEqual(follower.value, 5)
    }

    // MARK: Cancelling

    func testCancellingOneFollowerRejectsOnlyItAndTheSourceGoesOn() {
        let (task, shared, first, second) = makeSharedSourceWithTwoFollowers()
        first.cancel()
        XCTAssertEqual(first.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(second.isPending)
        XCTAssertFalse(second.isCancelled)
        XCTAssertEqual(task.cancelCount.value, 0, "a follower still waits")
        XCTAssertEqual(shared.followerCount, 1)
        task.resolver.fulfill(1)
        XCTAssertEqual(second.value, 1)
    }

    func testCancellingTheLastFollowerCancelsTheSourceOnce() {
        let (task, shared, first, second) = makeSharedSourceWithTwoFollowers()
        second.cancel()
        first.cancel()
        XCTAssertEqual(task.cancelCount.value, 1, "cancelled before the last cancel() returned")
        XCTAssertEqual(task.promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(shared.isCancelled)
        first.cancel()
        second.cancel()
        XCTAssertEqual(task.cancelCount.value, 1)
    }

    func testCancellingAStepOfAFollowersChainWithdrawsItsInterest() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let shown = shared.follower().map(on: nil) { $0 * 2 }.done(on: nil) { _ in }
        shown.cancel()
        XCTAssertEqual(task.cancelCount.value, 1)
    }

    func testAFollowerMadeAfterTheWorkWasCancelledGetsTheCancellation() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        shared.follower().cancel()
        let late = shared.follower()
        XCTAssertEqual(late.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(task.cancelCount.value, 1, "the work does not restart")
        task.resolver.fulfill(1)
        XCTAssertEqual(shared.follower().error as? CancellablePromiseError, .cancelled)
    }

    func testCancellingTheSourceElsewhereRejectsEveryFollower() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let follower = shared.follower()
        task.promise.cancel()
        XCTAssertEqual(follower.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(follower.isCancelled, "its own chain was not cancelled")
        XCTAssertTrue(shared.isCancelled)
    }

    func testCancelWithAnErrorRejectsTheFollowerWithIt() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let follower = shared.follower()
        follower.cancel(with: SharedTestError())
        XCTAssertEqual(follower.error as? SharedTestError, SharedTestError())
        XCTAssertEqual(task.cancelCount.value, 1)
    }

    // MARK: Timers

    /// A shared body returning a promise derived from `after` (`after(…).map { … }`) carries no
    /// task: cancelling every follower cancels the shared chain but leaves the timer scheduled.
    func testCancellingTheFollowersOfADerivedTimerLeavesTheTimerScheduled() {
        let scheduler = TestScheduler()
        let shared = SharedCancellablePromise { after(seconds: 1, scheduler: scheduler).map(on: nil) { 5 } }
        let follower = shared.follower()
        follower.cancel()
        XCTAssertTrue(shared.isCancelled)
        XCTAssertEqual(scheduler.pendingCount, 1, "only `after`'s own promise carries the timer")
        scheduler.advance(by: 1)
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    /// `cancellize()` the promise with the task first, then chain: cancelling every follower
    /// reaches the timer and unschedules it, as the init's doc says.
    func testCancellingTheFollowersOfACancellizedTimerChainUnschedulesTheTimer() {
        let scheduler = TestScheduler()
        let shared = SharedCancellablePromise {
            after(seconds: 1, scheduler: scheduler).cancellize().map(on: nil) { 5 }
        }
        let first = shared.follower()
        let second = shared.follower()
        first.cancel()
        XCTAssertEqual(scheduler.pendingCount, 1, "a follower still waits")
        second.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0, "the last follower's cancel unscheduled the timer")
        XCTAssertTrue(shared.isCancelled)
    }

    /// The same chain, not cancelled, fulfils every follower when its time comes.
    func testACancellizedTimerChainFulfilsTheFollowers() {
        let scheduler = TestScheduler()
        let shared = SharedCancellablePromise {
            after(seconds: 1, scheduler: scheduler).cancellize().map(on: nil) { 5 }
        }
        let follower = shared.follower()
        scheduler.advance(by: 1)
        XCTAssertEqual(follower.value, 5)
    }

    // MARK: Abandoning

    /// A fire-and-forget follower (`shared.follower().done { … }`, result not kept) keeps its
    /// interest and runs its `done` when the source settles.
    func testAnAbandonedFollowerKeepsWaitingAndRunsItsDone() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let shown = SendableBox<Int?>(nil)
        weak var weakFollower: CancellablePromise<Int>?
        do {
            let follower = shared.follower()
            weakFollower = follower
            _ = follower.done(on: nil) { shown.value = $0 }
        }
        XCTAssertNil(weakFollower, "the abandoned follower's promise object is freed")
        XCTAssertEqual(task.cancelCount.value, 0, "an abandoned follower does not cancel the source")
        XCTAssertEqual(shared.followerCount, 1, "it still waits")
        XCTAssertFalse(shared.isEnded)
        XCTAssertNil(shown.value)
        task.resolver.fulfill(8)
        XCTAssertEqual(shown.value, 8, "its done ran with the source's value")
        XCTAssertEqual(shared.followerCount, 0)
    }

    /// `shared.follower().asPromise()` waits for the source instead of being rejected at once.
    func testAsPromiseOfAFollowerWaitsForTheSource() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let promise = shared.follower().asPromise()
        XCTAssertTrue(promise.isPending)
        XCTAssertEqual(task.cancelCount.value, 0)
        task.resolver.fulfill(3)
        XCTAssertEqual(promise.value, 3)
    }

    /// Cancelling every kept follower does not cancel work an abandoned follower still waits for.
    func testCancellingTheKeptFollowersDoesNotCancelWorkAnAbandonedOneWaitsFor() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let first = shared.follower()
        let abandoned = FollowerOutcome(shared.follower())
        let second = shared.follower()
        first.cancel()
        second.cancel()
        XCTAssertEqual(first.error as? CancellablePromiseError, .cancelled, "each cancelled follower is rejected")
        XCTAssertEqual(second.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(task.cancelCount.value, 0, "the abandoned follower still waits")
        XCTAssertFalse(shared.isCancelled)
        XCTAssertEqual(shared.followerCount, 1)
        task.resolver.fulfill(2)
        XCTAssertEqual(abandoned.value, 2)
    }

    /// A follower abandoned after the others were made keeps the source from being cancelled,
    /// and followers made later still join and settle with it.
    func testFollowersJoinWorkAnAbandonedFollowerWaitsFor() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let abandoned = FollowerOutcome(shared.follower())
        let late = shared.follower()
        late.cancel()
        XCTAssertEqual(task.cancelCount.value, 0)
        let later = shared.follower()
        XCTAssertEqual(shared.followerCount, 2)
        task.resolver.fulfill(5)
        XCTAssertEqual(abandoned.value, 5)
        XCTAssertEqual(later.value, 5)
    }

    /// An abandoned follower's `ensure` runs once the source settles, with its result.
    func testAnAbandonedFollowersEnsureRunsWhenTheSourceSettles() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let ensured = Counter()
        do {
            _ = shared.follower().ensure(on: nil) { ensured.increment() }
        }
        XCTAssertEqual(ensured.value, 0, "still waiting")
        task.resolver.reject(SharedTestError())
        XCTAssertEqual(ensured.value, 1)
    }

    /// Once a follower is abandoned the shared work lets go of the source: a source nothing else
    /// holds has its cancel closures released uncalled, and its work still settles the follower.
    func testAnAbandonedFollowerLetsTheSharedWorkReleaseTheSource() {
        let cancelCount = Counter()
        let closureReleased = Flag()
        var resolver: Resolver<Int>?
        let shared: SharedCancellablePromise<Int>
        do {
            let probe = DeinitProbe { closureReleased.raise() }
            shared = CancellablePromise<Int> { seal in
                resolver = seal
                return {
                    probe.touch()
                    cancelCount.increment()
                }
            }.shared()
        }
        let kept = shared.follower()
        XCTAssertFalse(closureReleased.value, "the source can still be cancelled through `kept`")
        let abandoned = FollowerOutcome(shared.follower())
        XCTAssertTrue(closureReleased.value, "nothing can cancel the source any more")
        kept.cancel()
        XCTAssertEqual(cancelCount.value, 0)
        resolver?.fulfill(4)
        XCTAssertEqual(abandoned.value, 4)
    }

    /// An abandoned follower of a source that nothing can settle any more is freed with it, as
    /// any abandoned chain is: nothing is kept in a cycle.
    func testAnAbandonedFollowerIsFreedWithASourceNothingCanSettle() {
        weak var weakFollowerPromise: Promise<Int>?
        weak var weakSource: Promise<Int>?
        weak var weakStorage: SharedWorkHost<Int>?
        var resolver: Resolver<Int>?
        do {
            let source = CancellablePromise<Int> { seal in
                resolver = seal
                return {}
            }
            weakSource = source.promise
            let shared = source.shared()
            weakStorage = shared.host
            weakFollowerPromise = shared.follower().promise
        }
        XCTAssertNotNil(weakFollowerPromise, "the source's work can still settle it")
        XCTAssertNotNil(weakStorage)
        XCTAssertNotNil(resolver)
        resolver = nil
        XCTAssertNil(weakSource)
        XCTAssertNil(weakStorage, "the source's completion handler held the shared state")
        XCTAssertNil(weakFollowerPromise, "and the state held the follower's resolver")
    }

    /// A source freed unsettled while the handle is kept ends the shared work: the abandoned
    /// follower waiting on it is freed, and a follower made later is rejected at once with the
    /// cancellation error instead of waiting for ever.
    func testASourceNothingCanSettleEndsTheWorkWhileTheHandleIsKept() {
        weak var weakFollowerPromise: Promise<Int>?
        var resolver: Resolver<Int>?
        let shared = CancellablePromise<Int> { seal in
            resolver = seal
            return {}
        }.shared()
        weakFollowerPromise = shared.follower().promise
        XCTAssertEqual(shared.followerCount, 1, "the abandoned follower waits")
        XCTAssertFalse(shared.isEnded)
        XCTAssertNotNil(resolver)
        resolver = nil
        XCTAssertNil(weakFollowerPromise, "nothing can settle it: it was freed")
        XCTAssertTrue(shared.isEnded)
        XCTAssertEqual(shared.followerCount, 0)
        let late = shared.follower()
        XCTAssertEqual(late.error as? CancellablePromiseError, .cancelled)
    }

    func testAFollowerHeldOnlyThroughItsChainStillWaits() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let context = shared.follower().map(on: nil) { $0 + 1 }.cancelContext
        XCTAssertEqual(shared.followerCount, 1, "its context keeps it cancellable, so it still counts")
        XCTAssertEqual(task.cancelCount.value, 0)
        context.cancel()
        XCTAssertEqual(task.cancelCount.value, 1)
    }

    func testAFollowerStoredInABagWaitsUntilTheBagGoesAway() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        var bag: CancelBag? = CancelBag()
        shared.follower().done(on: nil) { _ in }.store(in: bag!)
        XCTAssertEqual(task.cancelCount.value, 0)
        bag = nil
        XCTAssertEqual(task.cancelCount.value, 1)
    }

    // MARK: The handle

    func testTheHandleIsNotAnInterestAndReleasingItLeavesFollowersWaiting() {
        let task = SharedSourceTask()
        var shared: SharedCancellablePromise<Int>? = task.promise.shared()
        weak let weakShared = shared
        let follower = shared!.follower()
        shared = nil
        XCTAssertNotNil(weakShared, "a follower keeps the work alive")
        XCTAssertEqual(task.cancelCount.value, 0)
        task.resolver.fulfill(4)
        XCTAssertEqual(follower.value, 4)
        XCTAssertNil(weakShared, "nothing holds settled shared work")
    }

    func testReleasingTheHandleBeforeAnyFollowerAbandonsTheSource() {
        weak var weakShared: SharedCancellablePromise<Int>?
        weak var weakSource: Promise<Int>?
        let cancelCount = Counter()
        let closureReleased = Flag()
        var resolver: Resolver<Int>?
        do {
            let probe = DeinitProbe { closureReleased.raise() }
            let source = CancellablePromise<Int> { seal in
                resolver = seal
                return {
                    probe.touch()
                    cancelCount.increment()
                }
            }
            weakSource = source.promise
            let shared = source.shared()
            weakShared = shared
        }
        XCTAssertNil(weakShared)
        XCTAssertTrue(closureReleased.value, "the source's cancel closure is released uncalled")
        XCTAssertEqual(cancelCount.value, 0)
        XCTAssertNotNil(weakSource, "its work can still settle it")
        resolver?.fulfill(1)
        resolver = nil
        XCTAssertNil(weakSource)
    }

    func testSettledSharedWorkHoldsOnlyItsResult() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        weak var weakFollower: CancellablePromise<Int>?
        do {
            let follower = shared.follower()
            weakFollower = follower
            task.resolver.fulfill(9)
            XCTAssertEqual(follower.value, 9)
        }
        XCTAssertNil(weakFollower)
        XCTAssertTrue(task.closureReleased.value, "the source's cancel closure is released once it settled")
        XCTAssertEqual(shared.follower().value, 9)
    }

    // MARK: Bad input and reentrancy

    func testCancellingAFollowerInsideAnotherFollowersHandler() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let second = shared.follower()
        let first = shared.follower().done(on: nil) { _ in second.cancel() }
        task.resolver.fulfill(1)
        XCTAssertNil(first.error)
        XCTAssertTrue(second.isResolved, "settled or cancelled, never left pending")
        XCTAssertEqual(task.cancelCount.value, 0, "a settled source is not cancelled")
    }

    func testCancellingTheLastFollowerInsideTheOtherFollowersCancellationHandler() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let second = shared.follower()
        let first = shared.follower()
        _ = first.catch(on: nil, policy: .allErrors) { _ in second.cancel() }
        first.cancel()
        XCTAssertEqual(task.cancelCount.value, 1)
        XCTAssertEqual(second.error as? CancellablePromiseError, .cancelled)
    }

    func testAFollowerMadeInsideTheSourcesCancelClosure() {
        let madeInside = SendableBox<CancellablePromise<Int>?>(nil)
        let holder = SendableBox<SharedCancellablePromise<Int>?>(nil)
        let shared = CancellablePromise<Int> { _ in
            return { madeInside.value = holder.value?.follower() }
        }.shared()
        holder.value = shared
        runWithoutDeadlock {
            shared.follower().cancel()
        }
        XCTAssertEqual(madeInside.value?.error as? CancellablePromiseError, .cancelled)
        holder.value = nil
    }

    func testAFollowerMadeInsideAFollowersHandlerWhileSettling() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let late = SendableBox<CancellablePromise<Int>?>(nil)
        let first = shared.follower().done(on: nil) { _ in late.value = shared.follower() }
        task.resolver.fulfill(6)
        XCTAssertNil(first.error)
        XCTAssertEqual(late.value?.value, 6)
    }

    // MARK: Cost and bounds

    func testALongLivedSourceStaysBoundedWhileFollowersComeAndGo() {
        let task = SharedSourceTask()
        let shared = task.promise.shared()
        let kept = shared.follower()
        var sample: [WeakFollower] = []
        for round in 0..<100_000 {
            let follower = shared.follower()
            if round % 2 == 0 { follower.cancel() } else { follower.cancelContext.cancel() }
            if round % 10_000 == 0 { sample.append(WeakFollower(follower)) }
        }
        XCTAssertEqual(shared.followerCount, 1)
        XCTAssertEqual(sample.filter { $0.follower != nil }.count, 0, "every follower that left was freed")
        XCTAssertEqual(task.cancelCount.value, 0)
        task.resolver.fulfill(1)
        XCTAssertEqual(kept.value, 1)
    }

    func testFollowersLeavingInAnyOrderCostTheSame() {
        // Newest first, oldest first and interleaved: each must leave without scanning.
        for order in 0..<3 {
            let task = SharedSourceTask()
            let shared = task.promise.shared()
            let keep = shared.follower()
            var followers = (0..<20_000).map { _ in shared.follower() }
            switch order {
            case 0: followers.reverse()
            case 1: break
            default:
                followers = followers.enumerated().sorted { ($0.offset % 7, $0.offset) < ($1.offset % 7, $1.offset) }
                    .map(\.element)
            }
            for follower in followers { follower.cancel() }
            XCTAssertEqual(shared.followerCount, 1)
            XCTAssertEqual(task.cancelCount.value, 0)
            keep.cancel()
            XCTAssertEqual(task.cancelCount.value, 1)
        }
    }

    /// 100,000 fire-and-forget followers of one source all run their `done` when it settles, and
    /// nothing of them is kept once it settled. (Its cost per follower is the benchmark
    /// package's to measure, not this test's.)
    func testAHundredThousandAbandonedFollowersSettleWithTheSourceAndNothingIsKept() {
        settleAbandonedFollowers(100_000)
    }

    /// Makes `count` fire-and-forget followers of one source, checks they all wait and run their
    /// `done` when it settles, with nothing kept afterwards.
    private func settleAbandonedFollowers(_ count: Int, file: StaticString = #filePath, line: UInt = #line) {
        let task = SharedSourceTask()
        var shared: SharedCancellablePromise<Int>? = task.promise.shared()
        weak let weakStorage = shared?.host
        let shown = Counter()
        var sample: [WeakPromise] = []
        for index in 0..<count {
            let follower = shared!.follower()
            _ = follower.done(on: nil) { _ in shown.increment() }
            if index % (count / 10) == 0 { sample.append(WeakPromise(follower.promise)) }
        }
        XCTAssertEqual(shared?.followerCount, count, "every abandoned follower waits", file: file, line: line)
        XCTAssertEqual(
            sample.filter { $0.promise != nil }.count, sample.count, "the shared state holds them", file: file,
            line: line)
        XCTAssertEqual(task.cancelCount.value, 0, file: file, line: line)
        shared = nil
        XCTAssertNotNil(weakStorage, "the source's completion handler holds the followers", file: file, line: line)
        task.resolver.fulfill(1)
        XCTAssertEqual(shown.value, count, "every done ran", file: file, line: line)
        XCTAssertEqual(
            sample.filter { $0.promise != nil }.count, 0, "nothing is kept once the source settled", file: file,
            line: line)
        XCTAssertNil(weakStorage, file: file, line: line)
    }

    struct WeakPromise {
        weak var promise: Promise<Int>?
        init(_ promise: Promise<Int>) { self.promise = promise }
    }

    struct WeakFollower {
        weak var follower: CancellablePromise<Int>?
        init(_ follower: CancellablePromise<Int>) { self.follower = follower }
    }
}
