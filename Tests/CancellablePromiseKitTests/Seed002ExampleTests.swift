import CancellablePromiseKit
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Every example of seed 002 (PromiseKit 7 Cancel.md, `cancellize()` spelling), as written there,
// with the Apple-only pieces replaced by the stand-ins of SeedStandIns.swift. Handlers use the
// default queues (the main queue), as in the seed.
//
// Adapted: `PMKError.cancelled` → `CancellablePromiseError.cancelled`; `UIApplication.shared`,
// `URLSession.shared`, `CLLocationManager`, the HTTP client library → stand-ins; `.then {` without a
// parameter where the body uses `creds` → `.then { creds in`; `JSONDecoder().decode(_:with:)` →
// `decode(_:from:)`; the intro's `when(fulfilled:)` takes `autoCancel: true` to cancel the
// running tasks too.

final class Seed002ExampleTests: XCTestCase {
    let url = URL(string: "https://example.com/avatar.png")!

    // MARK: Cancelling Promises (the first example)

    func introExample(
        _ screen: IntroScreen, autoCancel: Bool
    ) -> CancellableFinalizer {
        screen.application.isNetworkActivityIndicatorVisible = true

        let fetchImage = screen.session.dataTask(.promise, with: url)
            .cancellize()
            .compactMap { Image(data: $0.data) }
        let fetchLocation = screen.locationManager.requestLocation().cancellize().lastValue

        let finalizer = firstly {
            when(fulfilled: fetchImage, fetchLocation, autoCancel: autoCancel)
        }.done { image, location in
            screen.imageView.image = image
            screen.label.text = "\(location)"
        }.ensure {
            screen.application.isNetworkActivityIndicatorVisible = false
        }.catch(policy: .allErrors) { error in
            // `catch` will be invoked with `CancellablePromiseError.cancelled` when cancel is called
            // on the context. Use the default policy of `.allErrorsExceptCancellation`
            // to ignore cancellation errors.
            screen.show(Alert(for: error), sender: self)
        }
        return finalizer
    }

    func testIntroExampleFinalizerCancelRejectsEverythingAndRunsEnsure() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        let finalizer = introExample(screen, autoCancel: true)

        // Cancel currently active tasks and reject all cancellable promises
        // with 'CancellablePromiseError.cancelled'.  `cancel()` can be called from any thread
        // at any time.
        finalizer.cancel()

        XCTAssertTrue(finalizer.isCancelled)
        XCTAssertTrue(backend.task("data \(url.absoluteString)", (data: Data, response: String).self).isCancelled)
        XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
        waitUntil { !screen.alerts.isEmpty }
        XCTAssertEqual(screen.alerts[0] as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(screen.application.isNetworkActivityIndicatorVisible)
        XCTAssertNil(screen.imageView.image)
    }

