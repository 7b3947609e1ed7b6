import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// Shared work under concurrency: followers cancelled, dropped and joining from 8 threads while
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
                // Leaves in a different order each round: cancelled or abandoned.
                let follower = initial[(index + round) % Self.threads]
                if (index + round) % 3 == 0 { follower.cancelContext.cancel() } else { follower.cancel() }
                // Joins while the others leave, then leaves again (cancelled or dropped).
                let late = shared.follower()
                joined.append(FollowerOutcome(late))
                if index % 2 == 0 { late.cancel() }
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
                    if generator.chance(0.5) { leaving.cancel() }  // else abandoned
                }
            }
            for follower in held { follower.cancel() }
        }
        XCTAssertEqual(coalescer.inFlightCount, 0)
        for task in tasks.all {
            XCTAssertEqual(task.cancelCount.value, 1, "every piece of work was cancelled once, by its last follower")
        }
        XCTAssertEqual(joinedEndedWork.value, 0, "a request joined work that had ended")
        XCTAssertEqual(delivered.value, 0)
    }
}
