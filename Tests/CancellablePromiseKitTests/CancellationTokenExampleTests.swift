import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// The README of a cancellation-token library for Swift, each example as a test, in this
// library's names: a request and its token, registering a `Cancellable`, the token as a future
// of a `Bool`, and the token combinators. The network is a `StandInURLSession` (no network).
// Adapted names:
//   CancellationTokenType (protocol)          → CancellationToken (final class)
//   Cancelable                                → Cancellable
//   register(cancelable:) / (cancelable:queue:) → register(_:) / register(_:on:)
//   onCancel(f:) / onComplete(f:)             → onCancel(on:_:) / onComplete(on:_:)
//   map(f:) / flatMap(f:)                     → map(_:) / flatMap(_:)
//   CancellationTokenNone                     → CancellationToken.none
//   isCancellationRequested                   → isCancelled
//   URLSession / URLSessionTask               → StandInURLSession / StandInDataTask
//   (response: URLResponse?)                  → (response: String?)

// "A handy URLSession extension": the handler captures the task weakly.
extension StandInURLSession {
    func data(
        from url: URL, cancellationToken: CancellationToken,
        completion: @escaping (Data?, String?, Error?) -> Void
    ) {
        let task = self.dataTask(with: url) { data, response, error in
            completion(data, response, error)
        }
        cancellationToken.onCancel { [weak task] in
            task?.cancel()
        }
        task.resume()
    }

    // "A slightly better way": `register` holds the task weakly, no handler to write.
    // (`extension URLSessionTask: Cancelable {}` → StandInDataTask conforms to Cancellable;
    // PromiseFoundation makes URLSessionTask conform.)
    func dataRegistered(
        from url: URL, cancellationToken: CancellationToken,
        completion: @escaping (Data?, String?, Error?) -> Void
    ) {
        let task = self.dataTask(with: url) { data, response, error in
            completion(data, response, error)
        }
        cancellationToken.register(task)
        task.resume()
    }
}

/// "task(param:cancellationToken:completion:)" monitoring its token by polling before each of
/// its `steps` steps of work (`step(index)`).
private func task(
    param: Int, cancellationToken: CancellationToken, steps: Int,
    step: @escaping @Sendable (Int) -> Void,
    completion: @escaping @Sendable (Int?, Error?) -> Void
) {
    DispatchQueue.global().async {
        for index in 0..<steps {
            if cancellationToken.isCancelled {
                completion(nil, CancellablePromiseError.cancelled)
                return
            }
            step(index)
        }
        completion(param, nil)
    }
}

/// The README's view controller, without UIKit.
private final class ViewController {
    let session: StandInURLSession
    var cancellationRequest = CancellationRequest()
    let results = Recorder<Result<Data>>()  // appended from URLSession-like callback queues

    init(session: StandInURLSession) { self.session = session }

    func load(_ url: URL) {
        self.cancellationRequest = CancellationRequest()  // invalidate any previous obsolete cancellation handlers
        session.data(from: url, cancellationToken: self.cancellationRequest.token) { data, _, error in
            // handle (data, response, error)
            self.results.append(data.map { .fulfilled($0) } ?? .rejected(error!))
        }
    }

    func viewWillDisappear(_ animated: Bool) {
        self.cancellationRequest.cancel()
    }
}

final class CancellationTokenExampleTests: XCTestCase {
    private let url = URL(string: "https://example.invalid/data")!

    // MARK: Overview

    func testRequestIsCreatedAndCancelledLater() {
        let cancellationRequest = CancellationRequest()
        XCTAssertFalse(cancellationRequest.token.isCancelled)
        cancellationRequest.cancel()
        XCTAssertTrue(cancellationRequest.token.isCancelled)
    }

