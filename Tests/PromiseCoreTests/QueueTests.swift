import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// Where handlers run: `on:`, the main queue for bodies given no `on:` (whatever `conf.Q` says), `on: nil`;
/// `conf` itself.
final class QueueTests: XCTestCase {
    func testEveryOperatorHonoursOn() {
        let q = TaggedQueue("queue.on")
        let seen = Recorder<(String, Bool)>()
        @Sendable func mark(_ name: String) { seen.append((name, q.isCurrent)) }
        let chain = Promise.value([3, 1, 2])
            .then(on: q.queue) { v -> Promise<[Int]> in
                mark("then"); return .value(v)
            }
            .map(on: q.queue) { v -> [Int] in
                mark("map"); return v
            }
            .compactMap(on: q.queue) { v -> [Int]? in
                mark("compactMap"); return v
            }
            .get(on: q.queue) { _ in mark("get") }
            .tap(on: q.queue) { _ in mark("tap") }
            .mapValues(on: q.queue) { v -> Int in
                mark("mapValues"); return v
            }
            .sortedValues(on: q.queue)
            .map(on: q.queue) { _ -> Int in
                mark("map2"); throw TestError()
            }
            .recover(on: q.queue) { _ -> Promise<Int> in
                mark("recover"); return .value(1)
            }
            .ensure(on: q.queue) { mark("ensure") }
            .ensureThen(on: q.queue) { () -> Guarantee<Void> in
                mark("ensureThen"); return Guarantee()
            }
            .done(on: q.queue) { _ in
                mark("done"); throw TestError()
            }
        let finished = Handshake()
        chain.catch(on: q.queue) { _ in mark("catch") }.finally(on: q.queue) {
            mark("finally")
            finished.signal()
        }
        XCTAssertTrue(finished.wait(seconds: 10))
        XCTAssertEqual(
            seen.all.map(\.0),
            [
                "then", "map", "compactMap", "get", "tap", "mapValues", "mapValues", "mapValues", "map2",
                "recover", "ensure", "ensureThen", "done", "catch", "finally",
            ])
        XCTAssertEqual(seen.all.filter { !$0.1 }.map(\.0), [])
    }

    func testDefaultQueuesAreMain() {
        // On Linux every `DispatchQueue.main` access makes a new wrapper: compare labels.
        XCTAssertEqual(conf.Q.map?.label, DispatchQueue.main.label)
        XCTAssertEqual(conf.Q.return?.label, DispatchQueue.main.label)
    }

    func testMapWithoutOnRunsOnTheMainQueue() {
        let onMain = SendableBox(false)
        let p = DispatchQueue.global().async(.promise) { 1 }.map { v -> Int in
            onMain.value = isOnMainQueue; return v
        }
        XCTAssertEqual(waitForValue(p), 1)
        XCTAssertTrue(onMain.value)
    }

    // `conf.Q` does not route bodies given no `on:`: they are main-actor bodies, run on the main
    // queue whatever `conf.Q` says. `conf.Q.map` is still the default queue of `sortedValues()`
    // (see testConfigurationChangeAffectsOnlyLaterHandlers).

    func testConfiguredMapQueueDoesNotRouteMapThenAndTapGivenNoOn() {
        let q = TaggedQueue("queue.conf.map")
        let seen = Recorder<String>()
        withConfiguration({ $0.Q.map = q.queue }) {
            let p = Promise.value(1)
                .map { v -> Int in
                    seen.append(isOnMainQueue && !q.isCurrent ? "main" : "off-main"); return v
                }
                .then { v -> Promise<Int> in
                    seen.append(isOnMainQueue && !q.isCurrent ? "main" : "off-main"); return .value(v)
                }
                .tap { _ in seen.append(isOnMainQueue && !q.isCurrent ? "main" : "off-main") }
            XCTAssertEqual(waitForValue(p), 1)
        }
        XCTAssertEqual(seen.all, ["main", "main", "main"])
    }

    func testConfiguredReturnQueueDoesNotRouteDoneCatchEnsureAndFinallyGivenNoOn() {
        let q = TaggedQueue("queue.conf.return")
        let seen = Recorder<String>()
        let finished = Handshake()
        withConfiguration({ $0.Q.return = q.queue }) {
            Promise.value(1)
                .get { _ in seen.append(isOnMainQueue && !q.isCurrent ? "get" : "get-off") }
                .ensure { seen.append(isOnMainQueue && !q.isCurrent ? "ensure" : "ensure-off") }
                .done { _ in
                    seen.append(isOnMainQueue && !q.isCurrent ? "done" : "done-off")
                    throw TestError()
                }
                .catch { _ in seen.append(isOnMainQueue && !q.isCurrent ? "catch" : "catch-off") }
                .finally {
                    seen.append(isOnMainQueue && !q.isCurrent ? "finally" : "finally-off")
                    finished.signal()
                }
        }
        XCTAssertTrue(finished.wait(seconds: 10))
        XCTAssertEqual(seen.all, ["get", "ensure", "done", "catch", "finally"])
    }

