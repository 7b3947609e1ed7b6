import CancellablePromiseKit
import Foundation
import PromiseCore
import XCTest

// A long-lived token's registrations cost O(1) amortised to remove in any order (oldest
// first, newest first, at random):
// these tests count the entries the token copies to keep its list short
// (`CancellationToken.entriesMoved`, debug builds) instead of timing the removals. Removing
// entries one by one from the front of an array would move every later entry each time:
// about n²/2 moves for n registrations removed oldest first. The sizes are what a run under the
// thread sanitizer affords; the bound on moves tells linear from quadratic at any of them.

#if DEBUG
final class TokenScalingTests: XCTestCase {
    private enum Order: CaseIterable {
        case oldestFirst, newestFirst, random

        func indices(_ count: Int) -> [Int] {
            switch self {
            case .oldestFirst: return Array(0..<count)
            case .newestFirst: return Array((0..<count).reversed())
            case .random:
                var generator = SeededGenerator(seed: 23)
                return Array(0..<count).shuffled(using: &generator)
            }
        }
    }

    /// The bound of a token's list: live entries and tombstones of removed ones together stay
    /// within twice the live entries plus 16.
    private func assertBounded(
        _ token: CancellationToken, live: Int, _ message: @autoclosure () -> String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(token.pendingHandlerCount, live, message(), file: file, line: line)
        XCTAssertLessThanOrEqual(token.storedEntryCount, 2 * live + 16, message(), file: file, line: line)
    }

    private var entriesMoved: Int { CancellationToken.entriesMoved.withLock { $0 } }

    /// `count` pending `Promise(cancellationToken:)` on `token`, and their resolvers.
    private func tokenPromises(_ count: Int, on token: CancellationToken) -> ([Promise<Int>], [Resolver<Int>]) {
        var resolvers: [Resolver<Int>] = []
        resolvers.reserveCapacity(count)
        let promises = (0..<count).map { _ in
            Promise<Int>(cancellationToken: token) { resolver in
                resolvers.append(resolver)
                return {}
            }
        }
        return (promises, resolvers)
    }

    func testTokenPromisesSettledOldestFirstLeaveTheTokenInLinearWork() {
        let count = 100_000
        let request = CancellationRequest()
        let (promises, resolvers) = tokenPromises(count, on: request.token)
        assertBounded(request.token, live: count, "every task registered")
        let movedBefore = entriesMoved
        for (index, resolver) in resolvers.enumerated() {
            resolver.fulfill(index)
            if index.isMultiple(of: 997) {
                assertBounded(request.token, live: count - index - 1, "after settling \(index + 1)")
            }
        }
        let moved = entriesMoved - movedBefore
        XCTAssertLessThanOrEqual(moved, 2 * count, "each settled promise leaves the token in O(1) amortised")
        assertBounded(request.token, live: 0, "every registration removed")
        XCTAssertEqual(promises.compactMap(\.value), Array(0..<count))
    }

    func testTokenPromisesSettledNewestFirstLeaveTheTokenInLinearWork() {
        let count = 20_000
        let request = CancellationRequest()
        let (promises, resolvers) = tokenPromises(count, on: request.token)
        let movedBefore = entriesMoved
        for index in resolvers.indices.reversed() {
            resolvers[index].fulfill(index)
            if index.isMultiple(of: 997) {
                assertBounded(request.token, live: index, "after settling down to \(index)")
            }
        }
        XCTAssertLessThanOrEqual(entriesMoved - movedBefore, 2 * count)
        assertBounded(request.token, live: 0, "every registration removed")
        XCTAssertEqual(promises.compactMap(\.value), Array(0..<count))
    }

