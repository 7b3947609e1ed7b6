import Dispatch
import Foundation
import PromiseCore

// `timeout(seconds:)`: a deadline for a promise. A timeout is a failure, not a cancellation:
// its error says `isCancelled == false`, so the default `catch` policy handles it (PromiseKit 7
// counted its `timedOut` as a cancellation, and a default `catch` silently skipped timeouts).

/// The error a promise is rejected with when its `timeout(seconds:)` expires first.
///
/// It is **not** a cancellation: `error.isCancelled` is `false`, so a `catch` with the default
/// policy receives it and `recover` recovers from it.
///
/// ```swift
/// fetchUser().timeout(seconds: 5).catch { error in
///     if let timeout = error as? PromiseTimeoutError {
///         print("no answer after \(timeout.seconds) s")
///     }
/// }
/// ```
public struct PromiseTimeoutError: Error, CancellableError, Sendable, Equatable, Hashable {
    /// How long the promise was given, in seconds (the `seconds:` argument of `timeout`).
    public let seconds: TimeInterval

    /// Creates the error for a timeout of `seconds`.
    public init(seconds: TimeInterval) {
        self.seconds = seconds
    }

    /// Always `false`: a timeout is a failure that a default `catch` must see.
    public var isCancelled: Bool { false }
}

extension PromiseTimeoutError: CustomStringConvertible, LocalizedError {
    /// "The promise timed out after 2.5 seconds".
    public var description: String {
        // NaN: `PMKError.timedOut`, a timeout of no particular duration.
        guard !seconds.isNaN else { return "The promise timed out" }
        return "The promise timed out after \(seconds) second\(seconds == 1 ? "" : "s")"
    }

    /// The same as `description`.
    public var errorDescription: String? { description }
}

// MARK: - Operators

extension Thenable {
    /// Returns a promise that settles as this one does, or is rejected with
    /// ``PromiseTimeoutError`` if this one has not settled after `seconds`.
    ///
    /// The returned promise settles on the thread that settles this one, or where `scheduler`
    /// runs its work when the deadline passes (the default, `DispatchScheduler.global`: a
    /// global queue; a `TestScheduler`: the thread that advances its time); handlers added to it
    /// run where their `on:` says. The timer is unscheduled and released as soon as this
    /// promise settles.
    ///
    /// Zero or a negative `seconds` times out as soon as the scheduler runs work (never
    /// synchronously). An infinite or NaN `seconds` never times out: no timer is scheduled (as
    /// with Dispatch, NaN seconds count as infinitely many).
    ///
    /// A plain promise cannot be cancelled, so the work behind it goes on after a timeout. To
    /// stop it, make the chain cancellable first: `promise.cancellize().timeout(seconds: 5)`
    /// (see `CancellablePromise.timeout(seconds:)`). If this promise's producer attached its
    /// task (`after`, PromiseFoundation's URLSession/Process/NotificationCenter promises),
    /// `cancellize()` on the returned promise still cancels that task.
    ///
    /// ```swift
    /// URLSession.shared.dataTask(.promise, with: url).timeout(seconds: 10).done { data, _ in
    ///     // …
    /// }.catch { error in
    ///     // PromiseTimeoutError after 10 seconds; `error.isCancelled` is false
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - seconds: how long this promise is given.
    ///   - scheduler: the clock the deadline is measured on and where the timer fires.
    public func timeout(
        seconds: TimeInterval, scheduler: any PromiseScheduler = DispatchScheduler.global
    ) -> Promise<T> {
        let source = asPromise()
        let output = Promise<T>._makePending()
        let timer = scheduler.scheduleTimer(seconds: seconds) {
            output.resolve(.rejected(PromiseTimeoutError(seconds: seconds)))
        }
        if let task = source._attachedCancellation {
            output.attachCancellation(task)
        }
        source.pipe { result in
            timer.cancel()
            output.resolve(result)
        }
        return output
    }
}

extension CancellablePromise {
    /// Returns a cancellable promise that settles as this one does, or, if this one has not
    /// settled after `seconds`, is rejected with ``PromiseTimeoutError`` while this promise's
    /// chain is cancelled with that error (as `cancel(with:)` does): the task behind this promise
    /// is stopped.
    ///
    /// The timeout error is not a cancellation error (`error.isCancelled` is `false`): the
    /// returned promise starts a chain of its own that is *not* cancelled by the timeout, so a
    /// `catch` with the default policy receives the error and a `recover` after it can recover
    /// from it, as from any other failure. This promise's chain does become cancelled
    /// (`isCancelled` is `true` there). Cancelling the returned promise's chain cancels this
    /// promise's chain too (while it is pending) and stops the timer.
    ///
    /// The timer fires where `scheduler` runs its work (by default a global queue; a
    /// `TestScheduler`: the thread that advances its time) and the cancellation runs there;
    /// handlers run where their `on:` says. The timer is unscheduled and released as soon as this
    /// promise settles. Zero or a negative `seconds` times out as soon as the scheduler runs
    /// work; an infinite or NaN `seconds` never times out.
    ///
    /// ```swift
    /// URLSession.shared.dataTask(.promise, with: url)
    ///     .cancellize()
    ///     .timeout(seconds: 10)      // after 10 s the request itself is cancelled
    ///     .recover { error -> Promise<(data: Data, response: URLResponse)> in
    ///         guard error is PromiseTimeoutError else { throw error }
    ///         return cachedResponse()
    ///     }
    /// ```
    ///
    /// - Parameters:
    ///   - seconds: how long this promise is given.
    ///   - scheduler: the clock the deadline is measured on and where the timer fires.
    public func timeout(
        seconds: TimeInterval, scheduler: any PromiseScheduler = DispatchScheduler.global
    ) -> CancellablePromise<T> {
        // The timer holds this promise, a handle of its chain, so it can cancel the chain.
        let source = self
        let output = Promise<T>._makePending()
        let timer = scheduler.scheduleTimer(seconds: seconds) {
            let error = PromiseTimeoutError(seconds: seconds)
            source.cancel(with: error)
            output.resolve(.rejected(error))
        }
        promise.pipe { result in
            timer.cancel()
            output.resolve(result)
        }
        let timed = CancellablePromise(newChain: output) { timer.cancel() }
        _ChainMember(storage: timed._chainStorage, key: timed._key).link(self, whileBodyRuns: false)
        return timed
    }
}