    func testOnNilRunsSynchronouslyOnTheResolvingThread() {
        let q = TaggedQueue("queue.resolver")
        let (p, r) = Promise<Int>.pending()
        let ranOnResolvingQueue = SendableBox(false)
        let ranBeforeFulfillReturned = SendableBox(false)
        let fulfillReturned = Flag()
        _ = p.map(on: nil) { v -> Int in
            ranOnResolvingQueue.value = q.isCurrent
            ranBeforeFulfillReturned.value = !fulfillReturned.value
            return v
        }
        q.queue.sync {
            r.fulfill(1)
            fulfillReturned.raise()
        }
        XCTAssertTrue(ranOnResolvingQueue.value)
        XCTAssertTrue(ranBeforeFulfillReturned.value)
    }

    func testOnNilOnASettledPromiseRunsInsideTheCallThatAttachesIt() {
        let ran = Flag()
        _ = Promise.value(1).done(on: nil) { _ in ran.raise() }
        XCTAssertTrue(ran.value)
    }

    func testConfiguredNilQueuesStillRunHandlersGivenNoOnOnTheMainQueueAsynchronously() {
        let order = Recorder<String>()
        let finished = Handshake()
        withConfiguration({ $0.Q = (map: nil, return: nil) }) {
            Promise.value(1)
                .map { v -> Int in
                    order.append(isOnMainQueue ? "map" : "map-off"); return v
                }
                .done { _ in order.append(isOnMainQueue ? "done" : "done-off") }
                .catch { _ in }
                .finally {
                    order.append(isOnMainQueue ? "finally" : "finally-off")
                    finished.signal()
                }
            // Queued on the main queue, not run synchronously as `conf.Q` nil once made them.
            XCTAssertEqual(order.all, [])
        }
        XCTAssertTrue(finished.wait(seconds: 10))
        XCTAssertEqual(order.all, ["map", "done", "finally"])
    }

    func testConfigurationChangeAffectsOnlyLaterHandlers() {
        let first = TaggedQueue("queue.first")
        let second = TaggedQueue("queue.second")
        let (p, r) = Promise<[Int]>.pending()
        let seen = Recorder<String>()
        var early: Promise<Void>?
        var late: Promise<Void>?
        // `sortedValues()` reads its default queue, `conf.Q.map`, when it is called.
        withConfiguration({ $0.Q.map = first.queue }) {
            early = p.sortedValues().done(on: nil) { _ in
                seen.append(first.isCurrent ? "early-first" : "early-wrong")
            }
        }
        withConfiguration({ $0.Q.map = second.queue }) {
            late = p.sortedValues().done(on: nil) { _ in
                seen.append(second.isCurrent ? "late-second" : "late-wrong")
            }
        }
        r.fulfill([1])
        XCTAssertNotNil(waitForValue(early!))
        XCTAssertNotNil(waitForValue(late!))
        XCTAssertEqual(Set(seen.all), ["early-first", "late-second"])
    }

    func testWithConfigurationRestoresThePreviousConfiguration() {
        let q = DispatchQueue(label: "queue.restore")
        withConfiguration({
            $0.Q.map = q; $0.catchPolicy = .allErrors
        }) {
            XCTAssertTrue(conf.Q.map === q)
        }
        XCTAssertEqual(conf.Q.map?.label, DispatchQueue.main.label)
        XCTAssertEqual(conf.catchPolicy, .allErrorsExceptCancellation)
    }

    func testConfigurationCanBeReadAndSetFromEightThreads() {
        let saved = conf
        defer { conf = saved }
        let queues = (0..<8).map { DispatchQueue(label: "queue.conf.\($0)") }
        let torn = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for n in 0..<2_000 {
                if n % 4 == 0 {
                    var c = PMKConfiguration()
                    c.Q = (map: queues[i], return: queues[i])
                    conf = c
                } else {
                    // Every read sees a whole configuration, never half of one write.
                    let c = conf
                    if let map = c.Q.map, map.label != c.Q.return?.label { torn.increment() }
                    _ = Promise.value(n).map(on: nil) { $0 }
                }
            }
        }
        XCTAssertEqual(torn.value, 0)
        XCTAssertTrue(queues.contains { $0 === conf.Q.map })
    }

    func testHandlersOnAConcurrentQueueEachRunOnce() {
        let q = DispatchQueue(label: "queue.concurrent", attributes: .concurrent)
        let (p, r) = Promise<Int>.pending()
        let count = Counter()
        let tails = (0..<100).map { _ in p.done(on: q) { _ in count.increment() } }
        r.fulfill(1)
        XCTAssertNotNil(waitForValue(when(fulfilled: tails)))
        XCTAssertEqual(count.value, 100)
    }
}
