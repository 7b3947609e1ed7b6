import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// A convention for PromiseKit code in which every function that starts work takes an optional
// cancellation token: the hand-written form of the convention, each of its examples as a test,
// next to the first-class form `Promise(cancellationToken:)`.
// The network is a `StandInURLSession` whose tasks the test finishes by hand. Adapted names:
//   PromiseCancellationToken (passed to functions) → CancellationToken (from a CancellationRequest)
//   PromiseCancellationToken() / token.cancel()    → CancellationRequest() / request.cancel()
//   addCancelCommand(ClosureCancelCommand { … })   → onCancel { … }
//   Promise<Data>.pending() → (promise, fulfill, reject) → (promise, resolver)
//   fulfill(x) / reject(e)                          → resolver.fulfill(x) / resolver.reject(e)
//   NSError.cancelledError()                        → CancellablePromiseError.cancelled
//   error.isCancelledError                          → error.isCancelled
//   URLSession.shared.dataTask(with:)              → StandInURLSession().dataTask(with:)
//   var dataTask: URLSessionDataTask?               → a SendableBox (Swift 6: the onCancel handler
//                                                     that cancels it is @Sendable)

private final class FetchClient: @unchecked Sendable {
    let session = StandInURLSession()

    // The convention's hand-written `cancellableFetchData`, as written (names adapted).
    func cancellableFetchData(with url: URL, cancellationToken: CancellationToken? = nil) -> Promise<Data> {
        let dataTask = SendableBox<StandInDataTask?>(nil)
        let (promise, resolver) = Promise<Data>.pending()

        cancellationToken?.onCancel {
            dataTask.value?.cancel()
            // Check if the promise has been resolved, no point of rejecting
            // if it has been completed
            if !promise.isFulfilled {
                resolver.reject(CancellablePromiseError.cancelled)
            }
        }

        dataTask.value = session.dataTask(with: url) { data, _, error in
            // On the completion of the asynchronous task, to maintain consistency,
            // check whether the token has been cancelled, in case the cancellation request
            // didn't come in time for the underlying task to be cancelled.
            if let token = cancellationToken, token.isCancelled, !promise.isFulfilled {
                resolver.reject(CancellablePromiseError.cancelled)
            } else {
                if let data = data {
                    resolver.fulfill(data)
                } else if let error = error {
                    resolver.reject(error)
                }
            }
        }
        dataTask.value?.resume()

        return promise
    }

    // The same function with the first-class helper: the token is checked before starting,
    // when cancelled, and again on completion; the task is attached for `cancellize()`.
    func fetchData(with url: URL, cancellationToken: CancellationToken? = nil) -> Promise<Data> {
        Promise(cancellationToken: cancellationToken) { resolver in
            let task = session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
            task.resume()
            return task.cancel
        }
    }

    // The convention's `noncancellableFetchData`, its `if let data … else if let error …` spelt
    // as the one call `resolve(_:_:)` (which rejects a completion with neither).
    func noncancellableFetchData(with url: URL) -> Promise<Data> {
        let (promise, resolver) = Promise<Data>.pending()
        session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }.resume()
        return promise
    }
}

final class TokenArgumentExampleTests: XCTestCase {
    private let google = URL(string: "https://www.google.com")!
    private let apple = URL(string: "https://www.apple.com")!

    // MARK: cancellableFetchData (the hand-written form)

    func testHandWrittenCancellableFetchDataFulfilsWithoutCancellation() {
        let client = FetchClient()
        let request = CancellationRequest()
        let promise = client.cancellableFetchData(with: google, cancellationToken: request.token)
        client.session.task(for: google)!.finish(data: Data([1, 2]))
        XCTAssertEqual(promise.value, Data([1, 2]))
    }

    func testHandWrittenCancellableFetchDataRejectsWhenTokenCancelled() {
        let client = FetchClient()
        let request = CancellationRequest()
        let promise = client.cancellableFetchData(with: google, cancellationToken: request.token)
        let task = client.session.task(for: google)!
        request.cancel()
        XCTAssertEqual(task.cancelCount, 1)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(promise.error!.isCancelled)
    }

    func testHandWrittenCancellableFetchDataChecksTokenAgainOnCompletion() {
        // The server answers just as the user cancels: the completion handler runs once the
        // token is cancelled but before the hand-written cancel command, and must reject.
        let client = FetchClient()
        let request = CancellationRequest()
        let task = SendableBox<StandInDataTask?>(nil)
        let promiseRejectedByCompletion = Flag()
        let promise = SendableBox<Promise<Data>?>(nil)
        request.token.onCancel {
            task.value?.finish(data: Data([9]))
            if promise.value?.isRejected ?? false { promiseRejectedByCompletion.raise() }
        }
        promise.value = client.cancellableFetchData(with: google, cancellationToken: request.token)
        task.value = client.session.task(for: google)
        request.cancel()
        XCTAssertTrue(promiseRejectedByCompletion.value)
        XCTAssertEqual(promise.value?.error as? CancellablePromiseError, .cancelled)
    }

