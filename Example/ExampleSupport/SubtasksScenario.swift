import CancellablePromiseKit
import Dispatch
import Foundation

/// `subtasks`: one cancellable task built out of five sub-tasks in three stages, with the
/// `cancelPromise` the wrapper initialiser hands in and `when(_:while:)`. The caller cancels it
/// half-way, while the second stage runs.
public enum SubtasksScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        One cancellable task made of sub-tasks: fetch users + orders, then render charts + tables,
        then upload. Every stage waits `while: cancelPromise`, so report.cancel() stops whatever
        runs at that moment and nothing after it ever starts.
        """

    /// Milliseconds after the start at which the caller cancels the report.
    public static let cancelAfter = 250

    /// Builds the report task. Each stage waits for its sub-tasks *while* `cancelPromise` has not
    /// rejected; `autoCancel: true` stops the running sub-tasks when it does.
    public static func makeReport(timeline: Timeline) -> CancellablePromise<String> {
        CancellablePromise<String> { cancelPromise in
            let users = simulatedWork("fetch users", takes: 100, value: 120, timeline: timeline)
            let orders = simulatedWork("fetch orders", takes: 150, value: 3_400, timeline: timeline)
            let data = when(fulfilled: [users, orders], autoCancel: true)

            return when(data, while: cancelPromise, autoCancel: true).then(on: nil) { counts in
                let charts = simulatedWork("render charts", takes: 400, value: "charts", timeline: timeline)
                let tables = simulatedWork("render tables", takes: 300, value: "tables", timeline: timeline)
                let pages = when(fulfilled: [charts, tables], autoCancel: true)
                return when(pages, while: cancelPromise, autoCancel: true).map(on: nil) { pages in
                    "\(counts[0]) users, \(counts[1]) orders, \(pages.joined(separator: " + "))"
                }
            }.then(on: nil) { report in
                when(
                    simulatedWork("upload report", takes: 200, value: report, timeline: timeline),
                    while: cancelPromise, autoCancel: true)
            }
        }
    }

    /// Starts the report, cancels it at ``cancelAfter`` ms from a timer queue, and resolves once
    /// the uncancelled work would have finished.
    public static func run(timeline: Timeline) -> Guarantee<Void> {
        let report = makeReport(timeline: timeline)
        report.done(on: nil) { summary in
            timeline.log("report", .outcome, "finished: \(summary)")
        }.catch(on: nil, policy: .allErrors) { error in
            timeline.log("report", .outcome, "rejected: \(describe(error)) (isCancelled: \(error.isCancelled))")
        }

        timeline.schedule(after: cancelAfter) {
            timeline.log("caller", .cancelRequested, "report.cancel()")
            report.cancel()
        }

        return endOfScenario(after: 800, timeline: timeline) {
            let events = timeline.events
            let started = events.filter { $0.kind == .started }.map(\.subject)
            let finished = Set(events.filter { $0.kind == .finished }.map(\.subject))
            let stopped = events.filter { $0.kind == .cancelHandler }.map(\.subject)
            let neverStarted = ["fetch users", "fetch orders", "render charts", "render tables", "upload report"]
                .filter { !started.contains($0) }
            timeline.log(
                "(end)", .note,
                "finished before the cancel: \(started.filter { finished.contains($0) }.joined(separator: ", "))")
            timeline.log("(end)", .note, "stopped by the cancel, never finished: \(stopped.joined(separator: ", "))")
            timeline.log("(end)", .note, "never started: \(neverStarted.joined(separator: ", "))")
        }
    }
}
