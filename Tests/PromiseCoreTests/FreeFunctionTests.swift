import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// `firstly`, `after`, `hang` and `DispatchQueue.async(.promise)`.
final class FreeFunctionTests: XCTestCase {
    // MARK: firstly

    func testFirstlyRunsTheBodyAtOnceAndFollowsItsPromise() {
        var ran = false
        let (inner, r) = Promise<Int>.pending()
        let p: Promise<Int> = firstly { () -> Promise<Int> in
            ran = true
            return inner
        }
        XCTAssertTrue(ran)
        XCTAssertTrue(p.isPending)
        r.fulfill(3)
        XCTAssertEqual(p.value, 3)
    }

    func testFirstlyThrowingRejects() {
        let p: Promise<Int> = firstly { () throws -> Promise<Int> in throw TestError(code: 1) }
        XCTAssertEqual(p.error as? TestError, TestError(code: 1))
    }

    func testFirstlyWithAGuaranteeBodyGivesAGuarantee() {
        let g: Guarantee<Int> = firstly { Guarantee.value(2) }
        XCTAssertEqual(g.value, 2)
    }

    func testFirstlyAcceptsAThrowingBodyReturningAGuarantee() {
        let p: Promise<Int> = firstly { () throws -> Guarantee<Int> in Guarantee.value(4) }
        XCTAssertEqual(p.value, 4)
    }

    // MARK: after

    // Real time: the default scheduler is the wall clock.
    func testAfterSecondsOnTheDefaultSchedulerFiresNoEarlierThanTheDelay() {
        let start = DispatchTime.now()
        let g = after(seconds: 0.05)
        XCTAssertTrue(g.isPending)
        // Real clock: the default scheduler is the wall clock, and this checks it waits the delay.
        XCTAssertNotNil(waitForResult(g, seconds: 5))
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
        XCTAssertGreaterThanOrEqual(elapsed, 0.05)
        XCTAssertLessThan(elapsed, 2.05)
    }

    // Real time: the default scheduler is the wall clock.
    func testAfterIntervalOnTheDefaultSchedulerFires() {
        XCTAssertNotNil(waitForResult(after(.milliseconds(10)), seconds: 5))
        XCTAssertNotNil(waitForResult(after(seconds: -1), seconds: 5), "a negative delay fires at once")
    }

    func testAfterResolvesExactlyAtItsDeadlineOnTheSchedulersThread() {
        let scheduler = TestScheduler()
        let g = after(seconds: 0.2, scheduler: scheduler)
        let thread = SendableBox<Thread?>(nil)
        g.done(on: nil) { thread.value = Thread.current }
        scheduler.advance(by: 0.199)
        XCTAssertTrue(g.isPending)
        scheduler.advance(by: 0.001)
        XCTAssertTrue(g.isResolved, "resolved synchronously by advance")
        XCTAssertTrue(thread.value === Thread.current, "on: nil handlers run on the advancing thread")
    }

    func testAfterIntervalOnAScheduler() {
        let scheduler = TestScheduler()
        let g = after(.milliseconds(150), scheduler: scheduler)
        scheduler.advance(by: 0.149)
        XCTAssertTrue(g.isPending)
        scheduler.advance(by: 0.001)
        XCTAssertTrue(g.isResolved)
    }

    func testAfterZeroOrNegativeSecondsResolvesAtTheNextAdvanceNotSynchronously() {
        let scheduler = TestScheduler()
        let zero = after(seconds: 0, scheduler: scheduler)
        let negative = after(seconds: -1, scheduler: scheduler)
        XCTAssertTrue(zero.isPending)
        XCTAssertTrue(negative.isPending)
        scheduler.advance()
        XCTAssertTrue(zero.isResolved)
        XCTAssertTrue(negative.isResolved)
    }

    func testAfterInfiniteNaNOrNeverSecondsNeverResolvesAndSchedulesNothing() {
        let scheduler = TestScheduler()
        let never = [
            after(seconds: .infinity, scheduler: scheduler), after(seconds: .nan, scheduler: scheduler),
            after(.never, scheduler: scheduler),
        ]
        XCTAssertEqual(scheduler.pendingCount, 0, "NaN counts as infinitely many seconds")
        scheduler.advance(by: 1e9)
        XCTAssertTrue(never.allSatisfy { $0.isPending })
        // The default scheduler follows the same rule (Dispatch's: NaN seconds are forever).
        XCTAssertTrue(after(seconds: .nan).isPending)
    }

