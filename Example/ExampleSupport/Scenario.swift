import CancellablePromiseKit
import Foundation

/// A runnable scenario of the example: a title, a few lines of introduction, and the code.
public struct Scenario: Sendable {
    /// The subcommand that runs it.
    public let name: String
    /// The heading printed above it.
    public let title: String
    /// What it shows, printed under the heading.
    public let introduction: String
    /// Starts the scenario, logging to the timeline; the guarantee resolves when it is over.
    public let run: @Sendable (Timeline) -> Guarantee<Void>

    /// The autoCancel race of simulated mirrors.
    public static let mirrors = Scenario(
        name: "mirrors", title: "race(fulfilled:autoCancel: true) of four simulated mirrors",
        introduction: MirrorsScenario.introduction, run: { MirrorsScenario.run(timeline: $0) })

    /// The task built from sub-promises, cancelled half-way.
    public static let subtasks = Scenario(
        name: "subtasks", title: "a task built from sub-promises, cancelled half-way",
        introduction: SubtasksScenario.introduction, run: { SubtasksScenario.run(timeline: $0) })

    /// Existing `Promise` code adopted with `cancellize()` / `asCancellable()`.
    public static let adopt = Scenario(
        name: "adopt", title: "existing Promise code, cancelled from another thread",
        introduction: AdoptScenario.introduction, run: { AdoptScenario.run(timeline: $0) })

    /// Search-as-you-type: latest wins, and a flaky backend answered through retry with backoff.
    public static let search = Scenario(
        name: "search", title: "search-as-you-type: LatestWins and retry with backoff",
        introduction: SearchScenario.introduction, run: { SearchScenario.run(timeline: $0) })

    /// Two screens share one download through an `InFlightCoalescer`.
    public static let share = Scenario(
        name: "share", title: "two screens, one download: InFlightCoalescer",
        introduction: ShareScenario.introduction, run: { ShareScenario.run(timeline: $0) })

    /// A CPU-bound step that stops early when its screen closes (`CancellationToken.current`).
    public static let render = Scenario(
        name: "render", title: "a running render stops when its screen closes: CancellationToken.current",
        introduction: RenderScenario.introduction, run: { RenderScenario.run(timeline: $0) })

    /// The race over real URLs.
    public static func mirrors(urls: [URL]) -> Scenario {
        Scenario(
            name: "mirrors",
            title: "race(fulfilled:autoCancel: true) of \(urls.count) URL\(urls.count == 1 ? "" : "s")",
            introduction: URLMirrorsScenario.introduction, run: { URLMirrorsScenario.run(urls: urls, timeline: $0) })
    }

    /// The scenarios a command runs (none for `help`).
    public static func scenarios(for command: Command) -> [Scenario] {
        switch command {
        case .all: return [.mirrors, .subtasks, .adopt, .search, .share, .render]
        case .mirrors: return [.mirrors]
        case .mirrorURLs(let urls): return [.mirrors(urls: urls)]
        case .subtasks: return [.subtasks]
        case .adopt: return [.adopt]
        case .search: return [.search]
        case .share: return [.share]
        case .render: return [.render]
        case .help: return []
        }
    }
}

/// Runs scenarios one after the other and prints them.
public enum ExampleRunner {
    /// Runs `scenarios` in order, writing every line through `output`; the guarantee resolves
    /// when the last one is over. Times are milliseconds since the start of each scenario.
    public static func run(_ scenarios: [Scenario], output: @escaping @Sendable (String) -> Void) -> Guarantee<Void> {
        var sequence = Guarantee<Void>()
        for scenario in scenarios {
            sequence = sequence.then(on: nil) { () -> Guarantee<Void> in
                output("== \(scenario.name): \(scenario.title)")
                output("")
                for line in scenario.introduction.split(separator: "\n", omittingEmptySubsequences: false) {
                    output("   \(line)")
                }
                output("")
                let timeline = Timeline { output("  \($0)") }
                return scenario.run(timeline).map(on: nil) { output("") }
            }
        }
        return sequence
    }
}
