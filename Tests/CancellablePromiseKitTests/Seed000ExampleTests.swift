import CancellablePromiseKit
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Every example of seed 000 (PromiseKit 7 "Cancelling Promises", global `cancellable(_:)`
// spelling), as written there, with the Apple-only pieces replaced by the stand-ins of
// SeedStandIns.swift. Handlers use the default queues (the main queue), as in the seed.
//
// Adapted: `PMKError.cancelled` → `CancellablePromiseError.cancelled`; `UIApplication.shared`,
// `URLSession.shared`, `CLLocationManager`, the HTTP client library → stand-ins; `promise =
// cancellable(login())` (a typo in the seed) → `cancellable(login())`; `.then {` without a
// parameter where the body uses `creds` → `.then { creds in`; `JSONDecoder().decode(_:with:)` →
// `decode(_:from:)`; the intro's `when(fulfilled:)` takes `autoCancel: true` to cancel the
// running tasks too (DESIGN: without it a combinator never cancels its inputs).

/// The screen of the seed's first example.
final class IntroScreen {
    let application = Application()
    let imageView = ImageView()
    let label = Label()
    var alerts: [Error] = []
    let session: FakeURLSession
    let locationManager: FakeLocationManager

    init(backend: FakeBackend) {
        session = FakeURLSession(backend: backend)
        locationManager = FakeLocationManager(backend: backend)
    }

    func show(_ alert: Alert, sender: Any?) { alerts.append(alert.error) }

    /// Seed 000, "Cancelling Promises", as written (plus `autoCancel` when asked).
    func start(url: URL, autoCancel: Bool) -> CancellableFinalizer {
        application.isNetworkActivityIndicatorVisible = true

        let fetchImage = cancellable(session.dataTask(.promise, with: url)).compactMap { Image(data: $0.data) }
        let fetchLocation = cancellable(locationManager.requestLocation()).lastValue

        let promise = firstly {
            when(fulfilled: fetchImage, fetchLocation, autoCancel: autoCancel)
        }.done { image, location in
            self.imageView.image = image
            self.label.text = "\(location)"
        }.ensure {
            self.application.isNetworkActivityIndicatorVisible = false
        }.catch(policy: .allErrors) { error in
            /* 'catch' will be invoked with 'CancellablePromiseError.cancelled' when cancel is called on the context.
               Use the default policy of '.allErrorsExceptCancellation' to ignore cancellation errors. */
            self.show(Alert(for: error), sender: self)
        }
        return promise
    }
}

/// The screen of the "Cancel Chains" and "Troubleshooting" examples.
final class AvatarScreen {
    let backend: FakeBackend
    var imageView: Image?
    var cancelledSeen = 0
    var caught: [Error] = []

    init(backend: FakeBackend) { self.backend = backend }

    /// `false`: `login()` is a plain promise with no task attached (nothing can cancel it).
    var loginIsCancellable = true

    func login() -> Promise<Creds> { backend.start("login", attached: loginIsCancellable) }
    func fetch(avatar user: String) -> Promise<Image> { backend.start("avatar \(user)") }

    func record(_ error: Error) {
        caught.append(error)
        if error.isCancelled {
            // the chain has been cancelled!
            cancelledSeen += 1
        }
    }
}

final class Seed000ExampleTests: XCTestCase {
    let url = URL(string: "https://example.com/avatar.png")!

    // MARK: Cancelling Promises (the first example)

    func testIntroExampleShowsImageAndLocationWhenNotCancelled() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        _ = screen.start(url: url, autoCancel: false)
        XCTAssertTrue(screen.application.isNetworkActivityIndicatorVisible)
        backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
            .succeed((Data("avatar".utf8), "200"))
        backend.task("location", [Location].self).succeed([Location(latitude: 1), Location(latitude: 2)])
        waitUntil { !screen.application.isNetworkActivityIndicatorVisible }
        XCTAssertEqual(screen.imageView.image?.name, "avatar")
        XCTAssertEqual(screen.label.text, "lat 2.0")
        XCTAssertTrue(screen.alerts.isEmpty)
    }

    func testIntroExampleCancelRejectsWithCancelledRunsEnsureAndNotDone() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        let promise = screen.start(url: url, autoCancel: false)
        promise.cancel()
        waitUntil { !screen.alerts.isEmpty }
        XCTAssertEqual(screen.alerts.first as? CancellablePromiseError, .cancelled)
        XCTAssertFalse(screen.application.isNetworkActivityIndicatorVisible)
        // The tasks finishing afterwards change nothing: no `done`.
        backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
            .succeed((Data("avatar".utf8), "200"))
        backend.task("location", [Location].self).succeed([Location(latitude: 1)])
        drainMainQueue()
        XCTAssertNil(screen.imageView.image)
        XCTAssertNil(screen.label.text)
        XCTAssertEqual(screen.alerts.count, 1)
    }

    func testIntroExampleWithAutoCancelCancelsTheRunningTasks() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        let promise = screen.start(url: url, autoCancel: true)
        promise.cancel()
        XCTAssertTrue(backend.task("data \(url.absoluteString)", (data: Data, response: String).self).isCancelled)
        XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
        waitUntil { !screen.alerts.isEmpty }
        XCTAssertTrue(screen.alerts[0].isCancelled)
        XCTAssertFalse(screen.application.isNetworkActivityIndicatorVisible)
    }

    func testIntroExampleCancelFromAnotherThread() {
        let backend = FakeBackend()
        let screen = IntroScreen(backend: backend)
        let promise = UncheckedBox(screen.start(url: url, autoCancel: true))
        runWithoutDeadlock { promise.value.cancel() }
        waitUntil { !screen.alerts.isEmpty }
        XCTAssertTrue(screen.alerts[0].isCancelled)
        XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
    }

    // MARK: Cancel Chains

    func cancelChainsExample(_ screen: AvatarScreen) -> CancelContext {
        let context = firstly {
            /* The 'cancellable' function initiates a cancellable promise chain by
               returning a 'CancellablePromise'. */
            cancellable(screen.login())
        }.then { creds in
            cancellable(screen.fetch(avatar: creds.user))
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }.cancelContext
        return context
    }

    func testCancelChainsExampleCompletesWithoutCancel() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let context = cancelChainsExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "ann"))
        waitUntil { backend.wasStarted("avatar ann") }
        backend.task("avatar ann", Image.self).succeed(Image(data: Data("ann.png".utf8))!)
        waitUntil { screen.imageView != nil }
        XCTAssertEqual(screen.imageView?.name, "ann.png")
        XCTAssertFalse(context.isCancelled)
        XCTAssertTrue(screen.caught.isEmpty)
    }

    func testCancelChainsExampleContextCancelDuringLoginCancelsLoginAndSkipsFetch() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let context = cancelChainsExample(screen)
        context.cancel()
        XCTAssertTrue(context.isCancelled)
        XCTAssertEqual(backend.task("login", Creds.self).cancelCount.value, 1)
        waitUntil { screen.cancelledSeen == 1 }
        drainMainQueue()
        XCTAssertFalse(backend.wasStarted("avatar ann"))
        XCTAssertNil(screen.imageView)
        XCTAssertEqual(screen.caught.count, 1)
    }

    func testCancelChainsExampleContextCancelDuringFetchCancelsFetch() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let context = cancelChainsExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "ann"))
        waitUntil { backend.wasStarted("avatar ann") }
        context.cancel()
        XCTAssertEqual(backend.task("avatar ann", Image.self).cancelCount.value, 1)
        XCTAssertEqual(backend.task("login", Creds.self).cancelCount.value, 0)
        waitUntil { screen.cancelledSeen == 1 }
        XCTAssertNil(screen.imageView)
    }

    // MARK: Creating a partially cancellable chain

    /// "Convert a cancellable chain to a standard chain".
    func cancellableToStandardExample(_ screen: AvatarScreen) -> CancellablePromise<Creds> {
        /* Here, by calling 'promise.then' rather than 'then' the chain is converted from a cancellable
           promise chain to a standard promise chain. In this example, calling 'cancel()' during 'login'
           will cancel the chain but calling 'cancel()' during the 'fetch' operation will have no effect: */
        let cancellablePromise = firstly {
            cancellable(screen.login())
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

    func testCancellableToStandardChainCancelDuringLoginCancelsTheChain() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let cancellablePromise = cancellableToStandardExample(screen)
        cancellablePromise.cancel()
        XCTAssertTrue(backend.task("login", Creds.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
        XCTAssertFalse(backend.wasStarted("avatar ann"))
    }

    func testCancellableToStandardChainCancelDuringFetchHasNoEffect() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let cancellablePromise = cancellableToStandardExample(screen)
        backend.task("login", Creds.self).succeed(Creds(user: "bob"))
        waitUntil { backend.wasStarted("avatar bob") }
        /* This will cancel the 'login' but will not cancel the 'fetch'.  So whether or not the
           chain is cancelled depends on how far the chain has progressed. */
        cancellablePromise.cancel()
        XCTAssertFalse(backend.task("avatar bob", Image.self).isCancelled)
        backend.task("avatar bob", Image.self).succeed(Image(data: Data("bob.png".utf8))!)
        waitUntil { screen.imageView != nil }
        XCTAssertEqual(screen.imageView?.name, "bob.png")
        XCTAssertTrue(screen.caught.isEmpty)
        XCTAssertEqual(cancellablePromise.value, Creds(user: "bob"))
    }

    /// "Convert a standard chain to a cancellable chain": `login()` is a plain, non-cancellable
    /// task here.
    func standardToCancellableExample(_ screen: AvatarScreen) -> CancellableFinalizer {
        /* In this example, calling 'cancel()' during 'login' will not cancel the login.  However,
           the chain will be cancelled immediately, and the 'fetch' will not be executed.  If 'cancel()'
           is called during the 'fetch' then both the 'fetch' itself and the promise chain will be
           cancelled immediately. */
        let promise = cancellable(
            firstly {
                screen.login()
            }
        ).then { creds in
            cancellable(screen.fetch(avatar: creds.user))
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
        XCTAssertTrue(login.promise.isPending)  // the login goes on
        login.succeed(Creds(user: "ann"))
        drainMainQueue()
        XCTAssertFalse(backend.wasStarted("avatar ann"))
        XCTAssertNil(screen.imageView)
    }

    func testStandardToCancellableChainCancelDuringFetchCancelsFetchAndChain() {
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

    // MARK: Troubleshooting (the corrected forms compile and cancel)

    func testTroubleshootingMultiLineClosureWithDeclaredReturnType() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let promise = firstly {
            cancellable(screen.login())
        }.then { creds -> CancellablePromise<Image> in
            let f = screen.fetch(avatar: creds.user)
            return cancellable(f)
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }
        backend.task("login", Creds.self).succeed(Creds(user: "ann"))
        waitUntil { backend.wasStarted("avatar ann") }
        promise.cancel()
        XCTAssertTrue(backend.task("avatar ann", Image.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
    }

    /// The seed's failing form (no declared return type): Swift 6 infers multi-statement
    /// closures, so it compiles as written.
    func testTroubleshootingMultiLineClosureWithoutDeclaredReturnTypeCompiles() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let promise = firstly {
            cancellable(screen.login())
        }.then { creds in
            let f = screen.fetch(avatar: creds.user)
            return cancellable(f)
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }
        promise.cancel()
        XCTAssertTrue(backend.task("login", Creds.self).isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
    }

    func testTroubleshootingCancellableOnBothLoginAndFetchMakesTheChainCancellable() {
        let backend = FakeBackend()
        let screen = AvatarScreen(backend: backend)
        let promise = firstly {
            cancellable(screen.login())
        }.then { creds in
            cancellable(screen.fetch(avatar: creds.user))
        }.done { image in
            screen.imageView = image
        }.catch(policy: .allErrors) { error in
            screen.record(error)
        }
        XCTAssertFalse(promise.isCancelled)
        promise.cancel()
        XCTAssertTrue(promise.isCancelled)
        waitUntil { screen.cancelledSeen == 1 }
    }

    // MARK: Choose Your Networking Library

    func testHTTPClientExampleContextCancelCancelsTheRequest() {
        let backend = FakeBackend()
        let httpClient = FakeHTTPClient(backend: backend)
        let params: [String: Any] = ["q": 1]
        var foos: [Foo] = []
        var errors: [Error] = []
        let context = firstly {
            cancellable(
                httpClient
                    .request("http://example.com", method: .post, parameters: params)
                    .responseDecodable(Foo.self))
        }.done { foo in
            foos.append(foo)
        }.catch { error in
            errors.append(error)
        }.cancelContext

        context.cancel()
        XCTAssertTrue(backend.task("http://example.com", Foo.self).isCancelled)
        drainMainQueue()
        XCTAssertTrue(foos.isEmpty)
        XCTAssertTrue(errors.isEmpty)  // the default policy skips cancellation
    }

    func testURLSessionExampleDecodesAndCanBeCancelled() throws {
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
        var foos: [Foo] = []
        let context = firstly {
            cancellable(session.dataTask(.promise, with: try makeUrlRequest()))
        }.map {
            try JSONDecoder().decode(Foo.self, from: $0.data)
        }.done { foo in
            foos.append(foo)
        }.catch { error in
            XCTFail("\(error)")
        }.cancelContext
        backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
            .succeed((Data(#"{"id": 7}"#.utf8), "200"))
        waitUntil { !foos.isEmpty }
        XCTAssertEqual(foos, [Foo(id: 7)])
        context.cancel()  // settled: nothing left to cancel
        XCTAssertEqual(
            backend.task("data \(url.absoluteString)", (data: Data, response: String).self).cancelCount.value, 0)
    }
}
