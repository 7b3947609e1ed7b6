import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// Edge cases of the cancellation graph: steps made or settling while `cancel()` runs, joins into
// cancelled chains, links between a combinator's inputs, links to a chain's own promises, and
// registrations on a long-lived `cancelPromise`. Each test pins one behaviour; see its comment.

final class CancellationEdgeCaseTests: XCTestCase {
    // MARK: - Sequence helpers

    /// The sequence helpers that take a body (`mapValues`, `compactMapValues`,
    /// `flatMapValues`, `filterValues`, `firstValue(where:)`) follow the rule of `map`: made on
    /// a cancelled chain whose promise fulfilled, they reject without running their body.
    func testSequenceHelpersDoNotRunTheirBodiesOnACancelledChain() {
        let (head, resolver) = CancellablePromise<[Int]>.pending()
        resolver.fulfill([1, 2, 3])
        head.cancel()
        XCTAssertTrue(head.isCancelled)

        let ran = Counter()
        let mapped = head.map(on: nil) { values -> [Int] in
            ran.increment()
            return values
        }
        XCTAssertEqual(ran.value, 0, "baseline: map does not run on a cancelled chain")
        XCTAssertEqual(mapped.error as? CancellablePromiseError, .cancelled)

        let mapValues = head.mapValues(on: nil) { value -> Int in
            ran.increment()
            return value
        }
        let filterValues = head.filterValues(on: nil) { _ in
            ran.increment()
            return true
        }
        let compactMapValues = head.compactMapValues(on: nil) { value -> Int? in
            ran.increment()
            return value
        }
        let firstValue = head.firstValue(on: nil) { _ in
            ran.increment()
            return true
        }
        XCTAssertEqual(ran.value, 0, "sequence-helper bodies ran after cancel() had returned")
        XCTAssertEqual(mapValues.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(filterValues.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(compactMapValues.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(firstValue.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: - Joining into a cancelled chain

    /// Joining a chain into a cancelled context cancels it in chain order, as `cancel()` does:
    /// the `catch` after an `ensure` runs after the `ensure` body.
    func testJoiningIntoACancelledContextSettlesInChainOrder() {
        let cancelled = CancelContext()
        cancelled.cancel()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let queue = DispatchQueue(label: "edge.ensure")
        queue.suspend()
        let log = Recorder<String>()
        let ensured = head.ensure(on: queue) { log.append("ensure") }
        ensured.catch(on: nil, policy: .allErrors) { _ in log.append("catch") }

        _ = ensured.cancellize(cancelContext: cancelled)
        XCTAssertTrue(ensured.isCancelled)
        XCTAssertEqual(log.all, [], "the catch after ensure ran before the ensure body")

        queue.resume()
        queue.sync {}
        XCTAssertEqual(log.all, ["ensure", "catch"])
        resolver.fulfill(1)
    }

    /// The same through `ensureThen`: the steps after it must wait for the cleanup.
    func testJoiningIntoACancelledContextWaitsForEnsureThenCleanup() {
        let cancelled = CancelContext()
        cancelled.cancel()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let (cleanup, cleanupDone) = Guarantee<Void>.pending()
        let log = Recorder<String>()
        let ensured = head.ensureThen(on: nil) {
            log.append("cleanup started")
            return cleanup
        }
        ensured.catch(on: nil, policy: .allErrors) { _ in log.append("catch") }

        _ = ensured.cancellize(cancelContext: cancelled)
        XCTAssertFalse(log.all.contains("catch"), "catch ran before the ensureThen cleanup resolved: \(log.all)")
        cleanupDone(())
        XCTAssertEqual(log.all.last, "catch")
        resolver.fulfill(1)
    }

    // MARK: - Steps made or settling while cancel() runs

    /// A step made on one thread while another cancels the chain never runs its queued body:
    /// with `queue` suspended until both threads are done, the step was either rejected by the
    /// cancellation or finds the chain cancelled when its body is about to start.
    func testStepMadeConcurrentlyWithCancelNeverRunsItsBodyAfterwards() {
        assertNoQueuedBodyRuns(label: "edge.step", "step bodies started after cancel() had returned") { queue, body in
            let (head, resolver) = CancellablePromise<Int>.pending()
            resolver.fulfill(1)
            let made = SendableBox<CancellablePromise<Int>?>(nil)
            let box = UncheckedBox(head)
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let head = box.value
                if i == 0 { made.value = head.map(on: queue, body) } else { head.cancel() }
            }
            return made.value!
        }
    }

    /// A step after an observer, when the observer settles while another thread cancels the
    /// chain, never runs its queued body: either the observer passes the cancellation on, or
    /// the step finds the chain cancelled when its body is about to start.
    func testStepAfterObserverNeverRunsItsBodyAfterCancelReturned() {
        let message = "step bodies after an observer started after cancel() had returned"
        assertNoQueuedBodyRuns(label: "edge.observer", message) { queue, body in
            let (head, resolver) = CancellablePromise<Int>.pending()
            let step = head.ensure(on: nil) {}.map(on: queue, body)
            let box = UncheckedBox((head, resolver))
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let (head, resolver) = box.value
                if i == 0 { resolver.fulfill(1) } else { head.cancel() }
            }
            return step
        }
    }

    /// Runs 50,000 rounds of `round`, which makes a step whose body (`body`, counting its runs)
    /// is queued on `queue` while its chain is cancelled; `queue` stays suspended until every
    /// round is over. Then checks that no body ran and that no step fulfilled.
    private func assertNoQueuedBodyRuns(
        label: String, _ message: String, file: StaticString = #filePath, line: UInt = #line,
        round: (_ queue: DispatchQueue, _ body: @escaping @Sendable (Int) -> Int) -> CancellablePromise<Int>
    ) {
        let queue = DispatchQueue(label: label)
        queue.suspend()
        let ran = Counter()
        let body: @Sendable (Int) -> Int = { value in
            ran.increment()
            return value
        }
        var steps: [CancellablePromise<Int>] = []
        for _ in 0..<50_000 { steps.append(round(queue, body)) }
        queue.resume()
        queue.sync {}
        XCTAssertEqual(ran.value, 0, message, file: file, line: line)
        XCTAssertEqual(
            steps.filter { $0.isFulfilled }.count, 0, "steps of cancelled chains fulfilled", file: file, line: line)
    }

    // MARK: - autoCancel and a loser linked to the winner

    /// The input that settled a combinator is never cancelled, nor anything the winner's value
    /// depends on: a loser whose `then` body returned the winner is cancelled without its link
    /// reaching back into the winner's chain (the winner's `isCancelled` stays false and the
    /// step after it fulfils).
    func testAutoCancelDoesNotCancelTheWinnersChainThroughALosersLink() {
        let (winner, winnerResolver) = CancellablePromise<Int>.pending()
        let (other, otherResolver) = CancellablePromise<Int>.pending()
        let loser = other.then(on: nil) { _ in winner }
        let result = race([winner, loser], autoCancel: true)
        let next = winner.then(on: nil) { _ in CancellablePromise<Int>.value(2) }
        otherResolver.fulfill(0)  // the loser's step now waits on (is linked to) the winner

        winnerResolver.fulfill(1)
        XCTAssertEqual(result.value, 1)
        XCTAssertFalse(winner.isCancelled, "the winner's chain was cancelled by autoCancel")
        XCTAssertEqual(next.value, 2, "a step after the winner was cancelled by autoCancel: \(next)")
    }

    // MARK: - A body returning a promise of its own chain

    /// With no cancel handle left, a chain's cancel closures are released uncalled, also when a
    /// `then` body returned a promise of the same chain (a link to its own context would keep
    /// the chain's handle alive).
    func testThenReturningAPromiseOfItsOwnChainDoesNotKeepTheChainCancellable() {
        let released = Counter()
        weak var weakContext: CancelContext?
        var resolver: Resolver<Int>?
        do {
            let shared = CancelContext()
            let first = CancellablePromise<Int>.value(1).cancellize(cancelContext: shared)
            let probe = DeinitProbe { released.increment() }
            let second = CancellablePromise<Int> { r in
                resolver = r
                return { _ = probe }
            }.cancellize(cancelContext: shared)
            weakContext = second.cancelContext
            _ = first.then(on: nil) { _ in second }
        }
        XCTAssertNil(weakContext, "the step's link to its own chain keeps a handle of it alive")
        XCTAssertEqual(released.value, 1, "cancel closure kept although no handle is left")
        resolver?.fulfill(2)
        XCTAssertEqual(released.value, 1)
    }

    // MARK: - when(_:while:) on a long-lived cancelPromise

    /// A long-lived `cancelPromise` keeps only live registrations: a `when(_:while:)` result
    /// whose promise settled leaves it, with its value.
    func testWhenWhileDoesNotAccumulateSettledRegistrationsOnALongLivedCancelPromise() {
        let (cancelPromise, cancelResolver) = Promise<Void>.pending()
        weak var weakOutput: Promise<Int>?
        for index in 0..<100 {
            let output = when(Promise.value(index), while: cancelPromise)
            XCTAssertEqual(output.value, index)
            if index == 0 { weakOutput = output }
        }
        XCTAssertNil(weakOutput, "a settled when(_:while:) output is kept by cancelPromise")
        cancelResolver.fulfill(())
    }
}