    func testPollingTaskStopsWhenCancelled() {
        let cr = CancellationRequest()
        let working = Handshake()
        let cancelled = Handshake()
        let finished = Handshake()
        let outcome = Recorder<String>()
        let stepsDone = Counter()
        task(param: 1, cancellationToken: cr.token, steps: 3) { _ in
            working.signal()
            cancelled.wait()  // the first step lasts until the token is cancelled
            stepsDone.increment()
        } completion: { result, error in
            outcome.append(error.map { "\($0.isCancelled ? "cancelled" : "failed")" } ?? "value \(result!)")
            finished.signal()
        }
        working.wait()
        cr.cancel()
        cancelled.signal()
        XCTAssertTrue(finished.wait())
        XCTAssertEqual(outcome.all, ["cancelled"])
        XCTAssertEqual(stepsDone.value, 1)
    }

    func testURLSessionExtensionWithOnCancelCancelsTheTask() {
        let session = StandInURLSession()
        let cr = CancellationRequest()
        let errors = Recorder<Error>()
        let completed = Handshake()
        session.data(from: url, cancellationToken: cr.token) { _, _, error in
            errors.append(error!)
            completed.signal()
        }
        let task = session.tasks[0]
        XCTAssertTrue(task.wasResumed)
        cr.cancel()
        XCTAssertTrue(completed.wait(seconds: 5))
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertTrue(errors.all.first is StandInCancelledError)
    }

    func testURLSessionExtensionHandlerDoesNotKeepTheTaskAlive() {
        let cr = CancellationRequest()
        weak var weakTask: StandInDataTask?
        var received: Data?
        do {
            let session = StandInURLSession()  // records its tasks until it is released
            session.data(from: url, cancellationToken: cr.token) { data, _, _ in received = data }
            weakTask = session.tasks[0]
            session.tasks[0].finish(data: Data([1]))
        }
        XCTAssertEqual(received, Data([1]))
        XCTAssertNil(weakTask)  // the token's handler captured it weakly
        XCTAssertEqual(cr.token.pendingHandlerCount, 1)  // the handler itself waits, harmless
        cr.cancel()  // `task?.cancel()` on nil: nothing happens
        XCTAssertEqual(cr.token.pendingHandlerCount, 0)
    }

    // MARK: Usage: register a Cancellable

    func testRegisterCancelableCancelsTheTask() {
        let session = StandInURLSession()
        let cr = CancellationRequest()
        let completed = Handshake()
        session.dataRegistered(from: url, cancellationToken: cr.token) { _, _, error in
            XCTAssertTrue(error is StandInCancelledError)
            completed.signal()
        }
        cr.cancel()
        XCTAssertTrue(completed.wait(seconds: 5))
        XCTAssertEqual(session.tasks[0].cancelCount, 1)
    }

    func testRegisterCancelableHoldsTheTaskWeakly() {
        let cr = CancellationRequest()
        weak var weakTask: StandInDataTask?
        do {
            let task = StandInDataTask(url: url) { _, _, _ in }
            weakTask = task
            cr.token.register(task)
            task.resume()
        }
        XCTAssertNil(weakTask)  // only the token saw it: it was not retained
        cr.cancel()
    }

    func testRegisterCancelableOnQueueHonoursTheQueue() {
        let queue = TokenCancellableSpy.queue(labelled: "token-example.register")
        let cr = CancellationRequest()
        let spy = TokenCancellableSpy()
        cr.token.register(spy, on: queue)
        cr.cancel()
        XCTAssertEqual(spy.cancelQueueLabels(after: queue), ["token-example.register"])
    }

    func testViewControllerCancelsOnDisappearAndReplacingTheRequestInvalidatesOldHandlers() {
        let session = StandInURLSession()
        let controller = ViewController(session: session)
        controller.load(url)
        let first = session.tasks[0]
        let firstToken = controller.cancellationRequest.token
        controller.load(url)  // replaces the request: the first token completes "not cancelled"
        XCTAssertTrue(firstToken.isCompleted)
        XCTAssertFalse(firstToken.isCancelled)
        XCTAssertEqual(firstToken.pendingHandlerCount, 0)
        first.finish(data: Data([1]))
        let second = session.tasks[1]
        controller.viewWillDisappear(true)
        XCTAssertEqual(first.cancelCount, 0)
        XCTAssertEqual(second.cancelCount, 1)
        XCTAssertTrue(eventually(seconds: 10) { controller.results.all.count == 2 })
        XCTAssertEqual(controller.results.all.first?.isFulfilled, true)
    }

