import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// Edge cases of the cancellation graph: steps made or settling while `cancel()` runs, joins into
// cancelled chains, links between a combinator's inputs, links to a chain's own promises, and
// registrations on a long-lived `cancelPromise`. Each test pins one behaviour; see its comment.

final class CancellationEdgeCaseTests: XCTestCase {
    /// A log that the test reads after the threads are done.
    final class Log: @unchecked Sendable {
        private let lock = NSLock()
        private var entries: [String] = []
        func append(_ entry: String) { lock.withLock { entries.append(entry) } }
        var value: [String] { lock.withLock { entries } }
    }

    /// A value handed from a racing thread to the test.
    final class Slot<Value>: @unchecked Sendable {
        private let lock = NSLock()
        private var stored: Value?
        func set(_ value: Value) { lock.withLock { stored = value } }
        var value: Value? { lock.withLock { stored } }
    }

    // MARK: - Sequence helpers skip `step`

    /// `map` on a fulfilled promise of a cancelled chain is rejected without running its body
    /// (`step`), but `mapValues`, `compactMapValues`, `flatMapValues`, `filterValues` and
    /// `firstValue(where:)` are built with `chained`: their entry is listed into the cancelled
    /// chain as "a step whose upstream will pass the cancellation on" (it never will: it is
    /// fulfilled), so the body runs after `cancel()` returned and the step fulfils.
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

    // MARK: - autoCancel combinators keep abandoned inputs alive

    // MARK: - Joining into a cancelled chain ignores observers

    /// Detail 19: a handler downstream of an observer runs after the observer's body. Cancelling
    /// the chain respects that (`markWaitingBehindObserver`), but joining an active chain into a
    /// cancelled context (`cancellize(cancelContext:)`, "the joined chain is cancelled") goes
    /// through `CancelState.absorb`, which rejects every moved member directly, observers
    /// included: the `catch` after `ensure` runs before the `ensure` body.
    func testJoiningIntoACancelledContextSettlesInChainOrder() {
        let cancelled = CancelContext()
        cancelled.cancel()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let queue = DispatchQueue(label: "edge.ensure")
        queue.suspend()
        let log = Log()
        let ensured = head.ensure(on: queue) { log.append("ensure") }
        ensured.catch(on: nil, policy: .allErrors) { _ in log.append("catch") }

        _ = ensured.cancellize(cancelContext: cancelled)
        XCTAssertTrue(ensured.isCancelled)
        XCTAssertEqual(log.value, [], "the catch after ensure ran before the ensure body")

        queue.resume()
        queue.sync {}
        XCTAssertEqual(log.value, ["ensure", "catch"])
        resolver.fulfill(1)
    }

    /// The same through `ensureThen`: the steps after it must wait for the cleanup.
    func testJoiningIntoACancelledContextWaitsForEnsureThenCleanup() {
        let cancelled = CancelContext()
        cancelled.cancel()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let (cleanup, cleanupDone) = Guarantee<Void>.pending()
        let log = Log()
        let ensured = head.ensureThen(on: nil) {
            log.append("cleanup started")
            return cleanup
        }
        ensured.catch(on: nil, policy: .allErrors) { _ in log.append("catch") }

        _ = ensured.cancellize(cancelContext: cancelled)
        XCTAssertFalse(log.value.contains("catch"), "catch ran before the ensureThen cleanup resolved: \(log.value)")
        cleanupDone(())
        XCTAssertEqual(log.value.last, "catch")
        resolver.fulfill(1)
    }

    // MARK: - Races with cancel() that run a step body after cancel() returned

