import Dispatch
import Foundation

/// Waits for `promise` to settle and returns its value or throws its error.
///
/// On the main thread it runs the current run loop meanwhile, so handlers on the main queue
/// keep running (useful in command-line tools and scripts). On any other thread it blocks
/// (PromiseKit calls `fatalError` there on Darwin; blocking is the useful behaviour). Never
/// call it from a queue the promise's chain needs.
public func hang<T>(_ promise: Promise<T>) throws -> T {
    if Thread.isMainThread {
        while promise.isPending {
            _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.01))
        }
        return try promise.result!.get()
    }
    return try promise.wait()
}
