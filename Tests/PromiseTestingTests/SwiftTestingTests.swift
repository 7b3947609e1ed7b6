import PromiseCore
import PromiseTesting
import Testing

// The test scheduler needs no XCTest: it works as well under Swift Testing.

@Test func afterResolvesWhenTheTestSchedulerReachesItsDeadline() {
    let scheduler = TestScheduler()
    let waited = after(seconds: 0.3, scheduler: scheduler)
    scheduler.advance(by: 0.2)
    #expect(waited.isPending)
    scheduler.advance(by: 0.1)
    #expect(waited.isResolved)
    #expect(scheduler.pendingCount == 0)
}
