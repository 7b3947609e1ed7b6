import Foundation

/// The error a cancelled `CancellablePromise` (and every pending promise of its chain) is
/// rejected with. It is a `CancellableError`, so `error.isCancelled` is `true` and the default
/// `catch` policy skips it.
public enum CancellablePromiseError: Error, CancellableError, Sendable, Equatable {
    /// `cancel()` was called on the promise or its chain.
    case cancelled

    /// Always `true`.
    public var isCancelled: Bool { true }
}

extension CancellablePromiseError: LocalizedError {
    /// A readable description for `localizedDescription`.
    public var errorDescription: String? { "The promise was cancelled" }
}

/// `CancellablePromiseError.cancelled`, boxed once: `cancel()` would otherwise allocate an error
/// box on every call.
let boxedCancellation: any Error & Sendable = CancellablePromiseError.cancelled
