import CancellablePromiseKit
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// `Cancellable` conformances for Foundation's cancellable work, so that a cancellation token
// can cancel it: `token.register(task)` holds the task weakly and calls `cancel()` on it.

/// `cancel()` is URLSession's own: the task stops and its completion handler receives
/// `URLError.cancelled`. `isCancelled` is `true` while the task is cancelling and once it has
/// completed with that error.
///
/// ```swift
/// let task = session.dataTask(with: url) { data, response, error in … }
/// cancellationToken.register(task)
/// task.resume()
/// ```
extension URLSessionTask: Cancellable {
    /// `true` if the task was cancelled: its state is `.canceling`, or it completed with
    /// `URLError.cancelled`.
    public var isCancelled: Bool {
        switch state {
        case .canceling:
            return true
        case .completed:
            guard let error = error as NSError? else { return false }
            return error.domain == NSURLErrorDomain && error.code == NSURLErrorCancelled
        default:
            return false
        }
    }
}

/// `cancel()` terminates the process (SIGTERM) if it is running; called before `run()`, it
/// makes nothing happen to the process but `isCancelled` becomes `true`. `isCancelled` is `true`
/// once `cancel()` has been called on this process object.
extension Process: Cancellable {
    /// Terminates the process (SIGTERM) if it is running, and records the cancellation. Any
    /// thread, any number of times; after the process has exited, it only records it.
    public func cancel() {
        cancelledProcesses.withLock { table in
            table = table.filter { $0.value.process != nil }
            table[ObjectIdentifier(self)] = WeakProcess(self)
        }
        if isRunning {
            terminate()
        }
    }

    /// `true` once `cancel()` was called on this process object.
    public var isCancelled: Bool {
        let id = ObjectIdentifier(self)
        return cancelledProcesses.withLock { $0[id]?.process === self }
    }
}

/// Processes that were cancelled, held weakly: `Process` has no room for a flag of ours. Only
/// `Process.cancel()` and `Process.isCancelled` take this lock (tokens never do).
private let cancelledProcesses = Locked<[ObjectIdentifier: WeakProcess]>([:])
