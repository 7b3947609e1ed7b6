import CancellablePromiseKit
import Dispatch
import Foundation

/// A simulated download mirror: how long it takes to answer, and whether it fails.
public struct SimulatedMirror: Sendable {
    /// The mirror's name, shown in the timeline.
    public var name: String
    /// Milliseconds until it answers (or fails).
    public var latency: Int
    /// If set, the mirror fails with this error instead of answering.
    public var failure: String?

    /// A mirror that answers after `latency` ms, or fails with `failure`.
    public init(name: String, latency: Int, failure: String? = nil) {
        self.name = name
        self.latency = latency
        self.failure = failure
    }

    /// Four mirrors: one fails fast, one answers first, two are slow.
    public static let standard: [SimulatedMirror] = [
        SimulatedMirror(name: "eu-west", latency: 180),
        SimulatedMirror(name: "us-east", latency: 60),
        SimulatedMirror(name: "ap-south", latency: 25, failure: "HTTP 503"),
        SimulatedMirror(name: "sa-east", latency: 320),
    ]
}

/// `mirrors`: the same file is requested from every mirror at once; the first good answer wins
/// and, thanks to `autoCancel: true`, every other request is stopped the moment it does.
public enum MirrorsScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        Request the same file from every mirror, keep the first good answer, stop the rest:
            race(fulfilled: mirrors.map { download(from: $0) }, autoCancel: true)
        A plain PromiseKit race would ignore the losers but leave them downloading.
        """

    /// Runs the race over simulated mirrors; resolves once the slowest mirror would have
    /// answered, so the timeline shows that the cancelled ones never did.
    public static func run(
        mirrors: [SimulatedMirror] = SimulatedMirror.standard,
        timeline: Timeline
    ) -> Guarantee<Void> {
        let downloads = mirrors.map { mirror in
            simulatedWork(
                mirror.name, takes: mirror.latency, failingWith: mirror.failure,
                value: mirror.name, timeline: timeline)
        }

        // The whole point: the first mirror to answer wins, the others are cancelled.
        let fastest = race(fulfilled: downloads, autoCancel: true)

        fastest.done(on: nil) { winner in
            let stopped = timeline.events.filter { $0.kind == .cancelHandler }.map(\.subject)
            timeline.log("race", .outcome, "won by \(winner); requests stopped: \(stopped.joined(separator: ", "))")
        }.catch(on: nil, policy: .allErrors) { error in
            timeline.log("race", .outcome, "no mirror answered: \(error)")
        }

        let slowest = mirrors.map(\.latency).max() ?? 0
        return endOfScenario(after: slowest + 60, timeline: timeline) {
            let answered = Set(timeline.events.filter { $0.kind == .finished }.map(\.subject))
            let stopped = timeline.events.filter { $0.kind == .cancelHandler }.map(\.subject)
            let stillRan = stopped.filter { answered.contains($0) }
            let message =
                stillRan.isEmpty
                ? "nothing else happened: the \(stopped.count) cancelled requests never answered"
                : "cancelled but answered anyway: \(stillRan.joined(separator: ", "))"
            timeline.log("(end)", .note, message)
        }
    }
}
