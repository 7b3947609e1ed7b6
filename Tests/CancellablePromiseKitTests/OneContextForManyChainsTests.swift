// The "one context for many chains" example, as printed in the README's tour and in the
// "Cancelling a chain" article (`cancellize(cancelContext:)`), compiled against a stand-in API
// whose requests the test settles, and what the text says of it: closing the screen stops every
// refresh still running, a settled refresh leaves the context, a refresh after the close is
// cancelled at once, and the chains in the context are one.
import CancellablePromiseKit
import Foundation
import XCTest

/// The printed example's world: a feed, an API whose requests attach their task, a screen.
enum OneContextExample {
    struct Feed: Equatable {
        var items: [String]
    }

    /// One request of the stand-in API: its resolver, and whether its task was cancelled.
    struct Request: Sendable {
        let resolver: Resolver<Feed>
        let cancelled: Flag
    }

    /// Requests the test settles by hand; each attaches its task to its promise, as
    /// PromiseFoundation's requests do, so a cancel reaches it.
    final class API: Sendable {
        private let made = Recorder<Request>()
        var requests: [Request] { made.all }

        func feed() -> Promise<Feed> {
            let cancelled = Flag()
            return Promise(cancellationToken: nil) { resolver in
                made.append(Request(resolver: resolver, cancelled: cancelled))
                return { cancelled.raise() }
            }
        }
    }

    /// What the screen showed, for the test to read.
    final class Shown: Sendable {
        let feeds = Recorder<Feed>()
        let errors = Recorder<Error>()
    }

    // The printed code, with `api` and `show` given by the test.
    @MainActor final class FeedScreen {
        private let work = CancelContext()

        func refresh() {
            api.feed()  // a Promise<Feed>
                .cancellize(cancelContext: work)  // one more chain in the screen's context
                .done { self.show($0) }
                .catch { self.show($0) }
        }

        func close() {
            work.cancel()  // every refresh still running stops
        }

        // The stand-ins.
        let api: API
        nonisolated let shown = Shown()
        init(api: API) { self.api = api }
        nonisolated var context: CancelContext { work }
        func show(_ feed: Feed) { shown.feeds.append(feed) }
        func show(_ error: Error) { shown.errors.append(error) }
    }
}

final class OneContextForManyChainsTests: XCTestCase {
    typealias Feed = OneContextExample.Feed
    typealias FeedScreen = OneContextExample.FeedScreen

    // XCTest runs test methods on the main thread but nonisolated: the screen's main-actor
    // methods are called in `MainActor.assumeIsolated`, as a main-actor caller would call them,
    // and the test waits for the main queue between those calls.

    /// A screen over a new stand-in API, and that API, once `actions` ran on the screen on the
    /// main actor.
    private func openScreen(
        then actions: @MainActor (FeedScreen) -> Void
    ) -> (api: OneContextExample.API, screen: FeedScreen) {
        let api = OneContextExample.API()
        let screen = MainActor.assumeIsolated { FeedScreen(api: api) }
        MainActor.assumeIsolated { actions(screen) }
        return (api, screen)
    }

    func testClosingTheScreenStopsEveryRefreshStillRunning() {
        let (api, screen) = openScreen { screen in
            screen.refresh()
            screen.refresh()
        }
        XCTAssertEqual(api.requests.count, 2)
        MainActor.assumeIsolated { screen.close() }
        XCTAssertTrue(api.requests.allSatisfy { $0.cancelled.value }, "both requests were cancelled")
        XCTAssertTrue(screen.context.isCancelled)
        api.requests[0].resolver.fulfill(Feed(items: ["late"]))
        drainMainQueue()
        XCTAssertEqual(screen.shown.feeds.all, [], "no `done` runs after the close")
        XCTAssertEqual(screen.shown.errors.all.count, 0, "the default catch policy skips the cancellation")
    }

    func testASettledRefreshLeavesTheContext() {
        let (api, screen) = openScreen { $0.refresh() }
        XCTAssertEqual(screen.context.debugDescription, "CancelContext(pending: 3)", "the request, `done`, `catch`")
        api.requests[0].resolver.fulfill(Feed(items: ["a"]))
        XCTAssertTrue(eventually { screen.shown.feeds.all == [Feed(items: ["a"])] })
        drainMainQueue()
        XCTAssertEqual(screen.context.debugDescription, "CancelContext(pending: 0)")

        // Many refreshes over the screen's life: the context holds none of the settled ones.
        for round in 1...100 {
            MainActor.assumeIsolated { screen.refresh() }
            api.requests[round].resolver.fulfill(Feed(items: ["\(round)"]))
        }
        XCTAssertTrue(eventually { screen.shown.feeds.all.count == 101 })
        drainMainQueue()
        XCTAssertEqual(screen.context.debugDescription, "CancelContext(pending: 0)")
        XCTAssertFalse(api.requests.contains { $0.cancelled.value })
    }

    func testARefreshAfterTheCloseIsCancelledAtOnce() {
        let (api, screen) = openScreen { screen in
            screen.close()
            screen.refresh()
        }
        XCTAssertEqual(api.requests.count, 1)
        XCTAssertTrue(api.requests[0].cancelled.value, "a cancelled context stays cancelled")
        drainMainQueue()
        XCTAssertEqual(screen.shown.feeds.all, [])
    }

    /// The chains in one context are one chain: cancelling any promise of one refresh cancels
    /// the others (a bag, not a context, keeps them apart).
    func testCancellingOneChainInTheContextCancelsTheOthers() {
        let api = OneContextExample.API()
        let context = CancelContext()
        let first = api.feed().cancellize(cancelContext: context).map(on: nil) { $0.items.count }
        let second = api.feed().cancellize(cancelContext: context)
        first.cancel()
        XCTAssertTrue(second.isRejected)
        XCTAssertTrue(second.isCancelled)
        XCTAssertTrue(context.isCancelled)
        XCTAssertTrue(api.requests.allSatisfy { $0.cancelled.value })
    }
}
