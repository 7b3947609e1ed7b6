import PromiseCore

/// Runs `body` at once and returns the cancellable promise it returns (a throw rejects).
///
/// ```swift
/// firstly { login().cancellize() }.then { fetch(avatar: $0.user).cancellize() }
/// ```
@inlinable
public func firstly<T>(execute body: () throws -> CancellablePromise<T>) -> CancellablePromise<T> {
    do {
        return try body()
    } catch {
        return CancellablePromise(error: error)
    }
}
