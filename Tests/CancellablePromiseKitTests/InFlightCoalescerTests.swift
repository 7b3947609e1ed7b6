import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// `InFlightCoalescer`: equal requests share the work in flight; the key leaves when the work
// settles or every follower was cancelled; an abandoned request keeps waiting; a request never
// joins cancelled work.

final class InFlightCoalescerTests: XCTestCase {
    /// Starts a `SharedSourceTask` per call and keeps them, in order.
    private final class Starter: @unchecked Sendable {
        private let tasks = Recorder<SharedSourceTask>()

        func start() -> CancellablePromise<Int> {
            let task = SharedSourceTask()
            tasks.append(task)
            return task.promise
        }

        var started: [SharedSourceTask] { tasks.all }
    }

    func testASecondRequestForTheSameKeyJoinsTheWorkInFlight() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let first = coalescer.promise(for: "a", start: starter.start)
        let second = coalescer.promise(for: "a", start: starter.start)
        XCTAssertEqual(starter.started.count, 1, "the work started once")
        XCTAssertEqual(coalescer.inFlightCount, 1)
        XCTAssertEqual(coalescer.followerCount(for: "a"), 2)
        XCTAssertFalse(first.cancelContext === second.cancelContext, "each request is a chain of its own")
        starter.started[0].resolver.fulfill(8)
        XCTAssertEqual(first.value, 8)
        XCTAssertEqual(second.value, 8)
    }

    func testDifferentKeysDoNotShare() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let a = coalescer.promise(for: "a", start: starter.start)
        let b = coalescer.promise(for: "b", start: starter.start)
        XCTAssertEqual(starter.started.count, 2)
        XCTAssertEqual(coalescer.inFlightCount, 2)
        a.cancel()
        XCTAssertEqual(starter.started[0].cancelCount.value, 1)
        XCTAssertEqual(starter.started[1].cancelCount.value, 0)
        XCTAssertTrue(b.isPending)
    }

    func testTheKeyLeavesWhenTheWorkSettlesAndTheNextRequestStartsAnew() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let first = coalescer.promise(for: "a", start: starter.start)
        starter.started[0].resolver.fulfill(1)
        XCTAssertEqual(first.value, 1)
        XCTAssertEqual(coalescer.inFlightCount, 0, "nothing is cached beyond work in flight")
        let second = coalescer.promise(for: "a", start: starter.start)
        XCTAssertEqual(starter.started.count, 2)
        starter.started[1].resolver.fulfill(2)
        XCTAssertEqual(second.value, 2)
    }

    func testCancellingOneRequestLeavesTheWorkForTheOthers() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let first = coalescer.promise(for: "a", start: starter.start)
        let second = coalescer.promise(for: "a", start: starter.start)
        first.cancel()
        XCTAssertEqual(first.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(starter.started[0].cancelCount.value, 0)
        XCTAssertEqual(coalescer.followerCount(for: "a"), 1)
        starter.started[0].resolver.fulfill(3)
        XCTAssertEqual(second.value, 3)
    }

    func testTheLastRequestCancelledCancelsTheWorkAndTheNextRequestStartsAnew() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let first = coalescer.promise(for: "a", start: starter.start)
        let second = coalescer.promise(for: "a", start: starter.start)
        first.cancel()
        second.cancel()
        XCTAssertEqual(starter.started[0].cancelCount.value, 1)
        XCTAssertEqual(coalescer.inFlightCount, 0)
        let third = coalescer.promise(for: "a", start: starter.start)
        XCTAssertEqual(starter.started.count, 2, "never joins cancelled work")
        XCTAssertTrue(third.isPending)
        starter.started[1].resolver.fulfill(4)
        XCTAssertEqual(third.value, 4)
    }

    /// A fire-and-forget request (`promise(for:start:).done { … }`, result not kept) keeps the
    /// work in flight and runs its `done` when the work settles.
    func testAnAbandonedRequestKeepsTheWorkAndRunsItsDone() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let shown = SendableBox<Int?>(nil)
        weak var weakFollower: CancellablePromise<Int>?
        do {
            let follower = coalescer.promise(for: "a", start: starter.start)
            weakFollower = follower
            _ = follower.done(on: nil) { shown.value = $0 }
        }
        XCTAssertNil(weakFollower)
        XCTAssertEqual(starter.started[0].cancelCount.value, 0, "an abandoned request cancels nothing")
        XCTAssertEqual(coalescer.inFlightCount, 1)
        XCTAssertEqual(coalescer.followerCount(for: "a"), 1)
        starter.started[0].resolver.fulfill(6)
        XCTAssertEqual(shown.value, 6, "its done ran")
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    /// Cancelling every kept request does not cancel work an abandoned request waits for, and a
    /// new request joins that work.
    func testCancellingTheKeptRequestsDoesNotCancelWorkAnAbandonedOneWaitsFor() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let kept = coalescer.promise(for: "a", start: starter.start)
        let abandoned = FollowerOutcome(coalescer.promise(for: "a", start: starter.start))
        kept.cancel()
        XCTAssertEqual(kept.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(starter.started[0].cancelCount.value, 0)
        XCTAssertEqual(coalescer.inFlightCount, 1)
        let joining = coalescer.promise(for: "a", start: starter.start)
        XCTAssertEqual(starter.started.count, 1, "the new request joins the work in flight")
        joining.cancel()
        XCTAssertEqual(starter.started[0].cancelCount.value, 0)
        starter.started[0].resolver.fulfill(2)
        XCTAssertEqual(abandoned.value, 2)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    /// A request abandoned while `start` runs keeps the work: the work is not cancelled when the
    /// others are, and settles the abandoned request.
    func testARequestAbandonedWhileStartRunsKeepsTheWork() {
        let coalescer = InFlightCoalescer<String, Int>()
        let task = SharedSourceTask()
        let abandoned = SendableBox<FollowerOutcome?>(nil)
        let first = coalescer.promise(for: "a") { () -> CancellablePromise<Int> in
            abandoned.value = FollowerOutcome(coalescer.promise(for: "a") { CancellablePromise<Int>.pending().promise })
            return task.promise
        }
        first.cancel()
        XCTAssertEqual(task.cancelCount.value, 0)
        XCTAssertEqual(coalescer.inFlightCount, 1)
        task.resolver.fulfill(9)
        XCTAssertEqual(abandoned.value?.value, 9)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    /// Work that nothing can settle any more (its source was freed unsettled while only an
    /// abandoned request waited) leaves the coalescer with that request, and the next request
    /// starts anew.
    func testWorkNothingCanSettleLeavesTheCoalescer() {
        let coalescer = InFlightCoalescer<String, Int>()
        var resolver: Resolver<Int>?
        weak var weakFollowerPromise: Promise<Int>?
        weakFollowerPromise =
            coalescer.promise(for: "a") { () -> CancellablePromise<Int> in
                CancellablePromise<Int> { seal in
                    resolver = seal
                    return {}
                }
            }.promise
        XCTAssertEqual(coalescer.inFlightCount, 1, "the abandoned request waits")
        XCTAssertNotNil(weakFollowerPromise)
        XCTAssertNotNil(resolver)
        resolver = nil
        XCTAssertEqual(coalescer.inFlightCount, 0, "nothing can settle the work: the key left")
        XCTAssertNil(weakFollowerPromise, "the abandoned request was freed with it")
        let starter = Starter()
        let next = coalescer.promise(for: "a", start: starter.start)
        XCTAssertEqual(starter.started.count, 1, "the next request starts anew")
        starter.started[0].resolver.fulfill(1)
        XCTAssertEqual(next.value, 1)
    }

    /// The key leaves before the followers are settled: a request made by a follower's handler
    /// as the work settles starts the work anew, and it stays in flight.
    func testARequestMadeWhileTheWorkSettlesStartsItAnew() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let inFlightWhenSettled = SendableBox<Int?>(nil)
        let again = SendableBox<CancellablePromise<Int>?>(nil)
        let first = coalescer.promise(for: "a", start: starter.start)
        first.done(on: nil) { _ in
            inFlightWhenSettled.value = coalescer.inFlightCount
            again.value = coalescer.promise(for: "a", start: starter.start)
        }.cauterize()
        starter.started[0].resolver.fulfill(1)
        XCTAssertEqual(inFlightWhenSettled.value, 0, "the key left before the followers settled")
        XCTAssertEqual(starter.started.count, 2, "the request started the work anew")
        XCTAssertEqual(coalescer.inFlightCount, 1)
        XCTAssertEqual(coalescer.followerCount(for: "a"), 1)
        XCTAssertTrue(again.value?.isPending ?? false)
        starter.started[1].resolver.fulfill(2)
        XCTAssertEqual(again.value?.value, 2)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    func testAStartThatThrowsRejectsTheRequestAndLeavesNothing() {
        let coalescer = InFlightCoalescer<String, Int>()
        let promise = coalescer.promise(for: "a") { () throws -> Promise<Int> in throw SharedTestError() }
        XCTAssertEqual(promise.error as? SharedTestError, SharedTestError())
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    func testAStartReturningASettledPromiseSettlesAtOnce() {
        let coalescer = InFlightCoalescer<String, Int>()
        XCTAssertEqual(coalescer.promise(for: "a") { Promise.value(5) }.value, 5)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    func testAStartThatRequestsAnotherKeyWorks() {
        let coalescer = InFlightCoalescer<String, Int>()
        let starter = Starter()
        let outer = coalescer.promise(for: "outer") {
            coalescer.promise(for: "inner", start: starter.start).map(on: nil) { $0 + 1 }
        }
        XCTAssertEqual(coalescer.inFlightCount, 2)
        starter.started[0].resolver.fulfill(1)
        XCTAssertEqual(outer.value, 2)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    func testCancellingInsideTheWorksCancelClosureAndRequestingAgain() {
        let coalescer = InFlightCoalescer<String, Int>()
        let again = SendableBox<CancellablePromise<Int>?>(nil)
        let starts = Counter()
        let starter = Starter()
        let first = coalescer.promise(for: "a") { () -> CancellablePromise<Int> in
            starts.increment()
            return CancellablePromise<Int> { _ in
                { again.value = coalescer.promise(for: "a", start: starter.start) }
            }
        }
        runWithoutDeadlock { first.cancel() }
        XCTAssertEqual(starts.value, 1)
        XCTAssertNotNil(again.value)
        XCTAssertTrue(again.value?.isPending ?? false, "a request made inside the cancel closure starts anew")
        again.value?.cancel()
        XCTAssertEqual(starter.started.first?.cancelCount.value, 1)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    // MARK: Lifetime and bounds

    func testTheCoalescerIsNotAnInterest() {
        var coalescer: InFlightCoalescer<String, Int>? = InFlightCoalescer()
        weak let weakCoalescer = coalescer
        let starter = Starter()
        let follower = coalescer!.promise(for: "a", start: starter.start)
        coalescer = nil
        XCTAssertEqual(starter.started[0].cancelCount.value, 0, "releasing the coalescer cancels nothing")
        starter.started[0].resolver.fulfill(6)
        XCTAssertEqual(follower.value, 6)
        XCTAssertNil(weakCoalescer, "nothing holds it once its work settled")
    }

    /// Work in flight does not keep the coalescer alive: it is freed when released, and its
    /// work still settles its followers.
    func testWorkInFlightDoesNotKeepTheCoalescer() {
        var coalescer: InFlightCoalescer<String, Int>? = InFlightCoalescer()
        weak let weakCoalescer = coalescer
        let starter = Starter()
        let follower = coalescer!.promise(for: "a", start: starter.start)
        let other = coalescer!.promise(for: "a", start: starter.start)
        coalescer = nil
        XCTAssertNil(weakCoalescer, "nothing holds the coalescer")
        other.cancel()
        XCTAssertEqual(starter.started[0].cancelCount.value, 0)
        starter.started[0].resolver.fulfill(7)
        XCTAssertEqual(follower.value, 7)
    }

    func testEntriesAreFreedOnceTheirWorkSettledOrWasCancelled() {
        let coalescer = InFlightCoalescer<String, Int>()
        weak var settledSource: Promise<Int>?
        weak var cancelledSource: Promise<Int>?
        do {
            let task = SharedSourceTask()
            settledSource = task.promise.promise
            let follower = coalescer.promise(for: "settled") { task.promise }
            task.resolver.fulfill(1)
            XCTAssertEqual(follower.value, 1)
        }
        do {
            let task = SharedSourceTask()
            cancelledSource = task.promise.promise
            coalescer.promise(for: "cancelled") { task.promise }.cancel()
            XCTAssertEqual(task.cancelCount.value, 1)
        }
        XCTAssertNil(settledSource)
        XCTAssertNil(cancelledSource)
        XCTAssertEqual(coalescer.inFlightCount, 0)
    }

    func testALongLivedCoalescerStaysBoundedOverManyRounds() {
        let coalescer = InFlightCoalescer<Int, Int>()
        var sample: [SharedCancellablePromiseTests.WeakFollower] = []
        var tasksStarted = 0
        for round in 0..<100_000 {
            let key = round % 16
            var task: SharedSourceTask?
            do {
                let first = coalescer.promise(for: key) { () -> CancellablePromise<Int> in
                    tasksStarted += 1
                    task = SharedSourceTask()
                    return task!.promise
                }
                let second = coalescer.promise(for: key) { CancellablePromise<Int>.pending().promise }
                switch round % 3 {
                case 0:
                    first.cancel()
                    second.cancel()
                case 1:
                    task?.resolver.fulfill(round)
                default:
                    break  // both abandoned: they wait for the work
                }
                if round % 10_000 == 0 { sample.append(.init(first)) }
            }
            task?.resolver.fulfill(round)  // settles work abandoned requests wait for
        }
        XCTAssertEqual(tasksStarted, 100_000, "every round's work ended before the next round")
        XCTAssertEqual(coalescer.inFlightCount, 0)
        XCTAssertEqual(sample.filter { $0.follower != nil }.count, 0, "every follower was freed")
    }
}