    func testHandlersRemovedInAnyOrderNeverRunAndTheOthersRunOnce() {
        let count = 30_000
        for order in Order.allCases {
            let request = CancellationRequest()
            let runs = RunCounts(count)
            let registrations = (0..<count).map { index in request.token.onCancel { runs.ran(index) } }
            // Every third handler stays; the others are removed in `order`.
            let removed = order.indices(count).filter { !$0.isMultiple(of: 3) }
            let kept = count - removed.count
            let movedBefore = entriesMoved
            for (step, index) in removed.enumerated() {
                XCTAssertTrue(registrations[index].remove(), "\(order): \(index) removed once")
                if step.isMultiple(of: 991) {
                    assertBounded(request.token, live: count - step - 1, "\(order): after \(step + 1) removals")
                }
            }
            XCTAssertLessThanOrEqual(
                entriesMoved - movedBefore, 2 * count, "\(order): each removal costs O(1) amortised")
            assertBounded(request.token, live: kept, "\(order): the kept handlers")
            XCTAssertFalse(registrations[1].remove(), "\(order): a second removal finds nothing")
            request.cancel()
            XCTAssertEqual(runs.total, kept, "\(order)")
            for index in [0, 1, 2, 3, count / 2, count - 2, count - 1] {
                XCTAssertEqual(runs[index], index.isMultiple(of: 3) ? 1 : 0, "\(order): handler \(index)")
            }
            XCTAssertTrue(runs.all { index, ran in ran == (index.isMultiple(of: 3) ? 1 : 0) }, "\(order)")
        }
    }

    func testHandlersRemovedFromInsideOtherHandlersDuringTheCancelNeverRun() {
        let request = CancellationRequest()
        let runs = RunCounts(64)
        let registrations = Recorder<CancellationRegistration>()
        for index in 0..<64 {
            registrations.append(
                request.token.onCancel {
                    runs.ran(index)
                    // Completing hands the entries out at once: removing now is too late.
                    if index == 0 { XCTAssertFalse(registrations.all[63].remove()) }
                })
        }
        for index in stride(from: 1, to: 63, by: 2) { registrations.all[index].remove() }
        request.cancel()
        XCTAssertTrue(runs.all { index, ran in ran == (index == 63 || index.isMultiple(of: 2) ? 1 : 0) })
    }

    func testDerivedTokensDroppedOldestFirstLeaveTheirOperandInLinearWork() {
        let count = 50_000
        let request = CancellationRequest()
        let runs = RunCounts(count)
        var derived: [CancellationToken?] = (0..<count).map { _ in request.token.map { true } }
        // Every tenth derived token has a handler: it keeps that token alive after it is dropped.
        for index in stride(from: 0, to: count, by: 10) {
            derived[index]?.onCancel { runs.ran(index) }
        }
        assertBounded(request.token, live: count, "a link per derived token")
        let movedBefore = entriesMoved
        for index in 0..<count {
            derived[index] = nil
            if index.isMultiple(of: 997) {
                let live = count - (index + 1) + (index / 10 + 1)
                assertBounded(request.token, live: live, "after dropping \(index + 1)")
            }
        }
        XCTAssertLessThanOrEqual(entriesMoved - movedBefore, 2 * count, "each dropped token leaves in O(1) amortised")
        assertBounded(request.token, live: count / 10, "the links of the tokens with handlers")
        request.cancel()
        XCTAssertEqual(runs.total, count / 10)
        XCTAssertTrue(runs.all { index, ran in ran == (index.isMultiple(of: 10) ? 1 : 0) })
        XCTAssertEqual(request.token.pendingHandlerCount, 0)
    }

    func testDerivedTokensDroppedNewestFirstOrAtRandomLeaveTheirOperand() {
        let count = 20_000
        for order in [Order.newestFirst, .random] {
            let request = CancellationRequest()
            var derived: [CancellationToken?] = (0..<count).map { _ in request.token.map { true } }
            let movedBefore = entriesMoved
            for (step, index) in order.indices(count).enumerated() {
                derived[index] = nil
                if step.isMultiple(of: 997) {
                    assertBounded(request.token, live: count - step - 1, "\(order): after dropping \(step + 1)")
                }
            }
            XCTAssertLessThanOrEqual(entriesMoved - movedBefore, 2 * count, "\(order)")
            assertBounded(request.token, live: 0, "\(order): every link removed")
        }
    }
}

/// How many times each handler ran; handlers run on the cancelling thread, but a lock keeps it
/// honest under the thread sanitizer.
private final class RunCounts: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [Int]

    init(_ count: Int) { counts = Array(repeating: 0, count: count) }

    func ran(_ index: Int) { lock.withLock { counts[index] += 1 } }
    subscript(index: Int) -> Int { lock.withLock { counts[index] } }
    var total: Int { lock.withLock { counts.reduce(0, +) } }

    func all(_ predicate: (Int, Int) -> Bool) -> Bool {
        lock.withLock { counts.enumerated().allSatisfy { predicate($0.offset, $0.element) } }
    }
}
#endif
