import Dispatch
import Foundation
import PromiseCore

// Waiting in tests without the main queue: for a promise to settle, or for a condition.

/// Waits (without needing the main queue) for `thenable` to settle; `nil` after `seconds`.
public func waitForResult<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> PromiseCore.Result<U.T>? {
    let semaphore = DispatchSemaphore(value: 0)
    let box = SendableBox<PromiseCore.Result<U.T>?>(nil)
    thenable.pipe { result in
        box.value = result
        semaphore.signal()
    }
    _ = semaphore.wait(timeout: .now() + seconds)
    return box.value
}

/// Polls `condition` every 10 ms for up to `seconds`.
public func eventually(seconds: TimeInterval = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
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
