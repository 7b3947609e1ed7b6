import CancellablePromiseKit
import Dispatch
import Foundation

/// `adopt`: code that already returns plain `Promise`s (written for PromiseKit, unchanged) is
/// made cancellable at the call site with `cancellize()` / `asCancellable()`, stored in the
/// screen's `CancelBag`, and cancelled from another thread when the screen closes.
public enum AdoptScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        Existing functions return plain Promises and know nothing about cancellation. The caller
        adopts them with .cancellize() / .asCancellable() and stores the chain in the screen's
        CancelBag. The screen closes on another thread and its bag cancels the chain: no later step
        runs, ensure and catch(policy: .allErrors) do, and a timer joined to the same CancelContext is
        stopped. A plain Promise's own work cannot be stopped; its result is dropped.
        """

    /// Milliseconds after the start at which another thread cancels the chain.
    public static let cancelAfter = 150

    // MARK: Existing code, untouched

    /// Existing code: logs in after 50 ms. Returns a plain `Promise`.
    static func login(timeline: Timeline) -> Promise<Int> {
        Promise { seal in
            timeline.log("login", .started, "started (plain Promise, takes 50 ms)")
            timeline.schedule(after: 50) {
                timeline.log("login", .finished, "finished: user 42")
                seal.fulfill(42)
            }
        }
    }

    /// Existing code: fetches a profile in 300 ms. Returns a plain `Promise`; nothing can stop
    /// its work once started.
    static func fetchProfile(user: Int, timeline: Timeline) -> Promise<String> {
        Promise { seal in
            timeline.log("fetch profile", .started, "started (plain Promise, takes 300 ms)")
            timeline.schedule(after: 300) {
                timeline.log(
                    "fetch profile", .finished,
                    "finished anyway: a plain Promise's work cannot be stopped; result discarded")
                seal.fulfill("profile of user \(user)")
            }
        }
    }

    // MARK: The adopting caller

    /// Runs the scenario; resolves once the un-stoppable work has finished.
    public static func run(timeline: Timeline) -> Guarantee<Void> {
        // The screen's bag: whatever the screen starts is cancelled when the screen goes away.
        let screen = CancelBag()
        let chain = login(timeline: timeline).cancellize()
            .then(on: nil) { user in
                fetchProfile(user: user, timeline: timeline).asCancellable()
            }.map(on: nil) { profile -> String in
                timeline.log("chain", .body, "map ran: \(profile)")
                return profile.uppercased()
            }.done(on: nil) { profile in
                timeline.log("chain", .body, "done ran: showing \(profile)")
            }.ensure(on: nil) {
                timeline.log("chain", .observer, "ensure ran: spinner hidden")
            }
        chain.catch(on: nil, policy: .allErrors) { error in
            timeline.log(
                "chain", .observer,
                "catch(policy: .allErrors) ran: \(describe(error)) (isCancelled: \(error.isCancelled))")
        }.store(in: screen)

        // A Guarantee from a producer that attaches its task (`after`): joined to the same
        // context, so cancelling the chain stops the timer itself.
        let keepAlive = timeline.after(milliseconds: 400)
        keepAlive.done(on: nil) { timeline.log("keep-alive", .finished, "timer fired") }
        timeline.log("keep-alive", .started, "timer started (fires after 400 ms), joined to the chain's CancelContext")
        keepAlive.cancellize(cancelContext: chain.cancelContext).catch(on: nil, policy: .allErrors) { error in
            timeline.log("keep-alive", .rejectedByCancel, "timer stopped; its promise rejected: \(describe(error))")
        }

        timeline.schedule(after: cancelAfter) {
            timeline.log("other thread", .cancelRequested, "the screen closes: screenBag.cancelAll()")
            screen.cancelAll()
            timeline.log("other thread", .note, "cancelAll() returned; chain.isRejected: \(chain.isRejected)")
        }

        return endOfScenario(after: 520, timeline: timeline) {
            let events = timeline.events
            let bodies = events.filter { $0.kind == .body }.count
            let timerFired = events.contains { $0.subject == "keep-alive" && $0.kind == .finished }
            timeline.log(
                "(end)", .note, "map/done bodies run after the cancel: \(bodies); keep-alive timer fired: \(timerFired)"
            )
        }
    }
}
