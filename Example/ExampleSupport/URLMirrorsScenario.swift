import Foundation
import PromiseFoundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `mirrors --url U --url U…`: the same race over real HTTP requests. Each request is
/// `URLSession.shared.dataTask(.promise, with: url).cancellize()`, so the losers' cancel stops
/// the real `URLSessionTask` (the connection is closed).
public enum URLMirrorsScenario {
    /// What the scenario prints before its timeline.
    public static let introduction = """
        Request every URL at once, keep the first good (2xx) answer, cancel the other requests:
            race(fulfilled: urls.map { URLSession.shared.dataTask(.promise, with: $0).cancellize() },
                 autoCancel: true).timeout(seconds: 15)
        """

    /// How long the race may take before every request is cancelled.
    public static let deadline: TimeInterval = 15

    /// Races GET requests for `urls`; resolves once the race has settled.
    public static func run(urls: [URL], timeline: Timeline) -> Guarantee<Void> {
        let names = subjectNames(for: urls)
        let requests = zip(urls, names).map { url, name in fetch(url, name: name, timeline: timeline) }

        let fastest = race(fulfilled: requests, autoCancel: true).timeout(seconds: deadline)

        let (done, finish) = Guarantee<Void>.pending()
        fastest.done(on: nil) { winner in
            let stopped = timeline.events.filter { $0.kind == .cancelHandler }.map(\.subject)
            let list =
                stopped.isEmpty ? "none (every other request had already settled)" : stopped.joined(separator: ", ")
            timeline.log("race", .outcome, "won by \(winner); requests stopped: \(list)")
        }.catch(on: nil, policy: .allErrors) { error in
            timeline.log("race", .outcome, "no good answer: \(error)")
        }.finally(on: nil) {
            finish(())
        }
        return done
    }

    /// One mirror: the real request, wrapped so that the timeline shows when its cancel ran.
    static func fetch(_ url: URL, name: String, timeline: Timeline) -> CancellablePromise<String> {
        timeline.log(name, .started, "GET \(url.absoluteString)")
        let request = URLSession.shared.dataTask(.promise, with: url).cancellize()
        let answer = request.validate().map(on: nil) { data, response -> String in
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            timeline.log(name, .finished, "answered: HTTP \(status), \(data.count) bytes")
            return name
        }
        answer.catch(on: nil) { error in
            timeline.log(name, .failed, "failed: \(shortDescription(of: error))")
        }
        return CancellablePromise(using: answer.promise) {
            timeline.log(name, .cancelHandler, "cancel handler ran: URLSessionTask cancelled")
            request.cancel()
        }
    }

    /// `HTTP 404`, or the first line of the error's description.
    static func shortDescription(of error: Error) -> String {
        if let http = error as? PMKHTTPError { return "HTTP \(http.statusCode)" }
        let line = error.localizedDescription.split(separator: "\n").first.map(String.init) ?? "\(error)"
        return line.count > 100 ? String(line.prefix(100)) + "…" : line
    }

    /// Host names, numbered when several URLs share a host.
    static func subjectNames(for urls: [URL]) -> [String] {
        let hosts = urls.map { $0.host ?? $0.absoluteString }
        return hosts.enumerated().map { index, host in
            hosts.filter { $0 == host }.count > 1 ? "#\(index + 1) \(host)" : host
        }
    }
}
