// PromiseKit 8's `future()` for this module's promises: a cancellable promise, and a follower of
// shared work, hand their result to a Combine `Future` as `Promise.future()` (PromiseCore) does.
// Compiled where Combine exists (Apple platforms); the package's Linux check (CombineCheck/)
// compiles this same file against OpenCombine, which has the same names. Elsewhere the file is
// empty. The publishers whose subscriptions are interests in the work are PromiseCombine's.

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
import PromiseCore

@available(iOS 13.0, macOS 10.15, tvOS 13.0, watchOS 6.0, *)
extension CancellablePromise {
    /// A Combine `Future` that succeeds with this promise's value or fails with its error, as
    /// PromiseKit 8's `promise.future()`; a cancelled chain makes it fail with the cancellation
    /// error (`CancellablePromiseError.cancelled`, or the error given to `cancel(with:)`).
    ///
    /// The future's subscribers receive the result on `conf.Q.return` (the main queue unless
    /// configured otherwise), as `Promise.future()` delivers it. The promise is already
    /// running: subscribing starts nothing, and a subscriber that comes late gets the result.
    ///
    /// **The future cannot cancel the work.** A Combine `Future` has no cancellation of its own:
    /// cancelling a subscription to it only stops that subscription's delivery, and the future
    /// holds no cancel handle of the chain, so neither cancelling nor dropping it cancels
    /// anything. Keep the promise (or its `cancelContext`, a `CancelBag`…) to cancel the work
    /// yourself. Use PromiseCombine's `publisher()` instead when the subscriptions should own
    /// the work: there, cancelling every subscription cancels the chain.
    ///
    /// ```swift
    /// let image = download(url)                      // CancellablePromise<Image>
    /// image.future()                                 // Future<Image, Error>
    ///     .sink(receiveCompletion: { _ in }, receiveValue: { show($0) })
    ///     .store(in: &subscriptions)
    /// image.cancel()                                 // the future fails with .cancelled
    /// ```
    public func future() -> Future<T, Error> {
        promise.future()
    }
}

@available(iOS 13.0, macOS 10.15, tvOS 13.0, watchOS 6.0, *)
extension SharedCancellablePromise {
    /// A Combine `Future` of the shared work's result: the value or the error of the source, or
    /// the cancellation error once the work was cancelled; delivered on `conf.Q.return` (the
    /// main queue unless configured otherwise).
    ///
    /// The future waits through a follower that nothing can cancel (see
    /// ``SharedCancellablePromise/follower()``): it is an interest in the work that is never
    /// withdrawn, as an abandoned follower's is. So from then on the source is not cancelled by
    /// the followers: cancelling the others withdraws only their own interest and the work goes
    /// on for the future. Cancelling a subscription to the future only stops its delivery. For
    /// subscriptions that count as followers and can be withdrawn, use PromiseCombine's
    /// `shared.publisher()`.
    public func future() -> Future<T, Error> {
        follower().future()
    }
}

#endif
