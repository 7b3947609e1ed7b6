import CancellablePromiseKit
import Foundation
import PromiseCore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Small stand-ins for the UIKit, CoreLocation, URLSession and HTTP client pieces of the
// documented examples, so the examples keep their shape. Every request is a `FakeTask` of a
// `FakeBackend` that the test finishes or watches being cancelled. The views keep their state
// behind a lock: the examples' bodies set it on the main queue while the test reads it.

struct Image: Equatable {
    let name: String
    /// `UIImage(data:)`: `nil` for data that is not an image.
    init?(data: Data) {
        guard let name = String(data: data, encoding: .utf8), !name.isEmpty else { return nil }
        self.name = name
    }
}

struct Location: Equatable, CustomStringConvertible {
    let latitude: Double
    var description: String { "lat \(latitude)" }
}

struct Creds: Equatable {
    let user: String
}

struct Foo: Codable, Equatable {
    let id: Int
}

struct AutoCompleteCity: Equatable { let name: String }
struct WeatherResponse: Equatable { let temperature: Int }
struct WeatherInfo: Equatable { let text: String }

/// `UIApplication.shared`.
final class Application: Sendable {
    private let indicatorVisible = SendableBox(false)
    var isNetworkActivityIndicatorVisible: Bool {
        get { indicatorVisible.value }
        set { indicatorVisible.value = newValue }
    }
}

/// `UIImageView`.
final class ImageView: Sendable {
    private let shown = SendableBox<Image?>(nil)
    var image: Image? {
        get { shown.value }
        set { shown.value = newValue }
    }
}

/// `UILabel`.
final class Label: Sendable {
    private let shown = SendableBox<String?>(nil)
    var text: String? {
        get { shown.value }
        set { shown.value = newValue }
    }
}

/// The refresh button of the weather example.
final class RefreshButton: Sendable {
    private let animating = SendableBox(false)
    private let stops = Counter()
    var isAnimating: Bool { animating.value }
    var stopCount: Int { stops.value }
    func startAnimating() { animating.value = true }
    func stopAnimating() {
        animating.value = false
        stops.increment()
    }
}

/// `UIAlertController(for: error)`.
struct Alert {
    let error: Error
    init(for error: Error) { self.error = error }
}

/// `URLSession.shared`: `dataTask(.promise, with:)` returns a promise carrying its task.
struct FakeURLSession {
    let backend: FakeBackend
    func dataTask(_: PMKNamespacer, with url: URL) -> Promise<(data: Data, response: String)> {
        backend.start("data \(url.absoluteString)")
    }
    func dataTask(_: PMKNamespacer, with request: URLRequest) -> Promise<(data: Data, response: String)> {
        backend.start("data \(request.url!.absoluteString)")
    }
}

/// `CLLocationManager.requestLocation()`.
struct FakeLocationManager {
    let backend: FakeBackend
    func requestLocation() -> Promise<[Location]> {
        backend.start("location")
    }
}

/// `httpClient.request(…)` and its `responseDecodable(…)` promise.
struct FakeHTTPClient {
    let backend: FakeBackend
    struct Request {
        let backend: FakeBackend
        let url: String
        func responseDecodable<T>(_ type: T.Type) -> Promise<T> {
            backend.start(url, T.self)
        }
    }
    enum HTTPMethod { case get, post }
    func request(_ url: String, method: HTTPMethod = .get, parameters: [String: Any]? = nil) -> Request {
        Request(backend: backend, url: url)
    }
}