    // MARK: A Cancellation Token is a Future

    func testTokenStartsUndeterminedAndCompletesWithTrue() {
        let cr = CancellationRequest()
        XCTAssertFalse(cr.token.isCompleted)
        let value = SendableBox<Bool?>(nil)
        cr.token.onComplete { value.value = $0 }
        cr.cancel()
        XCTAssertEqual(value.value, true)
    }

    func testRequestDeallocationCompletesWithFalseAndReleasesHandlers() {
        let released = Counter()
        var cr: CancellationRequest? = CancellationRequest()
        let token = cr!.token
        let onCompleteValue = SendableBox<Bool?>(nil)
        let onCancelRan = Flag()
        do {
            let probe = DeinitProbe { released.increment() }
            token.onCancel {
                probe.touch()
                onCancelRan.raise()
            }
            token.onComplete { value in
                probe.touch()
                onCompleteValue.value = value
            }
        }
        cr = nil
        XCTAssertEqual(onCompleteValue.value, false)  // "can never be cancelled any more"
        XCTAssertFalse(onCancelRan.value)  // skipped
        XCTAssertEqual(released.value, 1)  // every handler was released
        // Once completed a token never changes; handlers registered later run or are skipped.
        let late = SendableBox<Bool?>(nil)
        token.onComplete { late.value = $0 }
        XCTAssertEqual(late.value, false)
    }

    // MARK: Combinators

    func testMapCompletesWithTheTransformValue() {
        let cr = CancellationRequest()
        let notReally = cr.token.map { false }
        let really = cr.token.map { true }
        cr.cancel()
        XCTAssertFalse(notReally.isCancelled)
        XCTAssertTrue(notReally.isCompleted)
        XCTAssertTrue(really.isCancelled)
    }

    func testFlatMapCompletesWithTheEventualValueOfTheReturnedToken() {
        let (left, right) = (CancellationRequest(), CancellationRequest())
        let token = left.token.flatMap { right.token }
        left.cancel()
        XCTAssertFalse(token.isCompleted)
        right.cancel()
        XCTAssertTrue(token.isCancelled)
    }

    func testAndImplementedWithFlatMapAndMapAsInTheReadme() {
        // The README's `&&`, written with the combinators (named `readmeAnd` here, since the
        // library defines `&&` itself with the same cancellation semantics).
        func readmeAnd(_ left: CancellationToken, _ right: CancellationToken) -> CancellationToken {
            left.flatMap {
                //  executes only when left has been cancelled.
                right.map {
                    // executes only when right has been cancelled.
                    true  // completes the returned token with true (cancelled)
                }
            }
        }
        for (cancelLeft, cancelRight) in [(true, true), (true, false), (false, true), (false, false)] {
            var left: CancellationRequest? = CancellationRequest()
            var right: CancellationRequest? = CancellationRequest()
            let readme = readmeAnd(left!.token, right!.token)
            let ours = left!.token && right!.token
            if cancelLeft { left!.cancel() }
            if cancelRight { right!.cancel() }
            left = nil
            right = nil
            XCTAssertTrue(readme.isCompleted)
            XCTAssertTrue(ours.isCompleted)
            XCTAssertEqual(readme.isCancelled, cancelLeft && cancelRight)
            XCTAssertEqual(ours.isCancelled, readme.isCancelled)
        }
    }

    func testOrCompletesEvenWhenNeitherIsCancelled() {
        var left: CancellationRequest? = CancellationRequest()
        var right: CancellationRequest? = CancellationRequest()
        let either = left!.token || right!.token
        left = nil
        right = nil
        XCTAssertTrue(either.isCompleted)  // the README library's `||` stays pending forever here
        XCTAssertFalse(either.isCancelled)
    }

    func testNoneTokenNeverCancels() {
        let value = SendableBox<Bool?>(nil)
        CancellationToken.none.onComplete { value.value = $0 }
        XCTAssertEqual(value.value, false)
        XCTAssertTrue(CancellationToken.none.isCompleted)
        XCTAssertFalse(CancellationToken.none.isCancelled)
    }
}