    func testHandWrittenCancellableFetchDataLeavesPromisePendingWithoutDataOrError() {
        // A caveat of the hand-written completion handler, kept as written: neither data nor error
        // leaves the promise pending until the token is cancelled.
        let client = FetchClient()
        let request = CancellationRequest()
        let promise = client.cancellableFetchData(with: google, cancellationToken: request.token)
        client.session.task(for: google)!.finish(data: nil, error: nil)
        XCTAssertTrue(promise.isPending)
        request.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testHandWrittenCancellableFetchDataWithoutTokenIsAPlainPromise() {
        let client = FetchClient()
        let promise = client.cancellableFetchData(with: google)
        client.session.task(for: google)!.finish(data: Data([3]))
        XCTAssertEqual(promise.value, Data([3]))
    }

    func testHandWrittenNoncancellableFetchData() {
        let client = FetchClient()
        let promise = client.noncancellableFetchData(with: google)
        client.session.task(for: google)!.finish(data: Data([4]))
        XCTAssertEqual(promise.value, Data([4]))
    }

    // MARK: The first-class form

    func testFirstClassFetchDataRejectsAndCancelsTask() {
        let client = FetchClient()
        let request = CancellationRequest()
        let promise = client.fetchData(with: google, cancellationToken: request.token)
        let task = client.session.task(for: google)!
        XCTAssertTrue(task.wasResumed)
        request.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(task.cancelCount, 1)
        // Its own cancel error comes later, ignored.
        XCTAssertTrue(eventually(seconds: 10) { task.state == .completed })
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testFirstClassFetchDataDoesNotStartWithCancelledToken() {
        let client = FetchClient()
        let request = CancellationRequest()
        request.cancel()
        let promise = client.fetchData(with: google, cancellationToken: request.token)
        XCTAssertTrue(client.session.tasks.isEmpty)  // the hand-written form would start a request
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    func testFirstClassFetchDataRejectsWithInvalidCallingConventionWhenNoDataAndNoError() {
        let client = FetchClient()
        let promise = client.fetchData(with: google, cancellationToken: CancellationRequest().token)
        client.session.task(for: google)!.finish(data: nil, error: nil)
        XCTAssertNotNil(promise.error)  // never left pending, unlike the hand-written form
        XCTAssertFalse(promise.error!.isCancelled)
    }

    // MARK: doSomeChaining

    /// The convention's `doSomeChaining`, with the token cancelled during the non-cancellable step.
    func testDoSomeChainingCancelledDuringTheNonCancellableStep() {
        for useFirstClassForm in [false, true] {
            let client = FetchClient()
            let request = CancellationRequest()
            let token = request.token
            let fetch: @Sendable (URL, CancellationToken?) -> Promise<Data>
            if useFirstClassForm {
                fetch = { client.fetchData(with: $0, cancellationToken: $1) }
            } else {
                fetch = { client.cancellableFetchData(with: $0, cancellationToken: $1) }
            }
            let url = google
            let apple = self.apple
            let printed = Recorder<Int>()
            let caught = SendableBox<Error?>(nil)
            let done = Handshake()

            fetch(url, token).then(on: nil) { data -> Promise<Data> in
                printed.append(data.count)
                let differentURL = apple
                return fetch(differentURL, token)
            }.then(on: nil) { data -> Promise<Data> in
                printed.append(data.count)
                return client.noncancellableFetchData(with: url)
            }.then(on: nil) { _ -> Promise<Data> in
                return fetch(url, token)
            }.catch(on: nil, policy: .allErrors) { error in
                if error.isCancelled {
                    caught.value = error
                }
                done.signal()
            }

            client.session.tasks[0].finish(data: Data([1]))
            client.session.task(for: apple)!.finish(data: Data([1, 2]))
            XCTAssertEqual(client.session.tasks.count, 3)  // the non-cancellable request runs
            request.cancel()  // arrives while it runs: nothing to cancel there
            client.session.tasks[2].finish(data: Data([1, 2, 3]))
            XCTAssertTrue(done.wait(seconds: 5))

            XCTAssertEqual(printed.all, [1, 2])
            XCTAssertEqual(caught.value as? CancellablePromiseError, .cancelled)
            if useFirstClassForm {
                // The next cancellable step gets a cancelled token and does not start at all.
                XCTAssertEqual(client.session.tasks.count, 3)
            } else {
                // The hand-written form: its command, registered on an already-cancelled token,
                // still runs (at once) and rejects the promise; but it runs before `dataTask` is
                // assigned, so the request starts anyway and is not cancelled (a defect of the
                // hand-written form, which the first-class form above avoids).
                XCTAssertEqual(client.session.tasks.count, 4)
                XCTAssertTrue(client.session.tasks[3].wasResumed)
                XCTAssertEqual(client.session.tasks[3].cancelCount, 0)
            }
        }
    }

    func testDoSomeChainingCancelledDuringACancellableStep() {
        let client = FetchClient()
        let request = CancellationRequest()
        let token = request.token
        let url = google
        let reachedSecondStep = Flag()
        let caught = SendableBox<Error?>(nil)
        client.fetchData(with: url, cancellationToken: token).then(on: nil) { _ -> Promise<Data> in
            reachedSecondStep.raise()
            return client.fetchData(with: url, cancellationToken: token)
        }.catch(on: nil, policy: .allErrors) { caught.value = $0 }
        let first = client.session.tasks[0]
        request.cancel()
        XCTAssertEqual(first.cancelCount, 1)
        XCTAssertFalse(reachedSecondStep.value)
        XCTAssertTrue(caught.value?.isCancelled ?? false)
    }

    func testCancelBeforeTheTaskExistsStillCancelsIt() {
        // In the hand-written form a cancellation arriving before `dataTask` is assigned is lost for
        // the task; the first-class form registers only once the task exists.
        let client = FetchClient()
        let request = CancellationRequest()
        let url = google
        let promise = Promise<Data>(cancellationToken: request.token) { resolver in
            request.cancel()  // e.g. from another thread, before the task is created
            let task = client.session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
            task.resume()
            return task.cancel
        }
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(client.session.tasks[0].cancelCount, 1)
    }
}
