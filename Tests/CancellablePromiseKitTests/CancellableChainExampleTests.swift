import CancellablePromiseKit
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The examples of PromiseKit 7's cancellation guide, as a user writes them, with the Apple-only
// pieces replaced by the stand-ins of ExampleStandIns.swift. The guide exists in two spellings of
// the start of a cancellable chain, the global `cancellable(login())` and the method
// `login().cancellize()`; every example below is written in both, and every test runs both.
// Handlers use the default queues (the main queue), as in the guide.
//
// Adapted: `PMKError.cancelled` → `CancellablePromiseError.cancelled`; `UIApplication.shared`,
// `URLSession.shared`, `CLLocationManager`, the HTTP client library → stand-ins; `promise =
// cancellable(login())` inside `firstly` (a typo) → `cancellable(login())`; `.then {` without a
// parameter where the body uses `creds` → `.then { creds in`; `JSONDecoder().decode(_:with:)` →
// `decode(_:from:)`; the intro's `when(fulfilled:)` takes `autoCancel: true` where the test wants
// the running tasks cancelled too (without it a combinator never cancels its inputs).

/// The two ways the guide starts a cancellable chain.
enum ChainSpelling: CaseIterable, CustomStringConvertible {
    /// The global function: `cancellable(login())`.
    case cancellableFunction
    /// The method: `login().cancellize()`.
    case cancellizeMethod

    var description: String {
        switch self {
        case .cancellableFunction: return "cancellable(_:)"
        case .cancellizeMethod: return "cancellize()"
        }
    }
}

/// The screen of the guide's first example (its state behind locks, as the stand-ins').
final class IntroScreen: Sendable {
    let application = Application()
    let imageView = ImageView()
    let label = Label()
    private let shownAlerts = Recorder<Error>()
    var alerts: [Error] { shownAlerts.all }
    let session: FakeURLSession
    let locationManager: FakeLocationManager

    init(backend: FakeBackend) {
        session = FakeURLSession(backend: backend)
        locationManager = FakeLocationManager(backend: backend)
    }

    func show(_ alert: Alert, sender: Any?) { shownAlerts.append(alert.error) }