    func testAfterAttachesItsTimer() {
        let g = after(seconds: 30, scheduler: TestScheduler())
        XCTAssertNotNil(g.promise._attachedCancellation)
    }

    func testCancellingTheAttachedTimerOfAfterUnschedulesItAndReleasesThePromise() {
        let scheduler = TestScheduler()
        weak var weakPromise: Promise<Void>?
        do {
            let g = after(.milliseconds(50), scheduler: scheduler)
            weakPromise = g.promise
            g.promise._attachedCancellation?()
            XCTAssertEqual(scheduler.pendingCount, 0, "nothing left scheduled")
        }
        XCTAssertNil(weakPromise, "the unscheduled work released the promise at once")
        scheduler.run()
    }

    func testCancellingAfterOnTheDefaultSchedulerReleasesThePromiseAtOnce() {
        weak var weakPromise: Promise<Void>?
        do {
            let g = after(seconds: 600)
            weakPromise = g.promise
            g.promise._attachedCancellation?()
        }
        XCTAssertNil(weakPromise, "the dispatch timer was cancelled and its handler released")
    }

    func testFiredAfterReleasesItsTimer() {
        let scheduler = TestScheduler()
        let g = after(.milliseconds(10), scheduler: scheduler)
        scheduler.advance(by: 0.01)
        XCTAssertTrue(g.isResolved)
        XCTAssertNil(g.promise._attachedCancellation)
    }

    // MARK: hang

    func testHangOnTheMainThreadRunsTheMainQueueUntilSettled() throws {
        guard Thread.isMainThread else { throw XCTSkip("the test runs off the main thread") }
        // The value is produced by a main-queue handler: hang must keep the main queue running.
        let p = Promise.value(1).map { $0 + 1 }
        XCTAssertEqual(try hang(p), 2)
    }

    func testHangOnTheMainThreadThrowsTheRejection() throws {
        guard Thread.isMainThread else { throw XCTSkip("the test runs off the main thread") }
        let p = Promise.value(1).map { _ -> Int in throw TestError(code: 7) }
        XCTAssertThrowsError(try hang(p)) { XCTAssertEqual($0 as? TestError, TestError(code: 7)) }
    }

    func testHangOffTheMainThreadBlocksUntilSettled() {
        let (p, r) = Promise<Int>.pending()
        let result = Locked<Int?>(nil)
        let done = Handshake()
        DispatchQueue.global().async {
            let v = try? hang(p)
            result.withLock { $0 = v }
            done.signal()
        }
        runWhenAwaited(p) { r.fulfill(8) }
        XCTAssertTrue(done.wait())
        XCTAssertEqual(result.withLock { $0 }, 8)
    }

    // MARK: DispatchQueue.async(.promise)

    func testAsyncPromiseRunsTheBodyOnTheQueue() {
        let q = TaggedQueue("async.promise")
        // The compiler treats closures passed to any `DispatchQueue.async` as `@Sendable`
        // (as PromiseKit's own), so the capture must be thread-safe.
        let onQueue = Locked(false)
        let p: Promise<Int> = q.queue.async(.promise) { () throws -> Int in
            onQueue.withLock { $0 = q.isCurrent }
            return 5
        }
        XCTAssertEqual(waitForValue(p), 5)
        XCTAssertTrue(onQueue.withLock { $0 })
    }

    func testAsyncPromiseThrowingRejects() {
        let p = DispatchQueue.global().async(.promise) { () throws -> Int in throw TestError(code: 2) }
        XCTAssertEqual(waitForError(p) as? TestError, TestError(code: 2))
    }

    func testAsyncPromiseWithANonThrowingBodyGivesAGuarantee() {
        let q = TaggedQueue("async.guarantee")
        let g: Guarantee<Bool> = q.queue.async(.promise) { q.isCurrent }
        XCTAssertEqual(waitForValue(g), true)
    }

    func testAsyncPromiseHonoursTheGroup() {
        let group = DispatchGroup()
        let p = DispatchQueue.global().async(.promise, group: group) { () -> Int in 1 }
        // Real clock: the group is the API under test; the deadline turns a missed leave into a failure.
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(p.value, 1)
    }
}
