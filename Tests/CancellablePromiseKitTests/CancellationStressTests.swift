import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// Cancel racing fulfil: 8 threads cancel while one fulfils, for 10,000 rounds. Every round
// checks exactly-once settlement, a cancel closure called at most once and only when the
// cancellation won, no step body once cancel() has returned, and `ensure` exactly once.

final class CancellationStressTests: XCTestCase {
    static let rounds = 10_000

    /// The record of one round, written from the racing threads.
    final class Round: @unchecked Sendable {
        let lock = NSLock()
        var cancelClosureCalls = 0
        var bodyRuns = 0
        var ensureRuns = 0
        var settlements = 0
        var cancelReturned = false
        var fulfilAfterCancelReturned = false
        func with(_ body: (Round) -> Void) { lock.withLock { body(self) } }
    }

    func testEightThreadsCancellingWhileOneFulfils() {
        var failures: [String] = []
        for roundIndex in 0..<Self.rounds {
            let round = Round()
            var resolverRef: Resolver<Int>?
            let head = CancellablePromise<Int> { resolver in
                resolverRef = resolver
                return { round.with { $0.cancelClosureCalls += 1 } }
            }
            let resolver = resolverRef!
            let tail = head.map(on: nil) { v -> Int in
                round.with { $0.bodyRuns += 1 }
                return v + 1
            }.ensure(on: nil) {
                round.with { $0.ensureRuns += 1 }
            }
            tail.tap(on: nil) { _ in round.with { $0.settlements += 1 } }.cauterize()
            let box = UncheckedBox((head, tail, resolver))

            DispatchQueue.concurrentPerform(iterations: 9) { i in
                let (head, tail, resolver) = box.value
                if i == 0 {
                    let cancelledAlready = round.lock.withLock { round.cancelReturned }
                    round.with { $0.fulfilAfterCancelReturned = cancelledAlready }
                    resolver.fulfill(1)
                } else {
                    (i % 2 == 0 ? tail.cancel : head.cancel)()
                    round.with { $0.cancelReturned = true }
                }
            }

            let headResult = head.result
            let tailResult = tail.result
            round.lock.lock()
            defer { round.lock.unlock() }
            var problems: [String] = []
            if round.settlements != 1 { problems.append("settled \(round.settlements) times") }
            if round.ensureRuns != 1 { problems.append("ensure ran \(round.ensureRuns) times") }
            if round.cancelClosureCalls > 1 { problems.append("cancel closure ran \(round.cancelClosureCalls) times") }
            if round.bodyRuns > 1 { problems.append("body ran \(round.bodyRuns) times") }
            switch headResult {
            case .fulfilled?:
                if round.cancelClosureCalls != 0 { problems.append("cancel closure called though the fulfil won") }
            case .rejected(let error)?:
                if error as? CancellablePromiseError != .cancelled { problems.append("head rejected with \(error)") }
                if round.cancelClosureCalls != 1 {
                    problems.append("cancel won but its closure ran \(round.cancelClosureCalls) times")
                }
                if round.bodyRuns != 0 { problems.append("body ran after cancel") }
            case nil:
                problems.append("head pending")
            }
            if round.fulfilAfterCancelReturned && round.bodyRuns != 0 {
                problems.append("body ran though cancel() had returned")
            }
            if tailResult == nil { problems.append("tail pending") }
            if case .fulfilled? = tailResult, round.bodyRuns != 1 { problems.append("tail fulfilled without body") }
            if !head.isCancelled { problems.append("isCancelled false after cancel") }
            if !problems.isEmpty { failures.append("round \(roundIndex): \(problems.joined(separator: ", "))") }
        }
        XCTAssertEqual(failures.count, 0, failures.prefix(5).joined(separator: "\n"))
    }

    func testCancelRacingFulfilOfARaceWithAutoCancelNeverCancelsTheWinner() {
        var failures: [String] = []
        for roundIndex in 0..<(Self.rounds / 2) {
            let a = CancellablePromise<Int>.pending()
            let b = CancellablePromise<Int>.pending()
            let result = race([a.promise, b.promise], autoCancel: true)
            let box = UncheckedBox((a, b, result))
            DispatchQueue.concurrentPerform(iterations: 4) { i in
                let (a, b, result) = box.value
                switch i {
                case 0: a.resolver.fulfill(1)
                case 1: b.resolver.fulfill(2)
                default: result.cancel()
                }
            }
            switch result.result {
            case .fulfilled(let v)?:
                // The input that settled the race is never cancelled; the other one is.
                let (winner, loser) = v == 1 ? (a.promise, b.promise) : (b.promise, a.promise)
                if winner.isCancelled { failures.append("round \(roundIndex): winner cancelled") }
                if loser.isPending { failures.append("round \(roundIndex): loser pending") }
            case .rejected(let error)?:
                if error as? CancellablePromiseError != .cancelled { failures.append("round \(roundIndex): \(error)") }
                if a.promise.isPending || b.promise.isPending { failures.append("round \(roundIndex): input pending") }
            case nil:
                failures.append("round \(roundIndex): race pending")
            }
        }
        XCTAssertEqual(failures.count, 0, failures.prefix(5).joined(separator: "\n"))
    }

    func testConcurrentJoinsAndCancelsCancelEveryMember() {
        for _ in 0..<(Self.rounds / 10) {
            let heads = (0..<4).map { _ in CancellablePromise<Int>.pending() }
            let box = UncheckedBox(heads)
            DispatchQueue.concurrentPerform(iterations: 4) { i in
                let heads = box.value
                // Each thread joins its chain with the next one's, then one thread cancels.
                _ = heads[(i + 1) % 4].promise.cancellize(cancelContext: heads[i].promise.cancelContext)
                if i == 3 { heads[0].promise.cancel() }
            }
            heads[0].promise.cancel()
            XCTAssertTrue(heads.allSatisfy { $0.promise.isRejected })
        }
    }
}
