// Timers on the default scheduler, made and cancelled before they fire, beside a bare dispatch
// timer made and cancelled in the same run.

import Benchmark
import CancellablePromiseKit
import Dispatch

func registerTimerBenchmarks() {
    // The baseline: a one-shot `DispatchSource` timer on a global queue, armed a minute ahead,
    // then cancelled.
    Benchmark("base_dispatch_timer", configuration: configuration()) { _ in
        for _ in 0..<batch {
            let source = DispatchSource.makeTimerSource(queue: .global())
            source.setEventHandler {}
            source.schedule(deadline: .now() + 60)
            source.activate()
            source.cancel()
        }
    }

    // The same timer behind a hand-made cancellable promise: a pending promise wrapped with a
    // cancel closure that cancels the timer, then cancelled. What a timer costs once it is a
    // cancellable promise, before anything the library adds. The cancel closure is `@Sendable`:
    // it holds the timer as the `DispatchSource` class (`Sendable`), not as the
    // `DispatchSourceTimer` protocol (not `Sendable`), hence a cast (about 40 ns on Linux).
    Benchmark("base_dispatch_timer_cancellable", configuration: configuration()) { _ in
        for _ in 0..<batch {
            let (pending, resolver) = Promise<Void>.pending()
            guard let source = DispatchSource.makeTimerSource(queue: .global()) as? DispatchSource else {
                preconditionFailure("a dispatch timer is a DispatchSource")
            }
            source.setEventHandler { resolver.fulfill(()) }
            source.schedule(deadline: .now() + 60)
            source.activate()
            let promise = CancellablePromise(using: pending) { source.cancel() }
            promise.cancel()
            precondition(promise.isRejected)
        }
    }

    // `after(seconds:)` made cancellable and cancelled: its timer is unscheduled.
    Benchmark("timer_after_cancel", configuration: configuration()) { _ in
        for _ in 0..<batch {
            let timer = after(seconds: 60).cancellize()
            timer.cancel()
            precondition(timer.isRejected)
        }
    }

    // `timeout(seconds:)` on a pending cancellable promise, then the chain cancelled: the
    // timer is unscheduled, the source and the timed promise rejected.
    Benchmark("timer_timeout_cancel", configuration: configuration()) { _ in
        for _ in 0..<batch {
            let (source, _) = CancellablePromise<Int>.pending()
            let timed = source.timeout(seconds: 60)
            timed.cancel()
            precondition(timed.isRejected && source.isRejected)
        }
    }
}
