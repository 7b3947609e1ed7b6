import CancellablePromiseKit
import Dispatch
import Foundation

/// `share`: two screens show the same image. Their requests go through an `InFlightCoalescer`,
/// so there is one download; each screen holds a follower of it. The first screen closes and
/// the download goes on for the second; the second closes and the download stops.
public enum ShareScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        Two screens ask for the same image through an InFlightCoalescer: one download, two
        followers. Closing a screen cancels only its own follower; the download is cancelled
        when the last screen that waits for it closes.
        """

    /// The image both screens show.
    static let image = "cat.jpg"

    /// A screen that shows the image: it requests it when it opens and cancels its request when
    /// it closes.
    private final class Screen: @unchecked Sendable {
        // @unchecked: `request` is only touched under `lock`.
        let name: String
        private let lock = NSLock()
        private var request: CancellableFinalizer?

        init(_ name: String) {
            self.name = name
        }

        func open(_ images: InFlightCoalescer<String, String>, timeline: Timeline) {
            let joins = images.followerCount(for: ShareScenario.image) > 0
            timeline.log(
                name, .started,
                "opened: images.promise(for: \"\(ShareScenario.image)\")"
                    + (joins ? " joins the download in flight" : " starts the download"))
            let shown = images.promise(for: ShareScenario.image) {
                simulatedWork("download", takes: 600, value: "\(ShareScenario.image) (48 KB)", timeline: timeline)
            }.done(on: nil) { [name] image in
                timeline.log(name, .outcome, "shows \(image)")
            }.catch(on: nil, policy: .allErrors) { [name] error in
                timeline.log(name, .rejectedByCancel, "its request was rejected: \(describe(error))")
            }
            lock.withLock { request = shown }
            timeline.log(
                name, .note, "screens waiting for the download: \(images.followerCount(for: ShareScenario.image))")
        }

        func close(_ images: InFlightCoalescer<String, String>, timeline: Timeline) {
            timeline.log(name, .cancelRequested, "closed: cancels its request")
            lock.withLock { request }?.cancel()
            let waiting = images.followerCount(for: ShareScenario.image)
            timeline.log(
                name, .note,
                waiting > 0
                    ? "the download goes on: screens still waiting: \(waiting)"
                    : "no screen waits any more: downloads in flight: \(images.inFlightCount)")
        }
    }

    /// Opens the header at 0 ms and the detail screen at 100 ms, closes the header at 250 ms and
    /// the detail screen at 400 ms; resolves once the download would have finished.
    public static func run(timeline: Timeline) -> Guarantee<Void> {
        let images = InFlightCoalescer<String, String>()
        let header = Screen("header screen")
        let detail = Screen("detail screen")

        header.open(images, timeline: timeline)
        timeline.schedule(after: 100) { detail.open(images, timeline: timeline) }
        timeline.schedule(after: 250) { header.close(images, timeline: timeline) }
        timeline.schedule(after: 400) { detail.close(images, timeline: timeline) }

        return endOfScenario(after: 800, timeline: timeline) {
            let events = timeline.events
            let downloads = events.filter { $0.subject == "download" && $0.kind == .started }.count
            let finished = events.contains { $0.subject == "download" && $0.kind == .finished }
            timeline.log(
                "(end)", .note,
                "downloads started: \(downloads); finished: \(finished ? "yes" : "no, stopped with the last screen")")
        }
    }
}
