import Foundation
import PromiseCore
import XCTest

// Typical PromiseKit 8 code, written exactly as PromiseKit users write it in main-actor code (a
// view controller's method): non-Sendable captures, trailing closures, implicit queues. A body
// given no `on:` is a main-actor body, so it may capture and mutate the main actor's local state.
// It must compile in Swift 6 mode without warnings, with a plain (non-testable) import. XCTest
// runs each test method on the main thread but nonisolated, so each runs its code in
// `MainActor.assumeIsolated`, as a main-actor method would.

private struct User {
    let name: String
    let id: Int
}

private enum APIError: Error {
    case notFound
}

private func login() -> Promise<User> {
    Promise { seal in
        DispatchQueue.global().async {
            seal.fulfill(User(name: "guest", id: 1))
        }
    }
}

private func fetchAvatar(for user: User) -> Promise<String> {
    .value("avatar-\(user.id)")
}

private func fetchCount(_ completion: @escaping @Sendable (Int?, Error?) -> Void) {
    DispatchQueue.global().async { completion(3, nil) }
}

private func count() -> Promise<Int> {
    Promise { seal in fetchCount(seal.resolve) }
}

final class PromiseKitSourceCompatibilityTests: XCTestCase {
    func testTypicalChain() {
        MainActor.assumeIsolated {
            let done = Handshake()
            var log: [String] = []
            firstly {
                login()
            }.then { user in
                fetchAvatar(for: user)
            }.map { avatar in
                avatar.uppercased()
            }.done { avatar in
                log.append(avatar)
            }.catch { error in
                log.append("error: \(error)")
            }.finally {
                log.append("finally")
                done.signal()
            }
            XCTAssertTrue(done.wait(seconds: 10))
            XCTAssertEqual(log, ["AVATAR-1", "finally"])
        }
    }

    func testPendingPair() {
        MainActor.assumeIsolated {
            let (promise, seal) = Promise<Int>.pending()
            var n = 0
            promise.done { n += $0 }.cauterize()
            seal.fulfill(1)
            let flushed = Handshake()
            DispatchQueue.main.async { flushed.signal() }
            XCTAssertTrue(flushed.wait(seconds: 10))
            XCTAssertEqual(n, 1)
        }
    }

    func testNonSendableCaptureInDone() {
        MainActor.assumeIsolated {
            var n = 0
            let p = Promise { seal in seal.fulfill(1) }
            let finished = Handshake()
            p.done { n += $0 }.ensure { finished.signal() }.cauterize()
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(n, 1)
        }
    }

    func testCompletionHandlerConvention() {
        MainActor.assumeIsolated {
            let finished = Handshake()
            var result = 0
            count().done { result = $0 }.catch { _ in }.finally { finished.signal() }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(result, 3)
        }
    }

    func testRecoverAndEnsure() {
        MainActor.assumeIsolated {
            var spinner = true
            let finished = Handshake()
            var name = ""
            firstly { () -> Promise<User> in
                throw APIError.notFound
            }.recover { error -> Promise<User> in
                guard case APIError.notFound = error else { throw error }
                return .value(User(name: "guest", id: 0))
            }.ensure {
                spinner = false
            }.done { user in
                name = user.name
                finished.signal()
            }.cauterize()
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(name, "guest")
            XCTAssertFalse(spinner)
        }
    }

    func testWhenAndRace() {
        MainActor.assumeIsolated {
            let finished = Handshake()
            var sum = 0
            when(fulfilled: [Promise.value(1), Promise.value(2)]).then { values in
                race(Promise.value(values.reduce(0, +)), after(seconds: 10).map { 0 })
            }.done { total in
                sum = total
            }.catch { _ in
            }.finally {
                finished.signal()
            }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(sum, 3)
        }
    }

    func testTupleWhen() {
        MainActor.assumeIsolated {
            let finished = Handshake()
            var text = ""
            when(fulfilled: login(), count()).done { user, count in
                text = "\(user.name):\(count)"
            }.catch { _ in }.finally { finished.signal() }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(text, "guest:3")
        }
    }

    // Real time: PromiseKit's spelling, on the default scheduler and the main queue.
    func testGuaranteeStyle() {
        MainActor.assumeIsolated {
            var fired = false
            let finished = Handshake()
            // Real clock: PromiseKit's spelling has no scheduler, so the timer is the wall clock's.
            after(seconds: 0.01).done {
                fired = true
                finished.signal()
            }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertTrue(fired)
        }
    }

    func testBackgroundWorkWithDispatchQueuePromise() {
        MainActor.assumeIsolated {
            let finished = Handshake()
            var value = 0
            DispatchQueue.global().async(.promise) {
                21 * 2
            }.done {
                value = $0
                finished.signal()
            }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(value, 42)
        }
    }

    func testVoidPromisesAndResolvers() {
        MainActor.assumeIsolated {
            let (promise, seal) = Promise<Void>.pending()
            var ran = false
            promise.done { ran = true }.cauterize()
            seal.fulfill(())
            let g = Guarantee { seal in seal(()) }
            let finished = Handshake()
            g.done { finished.signal() }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertTrue(ran)
        }
    }

    func testCatchPolicyAndCancellation() {
        MainActor.assumeIsolated {
            var caught: [Bool] = []
            let finished = Handshake()
            Promise<Int>(error: PMKError.cancelled).catch(policy: .allErrors) { error in
                caught.append(error.isCancelled)
                finished.signal()
            }
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(caught, [true])
        }
    }

    func testConfigurationLikePromiseKit() {
        MainActor.assumeIsolated {
            let saved = conf
            defer { conf = saved }
            conf.Q = (map: nil, return: nil)
            var n = 0
            let finished = Handshake()
            Promise.value(1).map { $0 + 1 }.done { n = $0 }.cauterize().finally { finished.signal() }
            // `conf.Q` does not route bodies given no `on:`: they still run on the main queue, queued.
            XCTAssertEqual(n, 0)
            XCTAssertTrue(finished.wait(seconds: 10))
            XCTAssertEqual(n, 2)
        }
    }

    func testAsyncAwaitLikePromiseKit() async throws {
        let user = try await login().async()
        XCTAssertEqual(user.name, "guest")
        let value = await Guarantee.value(5).async()
        XCTAssertEqual(value, 5)
    }
}
