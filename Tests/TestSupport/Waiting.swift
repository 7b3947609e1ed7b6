import Dispatch
import Foundation
import PromiseCore

// The one family of waiting helpers that every test target shares: for a promise to settle
// (`waitForResult`, and its `waitForValue`/`waitForError` shorthands) or for a condition
// (`eventually`). On the main thread they run the main run loop while they wait, so handlers
// queued on the main queue (the default `on:`) run meanwhile; elsewhere they block. Code that
// only waits on the package's own timers needs none of them: it drives a `TestScheduler`.

/// Waits for `thenable` to settle, at most `seconds`; `nil` if it has not by then.
public func waitForResult<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> PromiseCore.Result<U.T>? {
    if let result = thenable.result { return result }
    let semaphore = DispatchSemaphore(value: 0)
    let box = SendableBox<PromiseCore.Result<U.T>?>(nil)
    thenable.pipe { result in
        box.value = result
        semaphore.signal()
    }
    guard Thread.isMainThread else {
        _ = semaphore.wait(timeout: .now() + seconds)
        return box.value
    }
    _ = eventually(seconds: seconds) { box.value != nil }
    return box.value
}

/// The value `thenable` is fulfilled with, waiting at most `seconds`; `nil` if it is rejected
/// or still pending by then.
public func waitForValue<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> U.T? {
    waitForResult(thenable, seconds: seconds)?.fulfilledValue
}

/// The error `thenable` is rejected with, waiting at most `seconds`; `nil` if it is fulfilled
/// or still pending by then.
public func waitForError<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> Error? {
    waitForResult(thenable, seconds: seconds)?.rejectedError
}

/// Checks `condition` until it holds, at most `seconds`: every 2 ms while running the main run
/// loop on the main thread, every 10 ms (sleeping) elsewhere. Returns whether it held. For
/// effects nothing signals (an object freed on another thread, a queue's handler that has run):
/// where a promise settles or a test scheduler drives the time, wait on that instead.
public func eventually(seconds: TimeInterval = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        if Thread.isMainThread {
            _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.002))
        } else {
            Thread.sleep(forTimeInterval: 0.01)
        }
    }
    return condition()
}

extension PromiseCore.Result {
    /// The value, if fulfilled.
    public var fulfilledValue: T? {
        if case .fulfilled(let value) = self { return value }
        return nil
    }

    /// The error, if rejected.
    public var rejectedError: Error? {
        if case .rejected(let error) = self { return error }
        return nil
    }
}
