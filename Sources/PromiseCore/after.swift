import Dispatch
import Foundation

/// A guarantee resolved after `seconds`, on a global queue (handlers with `on: nil` run there).
///
/// The timer is attached to the guarantee: `after(seconds: 5).cancellize()` (from
/// `CancellablePromiseKit`) stops it when cancelled, and releases it at once. The guarantee
/// itself then never resolves.
///
/// Zero or a negative `seconds` resolves as soon as possible, asynchronously. An infinite or
/// NaN `seconds` never resolves (as with Dispatch, NaN seconds count as infinitely many), nor
/// does one of 2^63 nanoseconds or more (about 292 years), which the clock cannot represent.
///
/// To wait on another clock, a test scheduler's virtual time for instance, see
/// ``after(seconds:scheduler:)``.
public func after(seconds: TimeInterval) -> Guarantee<Void> {
    after(seconds: seconds, scheduler: DispatchScheduler.global)
}

/// A guarantee resolved after `seconds` on `scheduler`'s clock, on the thread or queue where
/// the scheduler runs its work (``DispatchScheduler``: its queue; `TestScheduler`: the thread
/// that advances its time). Handlers with `on: nil` run there.
///
/// ```swift
/// let scheduler = TestScheduler()              // from the PromiseTesting library
/// let waited = after(seconds: 0.3, scheduler: scheduler)
/// scheduler.advance(by: 0.3)                   // no real waiting
/// assert(waited.isResolved)
/// ```
///
/// The scheduled work is attached to the guarantee: `cancellize()` then `cancel()` (from
/// `CancellablePromiseKit`) unschedules it, and the scheduler releases it; the guarantee itself
/// then never resolves. Zero or a negative `seconds` resolves as soon as the scheduler runs
/// work, never synchronously; an infinite or NaN `seconds` never resolves (nothing is
/// scheduled), nor does one longer than the scheduler's clock can represent (2^63 nanoseconds,
/// about 292 years, for the package's schedulers): it never resolves early.
public func after(seconds: TimeInterval, scheduler: any PromiseScheduler) -> Guarantee<Void> {
    let promise = Promise<Void>(pending: ())
    // NaN counts as infinitely many seconds.
    guard let delay = ScheduledDelay(seconds).seconds else { return Guarantee(promise: promise) }
    // The scheduled work holds the promise until it runs, and the promise holds the work
    // through its attachment: cancelling unschedules it, which releases the promise.
    let work = scheduler.schedule(after: delay) { promise.resolve(.fulfilled(())) }
    promise.attachCancellation { work.cancel() }
    return Guarantee(promise: promise)
}

/// A guarantee resolved after `interval`, on a global queue. See ``after(seconds:)``;
/// `.never` never resolves.
public func after(_ interval: DispatchTimeInterval) -> Guarantee<Void> {
    after(seconds: interval.promiseSeconds, scheduler: DispatchScheduler.global)
}

/// A guarantee resolved after `interval` on `scheduler`'s clock. See
/// ``after(seconds:scheduler:)``; `.never` never resolves.
public func after(_ interval: DispatchTimeInterval, scheduler: any PromiseScheduler) -> Guarantee<Void> {
    after(seconds: interval.promiseSeconds, scheduler: scheduler)
}

extension DispatchTimeInterval {
    /// The interval in seconds; `.infinity` for `.never`.
    var promiseSeconds: TimeInterval {
        switch self {
        case .seconds(let count): return TimeInterval(count)
        case .milliseconds(let count): return TimeInterval(count) / 1e3
        case .microseconds(let count): return TimeInterval(count) / 1e6
        case .nanoseconds(let count): return TimeInterval(count) / 1e9
        case .never: return .infinity
        @unknown default: return .infinity
        }
    }
}
