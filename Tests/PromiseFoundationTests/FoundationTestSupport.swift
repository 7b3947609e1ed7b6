import Foundation
import PromiseFoundation
import XCTest

/// Waits (without needing the main queue) for `thenable` to settle; `nil` after `seconds`.
func waitForResult<U: Thenable>(_ thenable: U, seconds: TimeInterval = 10) -> PromiseCore.Result<U.T>? {
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
func eventually(seconds: TimeInterval = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return condition()
}

/// Counts its deinitialisations (through `onDeinit`), to observe what a closure released.
final class DeinitFlag: @unchecked Sendable {
    let deinitialised: SendableBox<Bool>
    init(_ flag: SendableBox<Bool>) { deinitialised = flag }
    deinit { deinitialised.value = true }
}

/// A fresh id for server events.
func freshID() -> String {
    UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
}

extension PromiseCore.Result {
    var fulfilledValue: T? {
        if case .fulfilled(let value) = self { return value }
        return nil
    }

    var rejectedError: Error? {
        if case .rejected(let error) = self { return error }
        return nil
    }
}

/// Median of measurements.
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
