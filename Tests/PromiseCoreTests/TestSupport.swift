import Dispatch
import Foundation
import XCTest

@testable import PromiseCore

/// An error with an identity, so tests can check *which* error arrived.
struct TestError: Error, Equatable {
    var code: Int = 0
}

/// A user-defined error that says it is a cancellation.
struct UserCancelled: CancellableError {
    var isCancelled: Bool { true }
}

/// The case name of a `PMKError`, or `nil` for any other error (PMKError is not Equatable).
func pmkCase(_ error: Error?) -> String? {
    guard let error = error as? PMKError else { return nil }
    switch error {
    case .invalidCallingConvention: return "invalidCallingConvention"
    case .returnedSelf: return "returnedSelf"
    case .badInput: return "badInput"
    case .cancelled: return "cancelled"
    case .flatMap: return "flatMap"
    case .compactMap: return "compactMap"
    case .emptySequence: return "emptySequence"
    case .noWinner: return "noWinner"
    }
}

/// A serial queue that can tell whether the current code runs on it.
final class TaggedQueue: @unchecked Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Int>()

    init(_ label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: 1)
    }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == 1 }
}

/// Tells whether the current code runs on the main queue.
let mainQueueKey: DispatchSpecificKey<Int> = {
    let key = DispatchSpecificKey<Int>()
    DispatchQueue.main.setSpecific(key: key, value: 42)
    return key
}()

var isOnMainQueue: Bool { DispatchQueue.getSpecific(key: mainQueueKey) == 42 }

/// A new promise of `T`, given to `body` through its resolver first.
func promise<T>(_: T.Type, settledBy body: (Resolver<T>) -> Void) -> Promise<T> {
    let (promise, resolver) = Promise<T>.pending()
    body(resolver)
    return promise
}

/// Whether the handler that `attach` adds (calling `body`) ran on the main queue; waits for the
/// promise `attach` returns to settle.
func handlerRanOnMain<U: Thenable>(_ attach: (@escaping @Sendable () -> Void) -> U) -> Bool {
    let onMain = Flag()
    let settled = attach { if isOnMainQueue { onMain.raise() } }
    return waitForResult(settled) != nil && onMain.value
}

/// Runs `body` with a changed configuration and restores the previous one afterwards.
@discardableResult
func withConfiguration<R>(
    _ change: (inout PMKConfiguration) -> Void,
    _ body: () throws -> R
) rethrows -> R {
    let saved = conf
    defer { conf = saved }
    var changed = saved
    change(&changed)
    conf = changed
    return try body()
}

/// Runs `body` with every log event recorded; returns the events logged meanwhile.
@discardableResult
func recordingLog(_ body: () throws -> Void) rethrows -> [LogEvent] {
    let events = Recorder<LogEvent>()
    try withConfiguration({ $0.logHandler = { events.append($0) } }, body)
    return events.all
}

/// `describeLog` of the events `body` logs.
func describedLog(_ body: () throws -> Void) rethrows -> [String] {
    describeLog(try recordingLog(body))
}

func describeLog(_ events: [LogEvent]) -> [String] {
    events.map { event in
        switch event {
        case .waitOnMainThread: return "waitOnMainThread"
        case .pendingPromiseDeallocated: return "pendingPromiseDeallocated"
        case .pendingGuaranteeDeallocated: return "pendingGuaranteeDeallocated"
        case .cauterized(let error): return "cauterized(\(error))"
        }
    }
}
