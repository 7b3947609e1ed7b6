import PromiseCore

/// Waits for the promise; see `hang(_: Promise)`.
public func hang<T>(_ promise: CancellablePromise<T>) throws -> T {
    try hang(promise.promise)
}
