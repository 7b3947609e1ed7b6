// The two cancel worlds hold each other: this package's cancel sources go into a
// `Set<AnyCancellable>`, and a Combine `AnyCancellable` goes into a `CancelBag` or is cancelled
// by a `CancellationToken`.
#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
import CancellablePromiseKit

// Combine's `Cancellable`: `AnyCancellable(promise)` and `promise.store(in: &subscriptions)`
// work as for any Combine cancellable, and cancel what `cancel()` cancels.

/// Combine's `cancel()` cancels the promise's whole chain, as this package's does.
/// `AnyCancellable(promise)` and `promise.store(in: &subscriptions)` hold the promise, so the
/// chain stays cancellable while the set lives; releasing the `AnyCancellable` cancels it (a
/// no-op once the chain has settled).
extension CancellablePromise: CombineCancellable {}

/// Combine's `cancel()` cancels the chain the finalizer ends.
extension CancellableFinalizer: CombineCancellable {}

/// Combine's `cancel()` cancels every promise of the context's chain.
extension CancelContext: CombineCancellable {}

/// Combine's `cancel()` cancels the request (its token is cancelled).
extension CancellationRequest: CombineCancellable {}

extension CancelBag {
    /// Stores this bag in `set` as an `AnyCancellable`: cancelling or releasing it cancels
    /// everything in the bag (as `cancelAll()`, synchronously on that thread).
    ///
    /// ```swift
    /// screenBag.store(in: &subscriptions)   // the screen's subscriptions end the bag's work too
    /// ```
    public func store(in set: inout Set<AnyCancellable>) {
        set.insert(AnyCancellable { self.cancelAll() })
    }
}

extension AnyCancellable {
    /// Stores this cancellable in `bag`, which holds it (as a `Set<AnyCancellable>` would) until
    /// the bag is cancelled or deallocated, and then cancels it, synchronously on that thread.
    /// Storing into a bag already cancelled cancels it at once.
    ///
    /// ```swift
    /// model.$query.sink { self.search($0) }.store(in: bag)
    /// ```
    public func store(in bag: CancelBag) {
        let held = UncheckedSendable(self)
        bag.store(cancellingWith: { held.value.cancel() })
    }

    /// Cancels this cancellable when `token` is cancelled: synchronously on the cancelling
    /// thread, or at once, on this thread, if `token` is cancelled already.
    ///
    /// The token holds this cancellable until it completes (is cancelled, or its request is
    /// released) or the returned registration is removed; on a long-lived token, remove the
    /// registration when the subscription ends, or store the cancellable in a `CancelBag`.
    @discardableResult
    public func cancel(on token: CancellationToken) -> CancellationRegistration {
        let held = UncheckedSendable(self)
        return token.onCancel { held.value.cancel() }
    }
}

#endif