    /// "Cancelling Promises", as written (plus `autoCancel` when asked).
    func start(url: URL, autoCancel: Bool, _ spelling: ChainSpelling) -> CancellableFinalizer {
        application.isNetworkActivityIndicatorVisible = true

        let fetchImage: CancellablePromise<Image>
        let fetchLocation: CancellablePromise<Location>
        switch spelling {
        case .cancellableFunction:
            fetchImage = cancellable(session.dataTask(.promise, with: url)).compactMap { Image(data: $0.data) }
            fetchLocation = cancellable(locationManager.requestLocation()).lastValue
        case .cancellizeMethod:
            fetchImage = session.dataTask(.promise, with: url)
                .cancellize()
                .compactMap { Image(data: $0.data) }
            fetchLocation = locationManager.requestLocation().cancellize().lastValue
        }

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

/// The screen of the "Cancel Chains", "partially cancellable chain" and "Troubleshooting"
/// examples (its state behind locks).
final class AvatarScreen: Sendable {
    let backend: FakeBackend
    private let shownImage = SendableBox<Image?>(nil)
    private let cancellations = Counter()
    private let errors = Recorder<Error>()
    private let loginAttached = SendableBox(true)

    var imageView: Image? {
        get { shownImage.value }
        set { shownImage.value = newValue }
    }
    var cancelledSeen: Int { cancellations.value }
    var caught: [Error] { errors.all }

    init(backend: FakeBackend) { self.backend = backend }

    /// `false`: `login()` is a plain promise with no task attached (nothing can cancel it).
    var loginIsCancellable: Bool {
        get { loginAttached.value }
        set { loginAttached.value = newValue }
    }

    func login() -> Promise<Creds> { backend.start("login", attached: loginIsCancellable) }
    func fetch(avatar user: String) -> Promise<Image> { backend.start("avatar \(user)") }

    func record(_ error: Error) {
        errors.append(error)
        if error.isCancelled {
            // the chain has been cancelled!
            cancellations.increment()
        }
    }
}

/// What the networking examples' `done` and `catch` received.
final class FooReceiver: Sendable {
    let foos = Recorder<Foo>()
    let errors = Recorder<Error>()
}

extension CancellablePromise where T == Image {
    /// How every avatar chain of the guide ends: `done` shows the image, `catch` records any
    /// error, cancellation included.
    func shown(on screen: AvatarScreen) -> CancellableFinalizer {
        done { screen.imageView = $0 }.catch(policy: .allErrors) { screen.record($0) }
    }
}

extension Promise where T == Image {
    /// `shown(on:)` for the standard (not cancellable) part of a chain.
    @discardableResult
    func shown(on screen: AvatarScreen) -> PMKFinalizer {
        done { screen.imageView = $0 }.catch(policy: .allErrors) { screen.record($0) }
    }
}

extension CancellablePromise where T == Foo {
    /// How the networking examples end: `done` receives the value, `catch` the error (the
    /// default policy skips cancellation); returns the chain's context.
    func received(by receiver: FooReceiver) -> CancelContext {
        done { foo in
            receiver.foos.append(foo)
        }.catch { error in
            receiver.errors.append(error)
        }.cancelContext
    }
}

final class CancellableChainExampleTests: XCTestCase {
    let url = URL(string: "https://example.com/avatar.png")!

    /// Runs `body` once per spelling; a failure says which spelling it came from.
    func forEachSpelling(_ body: (ChainSpelling) -> Void) {
        for spelling in ChainSpelling.allCases {
            let failuresBefore = testRun?.totalFailureCount ?? 0
            body(spelling)
            if (testRun?.totalFailureCount ?? 0) > failuresBefore {
                XCTFail("the failures above are for the \(spelling) spelling")
            }
        }
    }

    /// A fresh backend and an avatar screen on it.
    func freshAvatarScreen() -> (FakeBackend, AvatarScreen) {
        let backend = FakeBackend()
        return (backend, AvatarScreen(backend: backend))
    }

    /// `forEachSpelling` with a fresh backend and avatar screen for each.
    func forEachSpellingOnAFreshAvatarScreen(_ body: (ChainSpelling, FakeBackend, AvatarScreen) -> Void) {
        forEachSpelling { spelling in
            let (backend, screen) = freshAvatarScreen()
            body(spelling, backend, screen)
        }
    }

    /// `forEachSpelling` with a fresh backend and intro screen for each.
    func forEachSpellingOnAFreshIntroScreen(_ body: (ChainSpelling, FakeBackend, IntroScreen) -> Void) {
        forEachSpelling { spelling in
            let backend = FakeBackend()
            body(spelling, backend, IntroScreen(backend: backend))
        }
    }

    /// `forEachSpelling` with a fresh backend and receiver for each.
    func forEachSpellingWithAFreshFooReceiver(_ body: (ChainSpelling, FakeBackend, FooReceiver) -> Void) {
        forEachSpelling { spelling in body(spelling, FakeBackend(), FooReceiver()) }
    }

    /// Cancels `promise` and checks that `task` was cancelled and that `screen` saw the chain's
    /// cancellation once.
    func assertCancelling<T>(
        _ promise: CancellableFinalizer, cancels task: FakeTask<T>, seenBy screen: AvatarScreen, line: UInt = #line
    ) {
        promise.cancel()
        XCTAssertTrue(task.isCancelled, line: line)
        XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 }, line: line)
    }

    /// The login succeeds as `user`, and the chain goes on to fetch that user's avatar.
    func logIn(_ backend: FakeBackend, as user: String) {
        backend.task("login", Creds.self).succeed(Creds(user: user))
        XCTAssertTrue(eventually(seconds: 10) { backend.wasStarted("avatar \(user)") })
    }

    // MARK: Cancelling Promises (the first example)

