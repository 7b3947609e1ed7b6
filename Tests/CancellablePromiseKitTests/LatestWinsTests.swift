import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// `LatestWins`: every run cancels the one before it, so only the latest run can deliver.

final class LatestWinsTests: XCTestCase {
    /// A run the test settles by hand; records when its cancel closure runs.
    private final class Run: @unchecked Sendable {
        let promise: CancellablePromise<String>
        let resolver: Resolver<String>
        let cancelled = Counter()

        init(log: Locked<[String]>? = nil, name: String = "") {
            var captured: Resolver<String>?
            let cancelled = self.cancelled
            promise = CancellablePromise<String> { resolver in
                captured = resolver
                return {
                    cancelled.increment()
                    log?.withLock { $0.append("\(name) cancelled") }
                }
            }
            resolver = captured!
        }
    }

    func testRunCancelsThePreviousRunBeforeStartingTheNext() {
        let latest = LatestWins()
        let log = Locked<[String]>([])
        let first = Run(log: log, name: "first")
        let firstResult = latest.run { first.promise }
        let shown = Locked<[String]>([])
        let firstShown = firstResult.done(on: nil) { value in shown.withLock { $0.append(value) } }

        let second = latest.run { () -> CancellablePromise<String> in
            log.withLock { $0.append("second started") }
            return Run(log: log, name: "second").promise
        }
        XCTAssertEqual(log.withLock { $0 }, ["first cancelled", "second started"])
        XCTAssertEqual(firstResult.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(firstShown.error as? CancellablePromiseError, .cancelled, "steps chained to it are cancelled")
        XCTAssertFalse(second.isCancelled)

        first.resolver.fulfill("stale")
        XCTAssertEqual(shown.withLock { $0 }, [], "a stale run never delivers")
    }

    func testAStaleRunsQueuedStepNeverRunsEvenIfItsTaskHadFinished() {
        let latest = LatestWins()
        let queue = DispatchQueue(label: "latest-wins-ui")
        queue.suspend()
        let first = Run()
        let shown = Flag()
        let firstShown = latest.run { first.promise }.done(on: queue) { _ in shown.raise() }
        first.resolver.fulfill("s")  // the task finished; its `done` waits for the queue
        latest.run { Run().promise }
        queue.resume()
        queue.sync {}  // the queued `done` has had its turn
        XCTAssertFalse(shown.value, "the stale result was shown")
        XCTAssertEqual(firstShown.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(first.cancelled.value, 0, "a settled task is not cancelled")
    }

    func testOneThousandRunsFromSeveralThreadsLeaveOnlyTheLastAbleToFulfil() {
        let latest = LatestWins()
        let count = 1_000
        var runs: [Run]? = (0..<count).map { _ in Run() }
        let results = Locked<[Int: CancellablePromise<String>]>([:])
        DispatchQueue.concurrentPerform(iterations: count) { [runs] index in
            let promise = latest.run { runs![index].promise }
            results.withLock { $0[index] = promise }
        }
        let survivors = (0..<count).filter { runs![$0].cancelled.value == 0 }
        XCTAssertEqual(survivors.count, 1, "every run but the last was cancelled")
        for index in 0..<count where index != survivors.first {
            XCTAssertEqual(runs![index].cancelled.value, 1, "run \(index)'s cancel closure ran exactly once")
        }

        for run in runs! { run.resolver.fulfill("done") }
        let fulfilled = results.withLock { $0 }.filter { $0.value.value != nil }.map(\.key)
        XCTAssertEqual(fulfilled, survivors, "only the last run fulfils")

        // Nothing is retained once they have settled, though `latest` lives on.
        let promises = runs!.map { WeakPromise($0.promise) }
        results.withLock { $0 = [:] }
        runs = nil
        XCTAssertEqual(promises.filter { $0.promise != nil }.count, 0, "every run was released")
        withExtendedLifetime(latest) {}
    }

    private struct WeakPromise {
        weak var promise: CancellablePromise<String>?
        init(_ promise: CancellablePromise<String>) { self.promise = promise }
    }

    func testSettledRunsAreNotRetained() {
        let latest = LatestWins()
        weak var earlierProbe: DeinitProbe?
        weak var laterProbe: DeinitProbe?
        weak var earlier: CancellablePromise<Int>?
        weak var later: CancellablePromise<Int>?
        do {
            let probe = DeinitProbe()
            earlierProbe = probe
            let promise = latest.run { CancellablePromise<Int> { _ in { _ = probe } } }
            earlier = promise
        }
        XCTAssertNotNil(earlierProbe, "the latest run is kept cancellable: its cancel closure is held")
        var resolver: Resolver<Int>?
        do {
            let probe = DeinitProbe()
            laterProbe = probe
            let promise = latest.run {
                CancellablePromise<Int> { seal in
                    resolver = seal
                    return { _ = probe }
                }
            }
            later = promise
        }
        XCTAssertNil(earlier, "cancelled and released")
        XCTAssertNil(earlierProbe)
        resolver?.fulfill(1)
        resolver = nil
        XCTAssertNil(later, "settled and released, though it is still the latest run")
        XCTAssertNil(laterProbe)
    }

    func testCancelStopsTheLatestRunAndTheNextRunWorks() {
        let latest = LatestWins()
        let first = Run()
        latest.run { first.promise }
        latest.cancel()
        XCTAssertEqual(first.cancelled.value, 1)
        latest.cancel()
        XCTAssertEqual(first.cancelled.value, 1, "once")

        let second = Run()
        let result = latest.run { second.promise }
        second.resolver.fulfill("ok")
        XCTAssertEqual(result.value, "ok")
    }

    func testDeallocatingCancelsTheLatestRun() {
        var latest: LatestWins? = LatestWins()
        let run = Run()
        let result = latest!.run { run.promise }
        latest = nil
        XCTAssertEqual(run.cancelled.value, 1)
        XCTAssertEqual(result.error as? CancellablePromiseError, .cancelled)
    }

    func testAPlainPromiseRunHasItsAttachedTaskStopped() {
        let latest = LatestWins()
        let backend = FakeBackend()
        let first = latest.run { backend.start("s", String.self) }
        latest.run { backend.start("sw", String.self) }
        XCTAssertEqual(backend.task("s", String.self).cancelCount.value, 1)
        XCTAssertEqual(first.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(backend.task("sw", String.self).cancelCount.value, 0)
    }

    func testAThrowingBodyIsARejectedRun() {
        struct Failed: Error {}
        let latest = LatestWins()
        let run = Run()
        latest.run { run.promise }
        let failed = latest.run { () -> CancellablePromise<String> in throw Failed() }
        XCTAssertTrue(failed.error is Failed)
        XCTAssertEqual(run.cancelled.value, 1, "the previous run is cancelled before the body runs")
    }

    func testARunOverlappedByANewerOneCancelsItself() {
        let latest = LatestWins()
        let inner = Run()
        var outerResult: CancellablePromise<String>?
        let outer = latest.run { () -> CancellablePromise<String> in
            // A newer run starts while this body runs (as another thread could).
            outerResult = latest.run { inner.promise }
            return Run().promise
        }
        XCTAssertEqual(outer.error as? CancellablePromiseError, .cancelled, "stale: cancelled before run returned")
        XCTAssertFalse(outerResult?.isCancelled ?? true, "the newer run is the latest")
        inner.resolver.fulfill("newest")
        XCTAssertEqual(outerResult?.value, "newest")
    }
}
