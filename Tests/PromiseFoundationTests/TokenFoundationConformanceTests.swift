import Foundation
import PromiseFoundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `URLSessionTask` and `Process` as `Cancellable`s registered on a cancellation token. No
/// network: tasks go to a closed local port or are never resumed.
final class TokenFoundationConformanceTests: XCTestCase {
    private let closedPort = URL(string: "http://127.0.0.1:9/")!

    // MARK: URLSessionTask

    func testURLSessionTaskRegisteredOnTokenIsCancelled() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let request = CancellationRequest()
        let completed = Handshake()
        let receivedError = SendableBox<Error?>(nil)
        let task = session.dataTask(with: closedPort) { _, _, error in
            receivedError.value = error
            completed.signal()
        }
        XCTAssertFalse(task.isCancelled)
        request.token.register(task)
        request.cancel()
        XCTAssertTrue(task.isCancelled)  // .canceling
        task.resume()
        XCTAssertTrue(completed.wait(seconds: 10))
        XCTAssertTrue(task.isCancelled)  // completed with URLError.cancelled
        let error = receivedError.value as NSError?
        XCTAssertEqual(error?.domain, NSURLErrorDomain)
        XCTAssertEqual(error?.code, NSURLErrorCancelled)
    }

    func testURLSessionTaskFailingOtherwiseIsNotCancelled() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let completed = Handshake()
        let task = session.dataTask(with: closedPort) { _, _, _ in completed.signal() }
        task.resume()
        XCTAssertTrue(completed.wait(seconds: 30))
        XCTAssertFalse(task.isCancelled)
    }

    func testTokenBoundPromiseOverURLSessionTask() {
        // A token-bound promise over a real task: rejected with the cancellation error, not the
        // task's own URLError.cancelled.
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let request = CancellationRequest()
        let url = closedPort
        let promise = Promise<Data>(cancellationToken: request.token) { resolver in
            let task = session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
            return task.cancel  // not resumed: it only ends by cancellation
        }
        request.cancel()
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: Process

    func testProcessRegisteredOnTokenIsTerminated() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sleep")
        process.arguments = ["30"]
        let request = CancellationRequest()
        request.token.register(process)
        XCTAssertFalse(process.isCancelled)
        try process.run()
        let started = Date()
        request.cancel()
        // Real process: waits for the child that the cancellation terminated to exit.
        process.waitUntilExit()
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertTrue(process.isCancelled)
        XCTAssertEqual(process.terminationReason, .uncaughtSignal)
    }

    func testCancellingAProcessThatNeverRanOrHasExitedIsSafe() throws {
        let notLaunched = Process()
        notLaunched.cancel()
        XCTAssertTrue(notLaunched.isCancelled)

        let exited = Process()
        exited.executableURL = URL(fileURLWithPath: "/bin/sh")
        exited.arguments = ["-c", "exit 0"]
        try exited.run()
        exited.waitUntilExit()
        XCTAssertFalse(exited.isCancelled)
        exited.cancel()
        XCTAssertTrue(exited.isCancelled)
        XCTAssertEqual(exited.terminationReason, .exit)
    }

    func testCancelledProcessBookkeepingDoesNotRetainTheProcess() {
        weak var weakProcess: Process?
        autoreleasepoolIfAvailable {
            let process = Process()
            process.cancel()
            weakProcess = process
        }
        XCTAssertNil(weakProcess)
        XCTAssertFalse(Process().isCancelled)  // a new object at a reused address is not cancelled
    }
}

private func autoreleasepoolIfAvailable(_ body: () -> Void) {
    #if canImport(ObjectiveC)
    autoreleasepool(invoking: body)
    #else
    body()
    #endif
}