    func testIntroExampleShowsImageAndLocationWhenNotCancelled() {
        forEachSpellingOnAFreshIntroScreen { spelling, backend, screen in
            _ = screen.start(url: url, autoCancel: false, spelling)
            XCTAssertTrue(screen.application.isNetworkActivityIndicatorVisible)
            backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
                .succeed((Data("avatar".utf8), "200"))
            backend.task("location", [Location].self).succeed([Location(latitude: 1), Location(latitude: 2)])
            XCTAssertTrue(eventually(seconds: 10) { !screen.application.isNetworkActivityIndicatorVisible })
            XCTAssertEqual(screen.imageView.image?.name, "avatar")
            XCTAssertEqual(screen.label.text, "lat 2.0")
            XCTAssertTrue(screen.alerts.isEmpty)
        }
    }

    func testIntroExampleCancelRejectsWithCancelledRunsEnsureAndNotDone() {
        forEachSpellingOnAFreshIntroScreen { spelling, backend, screen in
            let promise = screen.start(url: url, autoCancel: false, spelling)
            promise.cancel()
            XCTAssertTrue(eventually(seconds: 10) { !screen.alerts.isEmpty })
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
    }

    func testIntroExampleCancelWithAutoCancelCancelsTheRunningTasksAndRunsEnsure() {
        forEachSpellingOnAFreshIntroScreen { spelling, backend, screen in
            let finalizer = screen.start(url: url, autoCancel: true, spelling)

            // Cancel currently active tasks and reject all cancellable promises
            // with 'CancellablePromiseError.cancelled'.  `cancel()` can be called from any thread
            // at any time.
            finalizer.cancel()

            XCTAssertTrue(finalizer.isCancelled)
            XCTAssertTrue(
                backend.task("data \(url.absoluteString)", (data: Data, response: String).self).isCancelled)
            XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
            XCTAssertTrue(eventually(seconds: 10) { !screen.alerts.isEmpty })
            XCTAssertEqual(screen.alerts[0] as? CancellablePromiseError, .cancelled)
            XCTAssertFalse(screen.application.isNetworkActivityIndicatorVisible)
            XCTAssertNil(screen.imageView.image)
        }
    }

    func testIntroExampleCancelFromAnotherThread() {
        forEachSpellingOnAFreshIntroScreen { spelling, backend, screen in
            let promise = UncheckedBox(screen.start(url: url, autoCancel: true, spelling))
            runWithoutDeadlock { promise.value.cancel() }
            XCTAssertTrue(eventually(seconds: 10) { !screen.alerts.isEmpty })
            XCTAssertTrue(screen.alerts[0].isCancelled)
            XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
        }
    }

    func testIntroExampleCompactMapRejectsUndecodableImage() {
        forEachSpellingOnAFreshIntroScreen { spelling, backend, screen in
            // The screen keeps the finalizer (to cancel on leaving), as the example does.
            let finalizer = screen.start(url: url, autoCancel: true, spelling)
            backend.task("data \(url.absoluteString)", (data: Data, response: String).self)
                .succeed((Data(), "200"))
            XCTAssertTrue(eventually(seconds: 10) { !screen.alerts.isEmpty })
            withExtendedLifetime(finalizer) {}
            guard case .compactMap? = screen.alerts[0] as? PMKError else {
                return XCTFail("expected PMKError.compactMap, got \(screen.alerts[0])")
            }
            // autoCancel: the failure of one input cancels the other.
            XCTAssertTrue(backend.task("location", [Location].self).isCancelled)
        }
    }

    // MARK: Cancel Chains

    func cancelChainsExample(_ screen: AvatarScreen, _ spelling: ChainSpelling) -> CancelContext {
        switch spelling {
        case .cancellableFunction:
            let context = firstly {
                /* The 'cancellable' function initiates a cancellable promise chain by
                   returning a 'CancellablePromise'. */
                cancellable(screen.login())
            }.then { creds in
                cancellable(screen.fetch(avatar: creds.user))
            }.shown(on: screen).cancelContext
            return context
        case .cancellizeMethod:
            let context = firstly {
                screen.login()
                /* The 'Thenable.cancellize' method initiates a cancellable promise chain by
                   returning a 'CancellablePromise'. */
            }.cancellize().then { creds in
                screen.fetch(avatar: creds.user)
            }.shown(on: screen).cancelContext
            return context
        }
    }

    func testCancelChainsExampleCompletesWithoutCancel() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            let context = cancelChainsExample(screen, spelling)
            logIn(backend, as: "ann")
            backend.task("avatar ann", Image.self).succeed(Image(data: Data("ann.png".utf8))!)
            XCTAssertTrue(eventually(seconds: 10) { screen.imageView != nil })
            XCTAssertEqual(screen.imageView?.name, "ann.png")
            XCTAssertFalse(context.isCancelled)
            XCTAssertTrue(screen.caught.isEmpty)
        }
    }

    func testCancelChainsExampleContextCancelDuringLoginCancelsLoginAndSkipsFetch() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            let context = cancelChainsExample(screen, spelling)
            context.cancel()
            XCTAssertTrue(context.isCancelled)
            XCTAssertEqual(backend.task("login", Creds.self).cancelCount.value, 1)
            XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 })
            drainMainQueue()
            XCTAssertFalse(backend.wasStarted("avatar ann"))
            XCTAssertNil(screen.imageView)
            XCTAssertEqual(screen.caught.count, 1)
        }
    }

    func testCancelChainsExampleContextCancelDuringFetchCancelsFetch() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            let context = cancelChainsExample(screen, spelling)
            logIn(backend, as: "ann")
            context.cancel()
            // In the `cancellize()` spelling `fetch` returns a plain promise carrying its task: the
            // chain cancels that task all the same.
            XCTAssertEqual(backend.task("avatar ann", Image.self).cancelCount.value, 1)
            XCTAssertEqual(backend.task("login", Creds.self).cancelCount.value, 0)
            XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 })
            XCTAssertNil(screen.imageView)
        }
    }

    // MARK: Creating a partially cancellable chain

    /// "Convert a cancellable chain to a standard chain".
    func cancellableToStandardExample(_ screen: AvatarScreen, _ spelling: ChainSpelling) -> CancellablePromise<Creds> {
        /* Here, by calling 'promise.then' rather than 'then' the chain is converted from a cancellable
           promise chain to a standard promise chain. In this example, calling 'cancel()' during 'login'
           will cancel the chain but calling 'cancel()' during the 'fetch' operation will have no effect: */
        let cancellablePromise = firstly { () -> CancellablePromise<Creds> in
            switch spelling {
            case .cancellableFunction: return cancellable(screen.login())
            case .cancellizeMethod: return screen.login().cancellize()
            }
        }
        cancellablePromise.promise.then { creds in
            screen.fetch(avatar: creds.user)
        }.shown(on: screen)
        return cancellablePromise
    }

    func testCancellableToStandardChainCancelDuringLoginCancelsTheChain() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            let cancellablePromise = cancellableToStandardExample(screen, spelling)
            cancellablePromise.cancel()
            XCTAssertTrue(backend.task("login", Creds.self).isCancelled)
            XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 })
            XCTAssertFalse(backend.wasStarted("avatar ann"))
        }
    }

    func testCancellableToStandardChainCancelDuringFetchHasNoEffect() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            let cancellablePromise = cancellableToStandardExample(screen, spelling)
            logIn(backend, as: "bob")
            /* This will cancel the 'login' but will not cancel the 'fetch'.  So whether or not the
               chain is cancelled depends on how far the chain has progressed. */
            cancellablePromise.cancel()
            XCTAssertFalse(backend.task("avatar bob", Image.self).isCancelled)
            backend.task("avatar bob", Image.self).succeed(Image(data: Data("bob.png".utf8))!)
            XCTAssertTrue(eventually(seconds: 10) { screen.imageView != nil })
            XCTAssertEqual(screen.imageView?.name, "bob.png")
            XCTAssertTrue(screen.caught.isEmpty)
            XCTAssertEqual(cancellablePromise.value, Creds(user: "bob"))
        }
    }

    /// "Convert a standard chain to a cancellable chain": `login()` is a plain, non-cancellable
    /// task here. In the `cancellize()` spelling the chain is a plain one whose `then` body
    /// returns a `CancellablePromise`, and it becomes cancellable from there.
    func standardToCancellableExample(_ screen: AvatarScreen, _ spelling: ChainSpelling) -> CancellableFinalizer {
        /* In this example, calling 'cancel()' during 'login' will not cancel the login.  However,
           the chain will be cancelled immediately, and the 'fetch' will not be executed.  If 'cancel()'
           is called during the 'fetch' then both the 'fetch' itself and the promise chain will be
           cancelled immediately. */
        switch spelling {
        case .cancellableFunction:
            return cancellable(
                firstly {
                    screen.login()
                }
            ).then { creds in
                cancellable(screen.fetch(avatar: creds.user))
            }.shown(on: screen)
        case .cancellizeMethod:
            return firstly {
                screen.login()
            }.then { creds in
                screen.fetch(avatar: creds.user).cancellize()
            }.shown(on: screen)
        }
    }

    func testStandardToCancellableChainCancelDuringLoginSkipsFetchButNotLogin() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            screen.loginIsCancellable = false
            let promise = standardToCancellableExample(screen, spelling)
            promise.cancel()
            XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 })
            let login = backend.task("login", Creds.self)
            XCTAssertFalse(login.isCancelled)
            XCTAssertTrue(login.promise.isPending)  // the login goes on
            login.succeed(Creds(user: "ann"))
            drainMainQueue()
            XCTAssertFalse(backend.wasStarted("avatar ann"))
            XCTAssertNil(screen.imageView)
        }
    }

    func testStandardToCancellableChainCancelDuringFetchCancelsFetchAndChain() {
        forEachSpellingOnAFreshAvatarScreen { spelling, backend, screen in
            screen.loginIsCancellable = false
            let promise = standardToCancellableExample(screen, spelling)
            logIn(backend, as: "ann")
            promise.cancel()
            XCTAssertTrue(backend.task("avatar ann", Image.self).isCancelled)
            XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 })
            XCTAssertNil(screen.imageView)
        }
    }

    // MARK: Troubleshooting (the corrected forms compile and cancel)

    func testTroubleshootingMultiLineClosureWithDeclaredReturnType() {
        let (backend, screen) = freshAvatarScreen()
        let promise = firstly {
            cancellable(screen.login())
        }.then { creds -> CancellablePromise<Image> in
            let f = screen.fetch(avatar: creds.user)
            return cancellable(f)
        }.shown(on: screen)
        logIn(backend, as: "ann")
        assertCancelling(promise, cancels: backend.task("avatar ann", Image.self), seenBy: screen)
    }

    /// The guide's failing form (no declared return type): Swift 6 infers multi-statement
    /// closures, so it compiles as written.
    func testTroubleshootingMultiLineClosureWithoutDeclaredReturnTypeCompiles() {
        let (backend, screen) = freshAvatarScreen()
        let promise = firstly {
            cancellable(screen.login())
        }.then { creds in
            let f = screen.fetch(avatar: creds.user)
            return cancellable(f)
        }.shown(on: screen)
        assertCancelling(promise, cancels: backend.task("login", Creds.self), seenBy: screen)
    }

    func testTroubleshootingCancellableOnBothLoginAndFetchMakesTheChainCancellable() {
        let screen = AvatarScreen(backend: FakeBackend())
        let promise = firstly {
            cancellable(screen.login())
        }.then { creds in
            cancellable(screen.fetch(avatar: creds.user))
        }.shown(on: screen)
        XCTAssertFalse(promise.isCancelled)
        promise.cancel()
        XCTAssertTrue(promise.isCancelled)
        XCTAssertTrue(eventually(seconds: 10) { screen.cancelledSeen == 1 })
    }

    // MARK: Choose Your Networking Library

    func httpClientExample(
        _ httpClient: FakeHTTPClient, _ receiver: FooReceiver, _ spelling: ChainSpelling
    ) -> CancelContext {
        let params: [String: Any] = ["q": 1]
        switch spelling {
        case .cancellableFunction:
            return firstly {
                cancellable(
                    httpClient
                        .request("http://example.com", method: .post, parameters: params)
                        .responseDecodable(Foo.self))
            }.received(by: receiver)
        case .cancellizeMethod:
            return firstly {
                httpClient
                    .request("http://example.com", method: .post, parameters: params)
                    .responseDecodable(Foo.self)
            }.cancellize().received(by: receiver)
        }
    }

    func testHTTPClientExampleContextCancelCancelsTheRequest() {
        forEachSpellingWithAFreshFooReceiver { spelling, backend, receiver in
            let context = httpClientExample(FakeHTTPClient(backend: backend), receiver, spelling)
            context.cancel()
            XCTAssertTrue(backend.task("http://example.com", Foo.self).isCancelled)
            drainMainQueue()
            XCTAssertTrue(receiver.foos.all.isEmpty)
            XCTAssertTrue(receiver.errors.all.isEmpty)  // the default policy skips cancellation
        }
    }

    static let fooURL = URL(string: "https://example.com/foo")!

    func urlSessionExample(
        _ session: FakeURLSession, _ receiver: FooReceiver, _ spelling: ChainSpelling
    ) -> CancelContext {
        func makeUrlRequest() throws -> URLRequest {
            var rq = URLRequest(url: Self.fooURL)
            rq.httpMethod = "POST"
            rq.addValue("application/json", forHTTPHeaderField: "Content-Type")
            rq.addValue("application/json", forHTTPHeaderField: "Accept")
            rq.httpBody = try JSONSerialization.data(withJSONObject: ["id": 1])
            return rq
        }
        switch spelling {
        case .cancellableFunction:
            return firstly {
                cancellable(session.dataTask(.promise, with: try makeUrlRequest()))
            }.map {
                try JSONDecoder().decode(Foo.self, from: $0.data)
            }.received(by: receiver)
        case .cancellizeMethod:
            return firstly {
                session.dataTask(.promise, with: try makeUrlRequest())
            }.cancellize().map {
                try JSONDecoder().decode(Foo.self, from: $0.data)
            }.received(by: receiver)
        }
    }

    func testURLSessionExampleDecodesAndCancelAfterwardsCancelsNothing() {
        forEachSpellingWithAFreshFooReceiver { spelling, backend, receiver in
            let context = urlSessionExample(FakeURLSession(backend: backend), receiver, spelling)
            let task = backend.task("data \(Self.fooURL.absoluteString)", (data: Data, response: String).self)
            task.succeed((Data(#"{"id": 7}"#.utf8), "200"))
            XCTAssertTrue(eventually(seconds: 10) { !receiver.foos.all.isEmpty || !receiver.errors.all.isEmpty })
            XCTAssertEqual(receiver.foos.all, [Foo(id: 7)])
            XCTAssertTrue(receiver.errors.all.isEmpty)
            context.cancel()  // settled: nothing left to cancel
            XCTAssertEqual(task.cancelCount.value, 0)
        }
    }

    func testURLSessionExampleContextCancelCancelsTheDataTask() {
        forEachSpellingWithAFreshFooReceiver { spelling, backend, receiver in
            let context = urlSessionExample(FakeURLSession(backend: backend), receiver, spelling)
            context.cancel()
            let task = backend.task("data \(Self.fooURL.absoluteString)", (data: Data, response: String).self)
            XCTAssertEqual(task.cancelCount.value, 1)
            drainMainQueue()
            XCTAssertTrue(receiver.foos.all.isEmpty)
            XCTAssertTrue(receiver.errors.all.isEmpty)
        }
    }
}
