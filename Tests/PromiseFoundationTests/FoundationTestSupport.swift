import Foundation
import PromiseFoundation
import XCTest

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

/// Median of measurements.
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
