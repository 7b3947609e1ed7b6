import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// Shared work under concurrency: followers cancelled, abandoned and joining from 8 threads while
// the source settles; and a request for a key racing the cancellation of its last follower.
// Every check counts work (cancel closures run, values delivered); nothing waits on time.

final class SharedWorkStressTests: XCTestCase {
    private static let threads = 8
    private static let rounds = 2_000

    private enum Mode: CaseIterable {
        /// A witness follower never leaves: the source must never be cancelled.
        case witness
        /// Every follower leaves: the source is cancelled exactly once.
        case allLeave
        /// Every follower leaves while another thread settles the source.
        case settleRaces
    }

    func testFollowersLeavingAndJoiningFromEightThreadsCancelTheSourceExactlyOnceOnlyWhenNoneWaits() {
        for round in 0..<Self.rounds {
            let mode = Mode.allCases[round % Mode.allCases.count]
            let task = SharedSourceTask()
            let shared = task.promise.shared()
            let witness = mode == .witness ? shared.follower() : nil
            let initial = (0..<Self.threads).map { _ in shared.follower() }
            let outcomes = initial.map(FollowerOutcome.init)
            let joined = Recorder<FollowerOutcome>()
            DispatchQueue.concurrentPerform(iterations: Self.threads) { index in
                if mode == .settleRaces && index == 0 { task.resolver.fulfill(round) }
                // Leaves in a different order each round, by a cancel of its own or of its chain.
                let follower = initial[(index + round) % Self.threads]
                if (index + round) % 3 == 0 { follower.cancelContext.cancel() } else { follower.cancel() }
                // Joins while the others leave, then leaves again.
                let late = shared.follower()
                joined.append(FollowerOutcome(late))
                if index % 2 == 0 { late.cancel() } else { late.cancelContext.cancel() }
            }
            let cancels = task.cancelCount.value
            switch mode {
            case .witness:
                XCTAssertEqual(cancels, 0, "round \(round): cancelled while the witness waited")
                XCTAssertEqual(shared.followerCount, 1, "round \(round)")
                task.resolver.fulfill(round)
                XCTAssertEqual(witness?.value, round)
            case .allLeave:
                XCTAssertEqual(cancels, 1, "round \(round): the source is cancelled exactly once")
                XCTAssertTrue(shared.isCancelled)
            case .settleRaces:
                XCTAssertLessThanOrEqual(cancels, 1, "round \(round)")
                XCTAssertEqual(
                    cancels == 1, task.promise.isRejected, "round \(round): cancelled only if it had not settled")
                if cancels == 0 {
                    XCTAssertEqual(task.promise.value, round)
                }
            }
            XCTAssertEqual(shared.followerCount, 0, "round \(round)")
            for outcome in outcomes + joined.all {
                XCTAssertFalse(outcome.isPending, "round \(round): a follower was left pending")
                if cancels == 1 {
                    XCTAssertNil(outcome.value, "round \(round): a value after the source was cancelled")
                }
            }
            withExtendedLifetime(initial) {}
        }
    }

    /// Followers abandoned on some threads while others are cancelled, join and the source
    /// settles: the source is never cancelled (an abandoned follower waits), every abandoned
    /// follower gets the value, and every cancelled one was rejected with the cancellation
    /// unless the value came first.
    func testAbandonedFollowersRacingCancelsFromEightThreadsKeepTheWorkAndAllSettle() {
        for round in 0..<Self.rounds {
            let task = SharedSourceTask()
            let shared = task.promise.shared()
            let settleRaces = round % 2 == 1
            let holders = (0..<Self.threads).map { _ in SendableBox<CancellablePromise<Int>?>(shared.follower()) }
            let outcomes = holders.map { FollowerOutcome($0.value!) }
            let abandonedLate = Recorder<FollowerOutcome>()
            let cancelledLate = Recorder<FollowerOutcome>()
            DispatchQueue.concurrentPerform(iterations: Self.threads) { index in
                if settleRaces && index == 3 { task.resolver.fulfill(round) }
                let holder = holders[(index + round) % Self.threads]
                if index % 2 == 0 { holder.value?.cancel() }
                holder.value = nil  // abandoned, unless it was cancelled just before
                let late = shared.follower()
                if index % 3 == 0 {
                    cancelledLate.append(FollowerOutcome(late))
                    late.cancel()
                } else {
                    abandonedLate.append(FollowerOutcome(late))
                }
            }
            XCTAssertEqual(task.cancelCount.value, 0, "round \(round): cancelled while an abandoned follower waited")
            task.resolver.fulfill(round)
            XCTAssertEqual(shared.followerCount, 0, "round \(round)")
            for (index, outcome) in outcomes.enumerated() {
                let abandoned = (0..<Self.threads).contains { ($0 + round) % Self.threads == index && $0 % 2 == 1 }
                if abandoned {
                    XCTAssertEqual(outcome.value, round, "round \(round): abandoned follower \(index)")
                } else {
                    XCTAssertTrue(outcome.isCancellation || outcome.value == round, "round \(round)")
                }
            }
            for outcome in abandonedLate.all {
                XCTAssertEqual(outcome.value, round, "round \(round): an abandoned late follower")
            }
            for outcome in cancelledLate.all {
                XCTAssertTrue(outcome.isCancellation || outcome.value == round, "round \(round)")
            }
        }
    }