    func testIntroExampleCompletesWhenNotCancelled() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        _ = introExample(screen, autoCancel: false)
        backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
            .succeed((Data("me".utf8), "200"))
        backend.task("location", [Location].self).succeed([Location(latitude: 5)])
        waitUntil { !screen.application.isNetworkActivityIndicatorVisible }
        XCTAssertEqual(screen.imageView.image?.name, "me")
        XCTAssertEqual(screen.label.text, "lat 5.0")
    }

    func testIntroExampleCompactMapRejectsUndecodableImage() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        // The screen keeps the finalizer (to cancel on leaving), as the example does.
        let finalizer = introExample(screen, autoCancel: true)
        backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
            .succeed((Data(), "200"))
        waitUntil { !screen.alerts.isEmpty }
        withExtendedLifetime(finalizer) {}
        guard case .compactMap? = screen.alerts[0] as? PMKError else {
            return XCTFail("expected PMKError.compactMap, got \(screen.alerts[0])")
        }
        // autoCancel: the failure of one input cancels the other.
        XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
    }

    // MARK: Cancel Chains

    func cancelChainsExample(_ screen: AvatarScreen) -> CancelContext {
        let context = firstly {
            screen.login()
            /* The 'Thenable.cancellize' method initiates a cancellable promise chain by
               returning a 'CancellablePromise'. */
        }.cancellize().then { creds in
            screen.fetch(avatar: creds.user)
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }.cancelContext
        return context
    }

    func testCancelChainsExampleCancelDuringLoginCancelsLogin() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let context = cancelChainsExample(screen)
        context.cancel()
        XCTAssertTrue(backend.task("login", Creds.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
        drainMainQueue()
        XCTAssertFalse(backend.wasStarted("avatar ann"))
    }

    func testCancelChainsExampleCancelDuringFetchCancelsThePlainFetchPromisesTask() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let context = cancelChainsExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "ann"))
        waitUntil { backend.wasStarted("avatar ann") }
        context.cancel()
        // `fetch` returns a plain promise carrying its task: the chain cancels that task.
        XCTAssertTrue(backend.task("avatar ann", Image.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
        XCTAssertNil(screen.imageView)
    }

    func testCancelChainsExampleCompletes() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        _ = cancelChainsExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "ann"))
        waitUntil { backend.wasStarted("avatar ann") }
        backend.task("avatar ann", Image.self).succeed(Image(data: Data("a".utf8))!)
        waitUntil { screen.imageView != nil }
        XCTAssertEqual(screen.imageView?.name, "a")
    }

    // MARK: Creating a partially cancellable chain

    func cancellableToStandardExample(_ screen: AvatarScreen) -> CancellablePromise<Creds> {
        let cancellablePromise = firstly {
            screen.login().cancellize()
        }
        cancellablePromise.promise.then { creds in
            screen.fetch(avatar: creds.user)
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }
        return cancellablePromise
    }

    func testCancellableToStandardChainCancelDuringLoginCancelsLogin() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let cancellablePromise = cancellableToStandardExample(screen)
        cancellablePromise.cancel()
        XCTAssertTrue(backend.task("login", Creds.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
    }

    func testCancellableToStandardChainCancelDuringFetchDoesNotCancelFetch() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let cancellablePromise = cancellableToStandardExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "cy"))
        waitUntil { backend.wasStarted("avatar cy") }
        cancellablePromise.cancel()
        XCTAssertFalse(backend.task("avatar cy", Image.self).isCancelled)
        backend.task("avatar cy", Image.self).succeed(Image(data: Data("cy".utf8))!)
        waitUntil { screen.imageView != nil }
        XCTAssertTrue(screen.caught.isEmpty)
    }

    /// "Convert a standard chain to a cancellable chain": a plain chain whose `then` body
    /// returns a `CancellablePromise` becomes cancellable from there.
    func standardToCancellableExample(_ screen: AvatarScreen) -> CancellableFinalizer {
        let promise = firstly {
            screen.login()
        }.then { creds in
            screen.fetch(avatar: creds.user).cancellize()
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }
        return promise
    }

    func testStandardToCancellableChainCancelDuringLoginSkipsFetchButNotLogin() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        screen.loginIsCancellable = false
        let promise = standardToCancellableExample(screen)
        promise.cancel()
        waitUntil { screen.cancelledSeen == 1 }
        let login = backend.task("login", Creds.self)
        XCTAssertFalse(login.isCancelled)
        login.succeed(Creds(user: "ann"))
        drainMainQueue()
        XCTAssertFalse(backend.wasStarted("avatar ann"))
        XCTAssertNil(screen.imageView)
    }

    func testStandardToCancellableChainCancelDuringFetchCancelsFetch() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        screen.loginIsCancellable = false
        let promise = standardToCancellableExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "ann"))
        waitUntil { backend.wasStarted("avatar ann") }
        promise.cancel()
        XCTAssertTrue(backend.task("avatar ann", Image.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
        XCTAssertNil(screen.imageView)
    }

    // MARK: Choose Your Networking Library

    func testHTTPClientExampleContextCancelCancelsTheRequest() {
        let backend = FakeBackend()
        let httpClient = FakeHTTPClient(backend: backend)
        let params: [String: Any] = ["q": 1]
        var foos: [Foo] = []
        var errors: [Error] = []
        let context = firstly {
            httpClient
                .request("http://example.com", method: .post, parameters: params)
                .responseDecodable(Foo.self)
        }.cancellize().done { foo in
            foos.append(foo)
        }.catch { error in
            errors.append(error)
        }.cancelContext

        context.cancel()
        XCTAssertTrue(backend.task("http://example.com", Foo.self).isCancelled)
        drainMainQueue()
        XCTAssertTrue(foos.isEmpty)
        XCTAssertTrue(errors.isEmpty)
    }

    func testURLSessionExampleContextCancelCancelsTheDataTask() {
        let backend = FakeBackend()
        let session = FakeURLSession(backend: backend)
        let url = URL(string: "https://example.com/foo")!
        func makeUrlRequest() throws -> URLRequest {
            var rq = URLRequest(url: url)
            rq.httpMethod = "POST"
            rq.addValue("application/json", forHTTPHeaderField: "Content-Type")
            rq.addValue("application/json", forHTTPHeaderField: "Accept")
            rq.httpBody = try JSONSerialization.data(withJSONObject: ["id": 1])
            return rq
        }
        var decoded = 0
        var errors: [Error] = []
        let context = firstly {
            session.dataTask(.promise, with: try makeUrlRequest())
        }.cancellize().map {
            try JSONDecoder().decode(Foo.self, from: $0.data)
        }.done { foo in
            decoded += 1
        }.catch { error in
            errors.append(error)
        }.cancelContext

        context.cancel()
        let task = backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
        XCTAssertEqual(task.cancelCount.value, 1)
        drainMainQueue()
        XCTAssertEqual(decoded, 0)
        XCTAssertTrue(errors.isEmpty)
    }
}
