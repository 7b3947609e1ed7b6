import Dispatch
import Foundation

/// A guarantee resolved after `seconds`, on a global queue (handlers with `on: nil` run there).
///
/// The timer is attached to the guarantee: `after(seconds: 5).cancellize()` (from
/// `CancellablePromiseKit`) stops it when cancelled. The guarantee itself then never resolves.
public func after(seconds: TimeInterval) -> Guarantee<Void> {
    after(.now() + max(0, seconds))
}

/// A guarantee resolved after `interval`, on a global queue. See ``after(seconds:)``.
public func after(_ interval: DispatchTimeInterval) -> Guarantee<Void> {
    after(.now() + interval)
}

private func after(_ deadline: DispatchTime) -> Guarantee<Void> {
    let promise = Promise<Void>(pending: ())
    let item = DispatchWorkItem { promise.resolve(.fulfilled(())) }
    // The timer's block holds the promise until the deadline, and the promise holds the
    // timer through its attachment: cancelling lets go of the timer, so a cancelled `after`
    // is freed once its deadline passes instead of never.
    let timer = Locked<DispatchWorkItem?>(item)
    promise.attachCancellation(PromiseCancellation { timer.withLock { $0.take() }?.cancel() })
    DispatchQueue.global().asyncAfter(deadline: deadline, execute: item)
    return Guarantee(promise: promise)
}
