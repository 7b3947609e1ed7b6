import CancellablePromiseKit
import Dispatch
import Foundation

/// `search`: a search field. Every keystroke starts a search through `LatestWins`, which cancels
/// the previous one first; each search asks a flaky backend through `retry` with exponential
/// backoff. Stale searches are stopped wherever they are — mid-request or mid-backoff — and only
/// the last text's results are shown.
public enum SearchScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        A search field: each keystroke runs searches.run { search(text) }, and LatestWins cancels the
        previous search before starting the new one (switchToLatest / flatMapLatest, for promises).
        The backend is flaky (HTTP 503), so a search is
            retry(maxAttempts: 4, delay: .exponential(initial: 0.12, maximum: 0.2, jitter: 0.1),
                  if: { $0 is SimulatedFailure }) { attempt in backend.search(text) }
        Stale searches stop mid-request or mid-backoff; only the last text shows results.
        """

    /// What the user types, and when (milliseconds after the start).
    public static let keystrokes: [(text: String, at: Int)] = [("s", 0), ("sw", 60), ("swi", 120), ("swift", 180)]

    /// The backoff between attempts: about 120 ms, then 200 ms (the cap).
    public static let backoff = RetryDelay.exponential(initial: 0.12, multiplier: 2, maximum: 0.2, jitter: 0.1)

    /// How the simulated backend answers attempt `attempt` for `text`: how long it takes, and
    /// the failure it answers with, if any.
    static func backend(_ text: String, attempt: Int) -> (takes: Int, failure: String?) {
        switch (text, attempt) {
        case ("sw", 1), ("swift", 1), ("swift", 2): return (10, "HTTP 503")
        case ("swift", _): return (30, nil)
        default: return (200, nil)
        }
    }

    /// The words the backend searches.
    static let words = ["sand", "sea", "swallow", "sweet", "swift", "swifter", "swiftness", "swim", "swing"]

    /// One search: attempts at the backend, retried with backoff while it answers HTTP 503.
    static func search(_ text: String, timeline: Timeline) -> CancellablePromise<[String]> {
        let subject = "\"\(text)\""
        return retry(
            maxAttempts: 4, delay: backoff, scheduler: timeline.scheduler,
            if: { error in
                let retryable = error is SimulatedFailure
                if retryable {
                    timeline.log(subject, .note, "\(error) is retryable: backing off before the next attempt")
                }
                return retryable
            }
        ) { attempt in
            let answer = backend(text, attempt: attempt)
            return simulatedWork(
                "\(subject) #\(attempt)", takes: answer.takes, failingWith: answer.failure,
                value: words.filter { $0.hasPrefix(text) }, timeline: timeline)
        }
    }

    /// Types the keystrokes on the timeline's clock; resolves once every search is over.
    public static func run(timeline: Timeline) -> Guarantee<Void> {
        let searches = LatestWins()
        for (text, at) in keystrokes {
            timeline.schedule(after: at) {
                let subject = "\"\(text)\""
                let cancels = text == keystrokes[0].text ? "" : " (cancels the previous search first)"
                timeline.log(
                    "typing", .cancelRequested, "typed \(subject): searches.run { search(\(subject)) }\(cancels)")
                searches.run {
                    search(text, timeline: timeline)
                }.done(on: nil) { results in
                    timeline.log(
                        subject, .outcome, "showing \(results.count) results: \(results.joined(separator: ", "))")
                }.catch(on: nil, policy: .allErrors) { error in
                    let kind: TimelineEvent.Kind = error.isCancelled ? .rejectedByCancel : .failed
                    timeline.log(subject, kind, "search rejected: \(describe(error))")
                }
            }
        }

        return endOfScenario(after: 650, timeline: timeline) {
            withExtendedLifetime(searches) {}
            let events = timeline.events
            let stale = keystrokes.dropLast().map { "\"\($0.text)\"" }
            let stopped = stale.map { subject -> String in
                let midRequest = events.contains { $0.kind == .cancelHandler && $0.subject.hasPrefix(subject + " #") }
                return "\(subject) \(midRequest ? "mid-request" : "mid-backoff (its timer stopped, no next attempt)")"
            }
            let attempts = events.filter { $0.kind == .started && $0.subject.hasPrefix("\"swift\" #") }.count
            timeline.log("(end)", .note, "stale searches stopped: \(stopped.joined(separator: "; "))")
            timeline.log("(end)", .note, "\"swift\" answered on attempt \(attempts) of 4")
        }
    }
}