    /// `step` checks for a cancellation, makes the step, then lists its entry. A `cancel()`
    /// in between finds nothing to reject, and `CancelState.list` on the cancelled chain
    /// assumes the upstream "will settle rejected" — but it fulfilled before the cancellation,
    /// so the body (queued on `queue`) runs after `cancel()` returned and the step fulfils.
    /// With `queue` suspended until both threads are done, no body may ever run: either the
    /// step was listed before the cancel (and is rejected by it) or it was made after it (and
    /// `step` rejects it at once).
    func testStepMadeConcurrentlyWithCancelNeverRunsItsBodyAfterwards() {
        let queue = DispatchQueue(label: "edge.step")
        queue.suspend()
        let ran = Counter()
        var steps: [CancellablePromise<Int>] = []
        let rounds = 50_000
        for _ in 0..<rounds {
            let (head, resolver) = CancellablePromise<Int>.pending()
            resolver.fulfill(1)
            let made = Slot<CancellablePromise<Int>>()
            let box = UncheckedBox(head)
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let head = box.value
                if i == 0 {
                    let step = head.map(on: queue) { value -> Int in
                        ran.increment()
                        return value
                    }
                    made.set(step)
                } else {
                    head.cancel()
                }
            }
            steps.append(made.value!)
        }
        queue.resume()
        queue.sync {}
        let fulfilled = steps.filter { $0.isFulfilled }.count
        XCTAssertEqual(ran.value, 0, "step bodies started after cancel() had returned")
        XCTAssertEqual(fulfilled, 0, "steps of cancelled chains fulfilled")
    }

    /// `markWaitingBehindObserver` treats a listed observer as "not run yet". An observer that
    /// has just passed its result on (`passOn` saw no cancellation) and settled, but whose entry
    /// is not unlisted yet, is still listed: `cancel()` then leaves the step after it
    /// unrejected ("it settles when the observer passes the cancellation on"), the observer
    /// fulfils, and the step's body runs after `cancel()` returned.
    func testStepAfterObserverNeverRunsItsBodyAfterCancelReturned() {
        let queue = DispatchQueue(label: "edge.observer")
        queue.suspend()
        let ran = Counter()
        var steps: [CancellablePromise<Int>] = []
        let rounds = 50_000
        for _ in 0..<rounds {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let step = head.ensure(on: nil) {}.map(on: queue) { value -> Int in
                ran.increment()
                return value
            }
            steps.append(step)
            let box = UncheckedBox((head, resolver))
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let (head, resolver) = box.value
                if i == 0 { resolver.fulfill(1) } else { head.cancel() }
            }
        }
        queue.resume()
        queue.sync {}
        let fulfilled = steps.filter { $0.isFulfilled }.count
        XCTAssertEqual(ran.value, 0, "step bodies after an observer started after cancel() had returned")
        XCTAssertEqual(fulfilled, 0, "steps of cancelled chains fulfilled")
    }

    // MARK: - autoCancel cancels the winner's chain through a loser's link

    /// Detail 8/17: the input that settled a combinator is never cancelled (its `isCancelled`
    /// stays false), nor anything the winner's value depends on. A loser whose `then` body
    /// returned the winner is linked to the winner's chain; when the winner settles, the race
    /// (registered on the winner first) cancels the loser's chain before the loser's step has
    /// followed the winner, and the cancellation follows the loser's link into the winner's
    /// chain: the winner reports `isCancelled` and its pending downstream step is rejected.
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

    // MARK: - A link to the step's own chain keeps the chain's handle alive

    /// Detail 14: with no cancel handle left, a chain's cancel closures are released uncalled.
    /// A `then` body that returns a promise of the same chain (chains joined with a shared
    /// context) links the step to its own context: storage → entry → link → CancelContext →
    /// storage, so the last handle never goes away while the step waits and the task's cancel
    /// closure (and everything it captures) is kept although nothing can cancel the chain.
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

    // MARK: - when(_:while:) keeps a registration per call on a long-lived cancelPromise

    /// Detail 20: `when(_:while:)`'s `cancelPromise` keeps only live registrations. Each call
    /// adds a `pipe` handler to `cancelPromise` holding its output promise (and value) until
    /// `cancelPromise` settles, even when the awaited promise settled long ago.
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
