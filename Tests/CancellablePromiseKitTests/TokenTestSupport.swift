import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

// Helpers of the token and async tests: a `Cancellable` spy and dispatch-based stand-ins for
// URLSession and its data tasks. The thread-safe boxes are in ThreadSafeBoxes.swift.

/// A `Cancellable` that counts `cancel()` calls and records on which queue the first came.
final class TokenCancellableSpy: Cancellable, @unchecked Sendable {
    static let queueKey = DispatchSpecificKey<String>()
    private let lock = NSLock()
    private var cancels = 0
    private var queueLabels: [String?] = []
    private let onDeinit: (@Sendable () -> Void)?

    init(onDeinit: (@Sendable () -> Void)? = nil) { self.onDeinit = onDeinit }
    deinit { onDeinit?() }

    func cancel() {
        let label = DispatchQueue.getSpecific(key: Self.queueKey)
        lock.withLock {
            cancels += 1
            queueLabels.append(label)
        }
    }

    var isCancelled: Bool { cancelCount > 0 }
    var cancelCount: Int { lock.withLock { cancels } }
    var cancelQueueLabels: [String?] { lock.withLock { queueLabels } }

    /// A serial queue a spy knows by `label`: a cancel that comes on it records that label.
    static func queue(labelled label: String) -> DispatchQueue {
        let queue = DispatchQueue(label: label)
        queue.setSpecific(key: queueKey, value: label)
        return queue
    }

    /// A new spy, registered with `token` to be cancelled on `queue`.
    static func registered(with token: CancellationToken, on queue: DispatchQueue) -> TokenCancellableSpy {
        let spy = TokenCancellableSpy()
        token.register(spy, on: queue)
        return spy
    }

    /// `cancelQueueLabels`, once `queue` has run what was sent to it before this call.
    func cancelQueueLabels(after queue: DispatchQueue) -> [String?] {
        queue.sync {}
        return cancelQueueLabels
    }
}

/// The error a `StandInDataTask` completes with when cancelled (URLSession's is
/// `URLError.cancelled`).
struct StandInCancelledError: Error, Equatable {}

/// A dispatch-based stand-in for `URLSessionDataTask` (no network): `resume()` starts it, the
/// test finishes it with `finish(data:error:)`, and `cancel()` makes it call its completion
/// handler asynchronously with `StandInCancelledError`, as URLSession does.
final class StandInDataTask: Cancellable, @unchecked Sendable {
    enum State: Equatable { case suspended, running, canceling, completed }

    let url: URL
    private let lock = NSLock()
    private var currentState = State.suspended
    private var completion: ((Data?, String?, Error?) -> Void)?
    private var cancels = 0

    init(url: URL, completion: @escaping (Data?, String?, Error?) -> Void) {
        self.url = url
        self.completion = completion
    }

    var state: State { lock.withLock { currentState } }
    var cancelCount: Int { lock.withLock { cancels } }
    var isCancelled: Bool { cancelCount > 0 }
    var wasResumed: Bool { state != .suspended }

    func resume() {
        lock.withLock {
            if currentState == .suspended { currentState = .running }
        }
    }

    func cancel() {
        let completion: ((Data?, String?, Error?) -> Void)? = lock.withLock {
            cancels += 1
            guard currentState == .suspended || currentState == .running else { return nil }
            currentState = .canceling
            defer { self.completion = nil }
            return self.completion
        }
        guard let completion else { return }
        let boxed = UncheckedBox(completion)
        DispatchQueue.global().async {
            self.lock.withLock { self.currentState = .completed }
            boxed.value(nil, nil, StandInCancelledError())
        }
    }

    /// Completes the task as the server would (ignored once cancelled or completed).
    func finish(data: Data?, error: Error? = nil) {
        let completion: ((Data?, String?, Error?) -> Void)? = lock.withLock {
            guard currentState == .running else { return nil }
            currentState = .completed
            defer { self.completion = nil }
            return self.completion
        }
        completion?(data, data == nil ? nil : "200 OK", error)
    }
}

/// A stand-in for `URLSession` that records the tasks it creates.
final class StandInURLSession: @unchecked Sendable {
    private let lock = NSLock()
    private var created: [StandInDataTask] = []

    func dataTask(with url: URL, completionHandler: @escaping (Data?, String?, Error?) -> Void) -> StandInDataTask {
        let task = StandInDataTask(url: url, completion: completionHandler)
        lock.withLock { created.append(task) }
        return task
    }

    var tasks: [StandInDataTask] { lock.withLock { created } }

    /// The last task created for `url`.
    func task(for url: URL) -> StandInDataTask? {
        lock.withLock { created.last { $0.url == url } }
    }
}

/// Whether `cancel()` turns `cancellable.isCancelled` from `false` to `true`.
func cancelTurnsIsCancelledOn(_ cancellable: any Cancellable) -> Bool {
    let before = cancellable.isCancelled
    cancellable.cancel()
    return !before && cancellable.isCancelled
}
