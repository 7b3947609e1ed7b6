import CancellablePromiseKit
import Dispatch
import Foundation

/// The error a simulated task fails with.
public struct SimulatedFailure: Error, CustomStringConvertible, Sendable {
    /// What went wrong, e.g. `HTTP 503`.
    public let description: String
}

/// Simulated cancellable work: it finishes after `milliseconds` on a timer of the timeline's
/// clock unless it is cancelled first. It has the shape of every real cancellable task — a download,
/// a query, a render: start the work, return the function that stops it.
func simulatedWork<T: Sendable>(
    _ name: String,
    takes milliseconds: Int,
    failingWith failure: String? = nil,
    value: T,
    timeline: Timeline
) -> CancellablePromise<T> {
    CancellablePromise<T> { resolver in
        let startedAt = timeline.now
        let outcome = failure == nil ? "takes \(milliseconds) ms" : "fails after \(milliseconds) ms"
        timeline.log(name, .started, "started (\(outcome))")
        let work = timeline.schedule(after: milliseconds) {
            if let failure {
                timeline.log(name, .failed, "failed: \(failure)")
                resolver.reject(SimulatedFailure(description: failure))
            } else {
                timeline.log(name, .finished, "finished")
                resolver.fulfill(value)
            }
        }
        // The cancel function: called once, on the thread that calls `cancel()`, only while the
        // promise is still pending.
        return {
            work.cancel()
            let early = startedAt + milliseconds - timeline.now
            timeline.log(
                name, .cancelHandler, "cancel handler ran: work stopped \(early) ms before it would have finished")
        }
    }
}

/// Resolves after `milliseconds` on the timeline's clock, then runs `body` (the scenario's last
/// words). Scenarios end with it so that work that was *not* stopped has time to show up.
func endOfScenario(
    after milliseconds: Int, timeline: Timeline, _ body: @escaping @Sendable () -> Void
) -> Guarantee<Void> {
    timeline.after(milliseconds: milliseconds).map(on: nil) { body() }
}
