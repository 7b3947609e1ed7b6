import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

// The real schedulers: `DispatchScheduler` (the default) and `ClockScheduler`. These tests
// wait for real time, briefly: they check the wall clock itself.

final class SchedulerTests: XCTestCase {
    func testDispatchSchedulerRunsWorkOnItsQueueAfterTheDelay() {
        let queue = TaggedQueue("dispatch-scheduler")
        let scheduler = DispatchScheduler(queue: queue.queue)
        let ran = Handshake()
        let start = scheduler.now
        let elapsed = SendableBox<TimeInterval>(0)
        let onQueue = Flag()
        _ = scheduler.schedule(after: 0.02) {
            elapsed.value = scheduler.now - start
            if queue.isCurrent { onQueue.raise() }
            ran.signal()
        }
        // Real clock: the scheduler under test runs on the wall clock.
        XCTAssertTrue(ran.wait(seconds: 5))
        XCTAssertGreaterThanOrEqual(elapsed.value, 0.02)
        XCTAssertTrue(onQueue.value)
    }

    func testDispatchSchedulerCancelReleasesTheWorkAtOnce() {
        weak var weakProbe: SchedulerProbe?
        let work: any ScheduledWork
        do {
            let probe = SchedulerProbe()
            weakProbe = probe
            work = DispatchScheduler.global.schedule(after: 600) { probe.touch() }
        }
        XCTAssertNotNil(weakProbe)
        work.cancel()
        XCTAssertNil(weakProbe, "the dispatch timer was cancelled and released its work")
        work.cancel()
    }

    func testDispatchSchedulerNeverRunsInfiniteOrNaNDelays() {
        weak var weakProbe: SchedulerProbe?
        do {
            let probe = SchedulerProbe()
            weakProbe = probe
            _ = DispatchScheduler.global.schedule(after: .nan) { probe.touch() }
            _ = DispatchScheduler.global.schedule(after: .infinity) { probe.touch() }
        }
        XCTAssertNil(weakProbe, "never-due work is not kept")
    }

    func testDispatchSchedulerNowIsUptime() {
        let before = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
        let now = DispatchScheduler.global.now
        XCTAssertGreaterThanOrEqual(now, before)
        XCTAssertLessThan(now - before, 1)
    }

    func testClockSchedulerRunsWorkAfterTheDelayAndCancelStopsIt() throws {
        guard #available(macOS 13, iOS 16, tvOS 16, watchOS 9, *) else { throw XCTSkip("no Clock") }
        let scheduler = ClockScheduler(ContinuousClock())
        let ran = Handshake()
        let elapsed = SendableBox<TimeInterval>(0)
        _ = scheduler.schedule(after: 0.02) {
            elapsed.value = scheduler.now
            ran.signal()
        }
        let cancelledRan = Flag()
        scheduler.schedule(after: 0.01) { cancelledRan.raise() }.cancel()
        // Real clock: the scheduler under test runs on the wall clock.
        XCTAssertTrue(ran.wait(seconds: 5))
        XCTAssertGreaterThanOrEqual(elapsed.value, 0.02)
        XCTAssertFalse(cancelledRan.value, "a cancelled item never runs")
    }

    func testAfterOnAClockScheduler() throws {
        guard #available(macOS 13, iOS 16, tvOS 16, watchOS 9, *) else { throw XCTSkip("no Clock") }
        // Real clock: the scheduler under test sleeps on a system clock.
        XCTAssertNotNil(waitForResult(after(seconds: 0.01, scheduler: ClockScheduler(SuspendingClock())), seconds: 5))
    }
}

/// An object whose lifetime a test observes through a weak reference.
private final class SchedulerProbe: Sendable {
    func touch() {}
}
