import Foundation

/// Errors raised by PromiseCore itself.
public enum PMKError: Error, @unchecked Sendable {
    // @unchecked: the `Any` payloads of `flatMap` and `compactMap` (as PromiseKit's) are not Sendable.
    /// A completion handler called back with both value and error `nil`.
    case invalidCallingConvention
    /// A `then` (or `recover`) body returned the very promise it produces: it could never settle.
    case returnedSelf
    /// Invalid input to a function, for example `race([])` or `concurrently: 0`.
    case badInput
    /// The operation was cancelled.
    case cancelled
    /// `flatMap` (deprecated) found no value.
    case flatMap(Any, Any.Type)
    /// `compactMap` returned `nil` for the value.
    case compactMap(Any, Any.Type)
    /// `firstValue`/`lastValue` on an empty sequence.
    case emptySequence
    /// `race(fulfilled:)`: every input was rejected.
    case noWinner
}

extension PMKError: CustomDebugStringConvertible {
    /// What went wrong, in a sentence.
    public var debugDescription: String {
        switch self {
        case .flatMap(let obj, let type):
            return "Could not `flatMap<\(type)>`: \(obj)"
        case .compactMap(let obj, let type):
            return "Could not `compactMap<\(type)>`: \(obj)"
        case .invalidCallingConvention:
            return "A closure was called with an invalid calling convention, probably (nil, nil)"
        case .returnedSelf:
            return "A promise handler returned itself"
        case .badInput:
            return "Bad input was provided to a PromiseKit function"
        case .cancelled:
            return "The asynchronous sequence was cancelled"
        case .emptySequence:
            return "The first or last element was requested for an empty sequence"
        case .noWinner:
            return "All thenables passed to race(fulfilled:) were rejected"
        }
    }
}

extension PMKError: LocalizedError {
    /// The same as `debugDescription`, for `localizedDescription`.
    public var errorDescription: String? { debugDescription }
}

extension PMKError: CancellableError {
    /// `true` for `.cancelled`.
    public var isCancelled: Bool {
        if case .cancelled = self { return true }
        return false
    }
}

/// An error that can say it stands for a cancellation. The default ``CatchPolicy`` skips
/// errors whose `isCancelled` is `true`.
public protocol CancellableError: Error {
    /// `true` when this error means the operation was cancelled.
    var isCancelled: Bool { get }
}

extension Error {
    /// `true` for cancellation errors: any ``CancellableError`` that says so,
    /// `PMKError.cancelled`, Swift's `CancellationError`, `URLError.cancelled` and
    /// `CocoaError.userCancelled`.
    public var isCancelled: Bool {
        if let error = self as? CancellableError { return error.isCancelled }
        if self is CancellationError { return true }
        if let error = self as? URLError, error.code == .cancelled { return true }
        if let error = self as? CocoaError, error.code == .userCancelled { return true }
        return false
    }
}

/// Which errors `catch` (and `recover`) handle.
public enum CatchPolicy: Sendable {
    /// Every error, cancellation included.
    case allErrors
    /// Every error except those whose `isCancelled` is `true` (the default).
    case allErrorsExceptCancellation
}

extension CatchPolicy {
    /// Whether `catch` and `recover` with this policy handle `error`: every error, except a
    /// cancellation (`isCancelled`) under `.allErrorsExceptCancellation`.
    @inlinable @inline(__always) func _catches(_ error: any Error) -> Bool {
        self == .allErrors || !error.isCancelled
    }
}
