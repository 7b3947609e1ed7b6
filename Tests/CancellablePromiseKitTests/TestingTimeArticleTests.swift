import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseTesting
import XCTest

// The code of the "Testing time-based code" article, compiled and run as it is printed there:
// a feed loader that retries with backoff under a deadline, and a search field that waits for
// a pause in the typing. No test waits for real time.

// MARK: The code under test

struct Feed: Equatable {
    var items: [String]
}

struct FeedLoader {
    /// Starts one request for the feed.
    var fetch: @Sendable () -> CancellablePromise<Feed>
    /// The clock of the backoff and of the deadline: the wall clock unless a test says otherwise.
    var scheduler: any PromiseScheduler = DispatchScheduler.global

    /// Three attempts, 1 s then 2 s apart, and never more than 10 s in all.
    func load() -> CancellablePromise<Feed> {
        retry(maxAttempts: 3, delay: .exponential(initial: 1, multiplier: 2), scheduler: scheduler) { _ in
            fetch()
        }
        .timeout(seconds: 10, scheduler: scheduler)
    }
}

final class SearchModel: Sendable {
    /// What the screen shows: the results of the latest search.
    var shown: [String] { shownResults.value }

    private let shownResults = SendableBox<[String]>([])
    private let searches = LatestWins()
    private let search: @Sendable (String) -> CancellablePromise<[String]>
    private let scheduler: any PromiseScheduler
    private let queue: DispatchQueue?

    /// `queue` is where results are shown: the main queue in the app, `nil` (the thread that
    /// settles the search) in tests.
    init(
        search: @escaping @Sendable (String) -> CancellablePromise<[String]>,
        scheduler: any PromiseScheduler = DispatchScheduler.global,
        queue: DispatchQueue? = .main
    ) {
        self.search = search
        self.scheduler = scheduler
        self.queue = queue
    }

    /// Searches once the typing has paused for 300 ms; each keystroke cancels the search of
    /// the one before, whether it is still waiting or already running.
    func textDidChange(_ text: String) {
        searches.run {
            after(seconds: 0.3, scheduler: scheduler).cancellize()
                .then(on: queue) { self.search(text) }
        }
        .done(on: queue) { self.shownResults.value = $0 }
        .cauterize()
    }
}

// MARK: The tests

final class TestingTimeArticleTests: XCTestCase {
    func testTheFeedLoaderMakesThreeAttemptsThenGivesUpAtTenSeconds() {
        let scheduler = TestScheduler()
        let started = Recorder<TimeInterval>()
        // Every request fails after 3 s.
        let loader = FeedLoader(
            fetch: {
                started.append(scheduler.now)
                return after(seconds: 3, scheduler: scheduler).cancellize()
                    .then(on: nil) { () -> Promise<Feed> in throw URLError(.timedOut) }
            },
            scheduler: scheduler)

        let feed = loader.load()
        scheduler.advance(by: 9.999)
        XCTAssertEqual(started.all, [0, 4, 9])  // fails at 3, waits 1 s; fails at 7, waits 2 s
        XCTAssertTrue(feed.isPending)

        scheduler.advance(by: 0.001)
        XCTAssertEqual((feed.error as? PromiseTimeoutError)?.seconds, 10)
        XCTAssertEqual(scheduler.pendingCount, 0)  // the third request was cancelled
        XCTAssertEqual(started.all.count, 3)
    }

    func testTheFeedLoaderReturnsTheFirstFeedThatArrives() {
        let scheduler = TestScheduler()
        let attempt = Counter()
        let loader = FeedLoader(
            fetch: {
                let failed = attempt.increment() == 1
                return after(seconds: 0.5, scheduler: scheduler).cancellize()
                    .map(on: nil) { () -> Feed in
                        if failed { throw URLError(.networkConnectionLost) }
                        return Feed(items: ["hello"])
                    }
            },
            scheduler: scheduler)

        let feed = loader.load()
        scheduler.advance(by: 2)  // 0.5 s, 1 s of backoff, 0.5 s
        XCTAssertEqual(feed.value, Feed(items: ["hello"]))
        XCTAssertEqual(scheduler.pendingCount, 0)  // the deadline's timer is gone
    }

    func testTheSearchWaitsForAPauseAndShowsOnlyTheLastResults() {
        let scheduler = TestScheduler()
        let searched = Recorder<String>()
        // Every search takes 0.5 s.
        let model = SearchModel(
            search: { text in
                searched.append(text)
                return after(seconds: 0.5, scheduler: scheduler).cancellize().map(on: nil) {
                    ["\(text) 1", "\(text) 2"]
                }
            },
            scheduler: scheduler, queue: nil)

        model.textDidChange("s")
        scheduler.advance(by: 0.1)
        model.textDidChange("sw")  // within 300 ms: "s" is never searched
        scheduler.advance(by: 0.4)
        XCTAssertEqual(searched.all, ["sw"])  // the pause was long enough

        model.textDidChange("swift")  // cancels the running search for "sw"
        scheduler.advance(by: 0.299)
        XCTAssertEqual(searched.all, ["sw"])
        scheduler.advance(by: 0.001)
        XCTAssertEqual(searched.all, ["sw", "swift"])

        scheduler.advance(by: 0.5)
        XCTAssertEqual(model.shown, ["swift 1", "swift 2"])
        XCTAssertEqual(scheduler.pendingCount, 0)
    }
}
