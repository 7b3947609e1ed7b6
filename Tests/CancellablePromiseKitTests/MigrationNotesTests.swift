import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// The notes of the "Migrating from PromiseKit / CancellablePromiseKit" article that PromiseKit 7
// code meets, each pinned as the article states it.

private struct Stop: Error, Equatable {}
private struct Other: Error, Equatable {}

final class MigrationNotesTests: XCTestCase {
    // MARK: Creating a cancellable promise from a resolver body

    /// `CancellablePromise(cancellable: nil) { seal in … }` compiles with a multi-statement body
    /// that returns nothing (the unlabelled form binds to the initialiser whose body returns a
    /// cancel function), and the promise it makes settles through `seal` and can be cancelled.
    func testCancellableNilTakesAMultiStatementResolverBody() {
        let fulfilled = CancellablePromise(cancellable: nil) { seal in
            let greeting = "hello"
            seal.fulfill(greeting.count)
        }
        XCTAssertEqual(fulfilled.value, 5)

        let pending = CancellablePromise<Void>(cancellable: nil) { seal in
            let later = seal
            _ = later
        }
        pending.cancel()
        XCTAssertEqual(pending.error as? CancellablePromiseError, .cancelled)
    }

    /// The unlabelled form with a body that returns the cancel function is the cancel-block
    /// initialiser: its function is called by `cancel()`.
    func testUnlabelledBodyReturningACancelFunctionIsTheCancelBlockInitialiser() {
        let cancelled = Flag()
        let promise = CancellablePromise<Void> { _ in
            return { cancelled.raise() }
        }
        promise.cancel()
        XCTAssertTrue(cancelled.value)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: race and when: the inputs' contexts

    /// Without `autoCancel`, cancelling the result of `race` or `when` rejects the result only:
    /// the inputs stay pending (PromiseKit 7 cancelled them).
    func testCancellingACombinatorLeavesTheInputsWithoutAutoCancel() {
        let (a, _) = CancellablePromise<Int>.pending()
        let (b, _) = CancellablePromise<Int>.pending()
        race(a, b).cancel()
        when(fulfilled: a, b).cancel()
        XCTAssertTrue(a.isPending)
        XCTAssertTrue(b.isPending)
        XCTAssertFalse(a.isCancelled || b.isCancelled)
    }

    /// With `autoCancel: true`, cancelling the result of `race` or `when` cancels every input,
    /// as PromiseKit 7's joined contexts did.
    func testCancellingACombinatorWithAutoCancelCancelsEveryInput() {
        let raced = [CancellablePromise<Int>.pending().promise, CancellablePromise<Int>.pending().promise]
        race(raced, autoCancel: true).cancel()
        XCTAssertEqual(raced.map { $0.error as? CancellablePromiseError }, [.cancelled, .cancelled])

        let joined = [CancellablePromise<Int>.pending().promise, CancellablePromise<Int>.pending().promise]
        when(fulfilled: joined, autoCancel: true).cancel()
        XCTAssertEqual(joined.map { $0.error as? CancellablePromiseError }, [.cancelled, .cancelled])

        let resolved = [CancellablePromise<Int>.pending().promise]
        when(resolved: resolved, autoCancel: true).cancel()
        XCTAssertEqual(resolved[0].error as? CancellablePromiseError, .cancelled)
    }

    // MARK: A body running when its chain is cancelled

    /// Waits until a body running on `queue` signals `started`, runs `cancel` while the body
    /// waits for `release`, then releases it and waits until the body has returned.
    private func cancelOnceTheBodyStarted(
        started: Handshake, release: Handshake, queue: DispatchQueue, cancel: () -> Void,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertTrue(started.wait(seconds: 10), file: file, line: line)
        cancel()
        release.signal()
        queue.sync {}
    }

    /// A `map` body already running on another thread when the chain is cancelled completes,
    /// its result is discarded (the chain stays rejected with the cancellation), and the bodies
    /// after it never run.
    func testABodyRunningWhenTheChainIsCancelledCompletesAndItsResultIsDiscarded() {
        let queue = DispatchQueue(label: "body")
        let started = Handshake()
        let release = Handshake()
        let completed = Flag()
        let nextRan = Flag()
        let (head, resolver) = CancellablePromise<Int>.pending()
        let mapped = head.map(on: queue) { value -> Int in
            started.signal()
            release.wait()
            completed.raise()
            return value + 1
        }
        let last = mapped.map(on: nil) { value -> Int in
            nextRan.raise()
            return value
        }
        resolver.fulfill(1)
        cancelOnceTheBodyStarted(started: started, release: release, queue: queue) { last.cancel() }
        XCTAssertTrue(completed.value, "the running body completed")
        XCTAssertEqual(waitForError(mapped) as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(last.error as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(nextRan.value)
    }

    /// The work of a promise returned by a `then` body that was running when the chain was
    /// cancelled is cancelled: the task its producer attached is cancelled once.
    func testAPromiseReturnedByABodyRunningWhenCancelledIsCancelled() {
        let queue = DispatchQueue(label: "body")
        let started = Handshake()
        let release = Handshake()
        let task = TokenCancellableSpy()
        let returned = Promise<Int>(cancellable: task) { _ in }
        let (head, resolver) = CancellablePromise<Int>.pending()
        let chain = head.then(on: queue) { _ -> Promise<Int> in
            started.signal()
            release.wait()
            return returned
        }
        resolver.fulfill(1)
        cancelOnceTheBodyStarted(started: started, release: release, queue: queue) { chain.cancel() }
        XCTAssertEqual(task.cancelCount, 1, "the returned promise's task was cancelled")
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: What to write instead of what is not provided

    /// Instead of `recover(only:)`: a `recover` body that rethrows the errors it does not handle.
    func testRecoverThatRethrowsOtherErrorsReplacesRecoverOnly() {
        func recoverStop(_ promise: CancellablePromise<Int>) -> CancellablePromise<Int> {
            promise.recover(on: nil) { error -> CancellablePromise<Int> in
                guard error is Stop else { throw error }
                return .value(0)
            }
        }
        XCTAssertEqual(recoverStop(CancellablePromise(error: Stop())).value, 0)
        XCTAssertEqual(recoverStop(CancellablePromise(error: Other())).error as? Other, Other())
    }

    /// Instead of Swift's `Result` cases: the result's `get()` gives a `Swift.Result`.
    func testSwiftResultFromAPromiseResult() {
        let result = CancellablePromise.value(3).result!
        let swiftResult = Swift.Result { try result.get() }
        XCTAssertEqual(try swiftResult.get(), 3)
    }

    // MARK: A late follower of cancelled shared work

    /// A follower made after the shared work was cancelled is rejected with
    /// `CancellablePromiseError.cancelled` (its error says `isCancelled`), while its own
    /// `isCancelled` is `false`: nobody cancelled it. The shared promise says the work was
    /// cancelled.
    func testALateFollowerOfCancelledWorkIsRejectedButNotItselfCancelled() {
        let (source, _) = CancellablePromise<Int>.pending()
        let shared = SharedCancellablePromise(source)
        let first = shared.follower()
        first.cancel()
        XCTAssertTrue(shared.isCancelled)

        let late = shared.follower()
        XCTAssertEqual(late.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(late.error?.isCancelled == true)
        XCTAssertFalse(late.isCancelled)
    }
}