    func testARequestRacingTheLastCancellationSharesTheWorkOrStartsItAnew() {
        for round in 0..<Self.rounds {
            let coalescer = InFlightCoalescer<Int, Int>()
            let tasks = Recorder<SharedSourceTask>()
            let start = { @Sendable () -> CancellablePromise<Int> in
                let task = SharedSourceTask()
                tasks.append(task)
                return task.promise
            }
            let initial = (0..<Self.threads).map { _ in coalescer.promise(for: 1, start: start) }
            let later = Recorder<CancellablePromise<Int>>()
            DispatchQueue.concurrentPerform(iterations: Self.threads) { index in
                initial[(index + round) % Self.threads].cancel()
                later.append(coalescer.promise(for: 1, start: start))
            }
            let started = tasks.all
            let live = started.filter { $0.cancelCount.value == 0 }
            XCTAssertEqual(live.count, 1, "round \(round): exactly one piece of work is in flight")
            XCTAssertTrue(live.first === started.last, "round \(round): every older piece of work was cancelled")
            XCTAssertEqual(coalescer.inFlightCount, 1)
            XCTAssertEqual(coalescer.followerCount(for: 1), Self.threads)
            for follower in later.all {
                XCTAssertTrue(follower.isPending, "round \(round): a request waits on cancelled work")
            }
            live.first?.resolver.fulfill(round)
            for follower in later.all {
                XCTAssertEqual(follower.value, round, "round \(round)")
            }
            XCTAssertEqual(coalescer.inFlightCount, 0)
        }
    }

    func testRequestsForFewKeysFromEightThreadsNeverShareCancelledWork() {
        let coalescer = InFlightCoalescer<Int, Int>()
        let tasks = Recorder<SharedSourceTask>()
        let delivered = Counter()
        let abandoned = Counter()
        let joinedEndedWork = Counter()
        DispatchQueue.concurrentPerform(iterations: Self.threads) { thread in
            var generator = SeededGenerator(seed: UInt64(thread))
            var held: [CancellablePromise<Int>] = []
            for _ in 0..<2_000 {
                let key = Int.random(in: 0..<4, using: &generator)
                let follower = coalescer.promise(for: key) { () -> CancellablePromise<Int> in
                    let task = SharedSourceTask()
                    tasks.append(task)
                    return task.promise
                }
                // Only this thread can make this follower leave, so it must be waiting.
                if !follower.isPending { joinedEndedWork.increment() }
                follower.pipe { if case .fulfilled = $0 { delivered.increment() } }
                held.append(follower)
                if held.count > 3 {
                    let leaving = held.remove(at: Int.random(in: 0..<held.count, using: &generator))
                    if generator.chance(0.5) { leaving.cancel() } else { abandoned.increment() }
                }
            }
            for follower in held { follower.cancel() }
        }
        // Work with an abandoned follower is still in flight; the rest was cancelled.
        let inFlight = tasks.all.filter { $0.cancelCount.value == 0 }
        XCTAssertEqual(coalescer.inFlightCount, inFlight.count)
        for task in tasks.all {
            XCTAssertLessThanOrEqual(task.cancelCount.value, 1, "a piece of work was cancelled twice")
        }
        XCTAssertEqual(delivered.value, 0)
        for task in inFlight { task.resolver.fulfill(1) }
        XCTAssertEqual(coalescer.inFlightCount, 0)
        XCTAssertEqual(joinedEndedWork.value, 0, "a request joined work that had ended")
        XCTAssertEqual(delivered.value, abandoned.value, "every abandoned follower got its work's value")
    }
}
