import CancellablePromiseKit
import Dispatch
import Foundation

/// `render`: a screen shows a thumbnail made by a download and then a CPU-bound render in
/// `map(on: .global())`. The screen closes while the render is running. `cancel()` cannot
/// interrupt a running body, but this one checks `CancellationToken.current` before each row and
/// stops at the next one instead of keeping a core busy until it is done.
public enum RenderScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        A screen downloads a photo, then renders its thumbnail row by row in map(on: .global()):
        pure computation, about 1 ms a row, 1000 rows. The screen closes while the render runs.
        cancel() cannot interrupt a running body, but this body reads CancellationToken.current,
        its step's token: the token's onCancel handler runs before cancel() returns, and the
        check before the next row stops the render. Without it the body would run to its end.
        """

    /// The rows of the full render.
    public static let rows = 1_000

    /// About how long one row of the real render computes, in milliseconds.
    public static let rowMilliseconds = 1

    /// Milliseconds after the start at which the screen closes.
    public static let closeAfter = 250

    /// Runs the scenario with the real render: ``rows`` rows of about ``rowMilliseconds`` of
    /// computation each, on a global queue.
    public static func run(timeline: Timeline) -> Guarantee<Void> {
        run(timeline: timeline, rows: rows, renderRow: computeRow)
    }

    /// Runs the scenario with `rows` rows, each computed by `renderRow` (called on the global
    /// queue that runs the `map` body, with the row's index; it returns the row's checksum).
    /// Resolves once the end of the scenario is reached on the timeline's clock and the render
    /// body, if it started, has returned.
    public static func run(
        timeline: Timeline, rows: Int, renderRow: @escaping @Sendable (Int) -> UInt64
    ) -> Guarantee<Void> {
        let (bodyReturned, markBodyReturned) = Guarantee<Void>.pending()
        timeline.log("screen", .started, "opened: download(photo).map(on: .global()) { render its rows }")
        let thumbnail = simulatedWork("download", takes: 100, value: "photo.jpg", timeline: timeline)
            .map(on: .global()) { photo -> UInt64 in
                defer { markBodyReturned(()) }
                return try render(photo, rows: rows, renderRow: renderRow, timeline: timeline)
            }
        thumbnail.done(on: nil) { checksum in
            timeline.log("screen", .outcome, "shows the thumbnail (checksum \(checksum))")
        }.catch(on: nil, policy: .allErrors) { error in
            timeline.log("screen", .rejectedByCancel, "the thumbnail is rejected: \(describe(error))")
        }

        timeline.schedule(after: closeAfter) {
            timeline.log("screen", .cancelRequested, "closed: thumbnail.cancel()")
            thumbnail.cancel()
            timeline.log("screen", .note, "cancel() returned; thumbnail.isRejected: \(thumbnail.isRejected)")
        }

        // A body that had not started by the end never will (the chain was cancelled before).
        return timeline.after(milliseconds: 400).then(on: nil) { () -> Guarantee<Void> in
            let started = timeline.events.contains { $0.subject == "render" && $0.kind == .body }
            return started ? bodyReturned : Guarantee()
        }.map(on: nil) {
            let events = timeline.events
            let closed = events.first { $0.kind == .cancelRequested }?.milliseconds ?? 0
            let render: String
            if let stopped = events.first(where: { $0.subject == "render" && $0.kind == .stopped }) {
                render = "stopped \(stopped.milliseconds - closed) ms after the screen closed"
            } else if events.contains(where: { $0.subject == "render" && $0.kind == .finished }) {
                render = "ran to its end"
            } else {
                render = "never started"
            }
            let shown = events.contains { $0.subject == "screen" && $0.kind == .outcome }
            timeline.log("(end)", .note, "the render \(render); thumbnail shown: \(shown ? "yes" : "no")")
        }
    }

    /// The `map` body: renders `rows` rows, checking its step's token before each one.
    private static func render(
        _ photo: String, rows: Int, renderRow: (Int) -> UInt64, timeline: Timeline
    ) throws -> UInt64 {
        // The token of this `map` step: cancelled with the chain while this body runs.
        let token = CancellationToken.current
        token.onCancel {
            timeline.log(
                "render", .cancelHandler, "CancellationToken.current.onCancel ran, on the closing thread")
        }
        let startedAt = timeline.now
        timeline.log("render", .body, "map body started on a global queue: \(rows) rows of \(photo)")
        var checksum: UInt64 = 0
        for row in 0..<rows {
            do {
                try token.checkCancellation()
            } catch {
                let now = timeline.now
                let closedAt = timeline.events.last { $0.kind == .cancelRequested }?.milliseconds ?? now
                let wholeRender = (now - startedAt) * rows / max(row, 1)
                timeline.log(
                    "render", .stopped,
                    "checkCancellation() threw \(now - closedAt) ms after the cancel: stopped after \(row) of "
                        + "\(rows) rows, \(now - startedAt) ms into a render of about \(wholeRender) ms")
                throw error
            }
            checksum &+= renderRow(row)
        }
        timeline.log("render", .finished, "rendered all \(rows) rows in \(timeline.now - startedAt) ms")
        return checksum
    }

    /// One row of the real render: about ``rowMilliseconds`` of pure computation on this thread
    /// (a busy loop standing in for image work), returning the row's checksum.
    static func computeRow(_ row: Int) -> UInt64 {
        // Real clock: the loop stands for CPU-bound work of a known length.
        let end = DispatchTime.now().uptimeNanoseconds + UInt64(rowMilliseconds) * 1_000_000
        var value = UInt64(truncatingIfNeeded: row) | 1
        repeat {
            for _ in 0..<64 {
                value = value &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            }
        } while DispatchTime.now().uptimeNanoseconds < end
        return value
    }
}
