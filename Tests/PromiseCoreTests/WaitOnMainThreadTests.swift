import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

// `wait()` on the main thread logs `LogEvent.waitOnMainThread` on every call, before looking at
// the result, as PromiseKit 8 does: a promise that has already settled logs too.

final class WaitOnMainThreadTests: XCTestCase {
    private let runs = 50

    func testWaitOnMainThreadLogsEveryTimeForAPromiseFulfilledBeforehand() throws {
        try XCTSkipUnless(Thread.isMainThread, "XCTest runs tests on the main thread")
        var values: [Int] = []
        let events = try recordingLog {
            for run in 0..<runs {
                let (promise, resolver) = Promise<Int>.pending()
                onBackgroundQueue { resolver.fulfill(run) }
                values.append(try promise.wait())
            }
        }
        XCTAssertEqual(values, Array(0..<runs))
        XCTAssertEqual(waits(events), Array(repeating: "waitOnMainThread", count: runs))
    }

    func testWaitOnMainThreadLogsEveryTimeForARejectedPromise() throws {
        try XCTSkipUnless(Thread.isMainThread, "XCTest runs tests on the main thread")
        var errors = 0
        let events = try recordingLog {
            for _ in 0..<runs {
                let (promise, resolver) = Promise<Int>.pending()
                onBackgroundQueue { resolver.reject(TestError()) }
                XCTAssertThrowsError(try promise.wait()) { error in
                    if error as? TestError == TestError() { errors += 1 }
                }
            }
        }
        XCTAssertEqual(errors, runs)
        XCTAssertEqual(waits(events), Array(repeating: "waitOnMainThread", count: runs))
    }

    func testGuaranteeWaitOnMainThreadLogsEveryTimeForAResolvedGuarantee() throws {
        try XCTSkipUnless(Thread.isMainThread, "XCTest runs tests on the main thread")
        var values: [Int] = []
        let events = recordingLog {
            for run in 0..<runs {
                let (guarantee, resolve) = Guarantee<Int>.pending()
                onBackgroundQueue { resolve(run) }
                values.append(guarantee.wait())
            }
        }
        XCTAssertEqual(values, Array(0..<runs))
        XCTAssertEqual(waits(events), Array(repeating: "waitOnMainThread", count: runs))
    }

    func testWaitOnMainThreadLogsOnceForAPromiseSettledWhileWaiting() throws {
        try XCTSkipUnless(Thread.isMainThread, "XCTest runs tests on the main thread")
        var value: Int?
        let events = try recordingLog {
            let (promise, resolver) = Promise<Int>.pending()
            DispatchQueue.global().async { resolver.fulfill(5) }
            value = try promise.wait()
        }
        XCTAssertEqual(value, 5)
        XCTAssertEqual(waits(events), ["waitOnMainThread"])
    }

    func testWaitOffTheMainThreadLogsNothing() {
        let events = recordingLog {
            onBackgroundQueue {
                XCTAssertFalse(Thread.isMainThread)
                XCTAssertEqual(try? Promise.value(1).wait(), 1)
                XCTAssertEqual(Guarantee.value(2).wait(), 2)
            }
        }
        XCTAssertEqual(waits(events), [])
    }
}

/// Runs `body` on a global queue and returns once it has run (`sync` could run it right here,
/// on the main thread).
private func onBackgroundQueue(_ body: @escaping @Sendable () -> Void) {
    let done = Handshake()
    DispatchQueue.global().async {
        body()
        done.signal()
    }
    done.wait()
}

/// The `waitOnMainThread` events among `events` (work left over by other tests may log others).
private func waits(_ events: [LogEvent]) -> [String] {
    describeLog(events).filter { $0 == "waitOnMainThread" }
}
