import CancellablePromiseKit
import Foundation
import XCTest

// What cancelling promises promises: no step body runs after cancel, cancel is thread-safe, the
// primitives are cancellable, new cancellable promises are simple to make, branches are
// cancelled; then the finer rules: the order inside cancel(), isCancelled, observers vs steps,
// asPromise, re-entrant cancel, bad input.

struct CustomCancel: Error, Equatable {}

final class CancellationSemanticsTests: XCTestCase {
    // MARK: No step body runs after cancel

    func testNoStepBodyRunsAfterCancelOnAnyQueue() {
        for queue in [nil, DispatchQueue.global(), DispatchQueue.main] as [DispatchQueue?] {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let ran = Recorder<String>()
            @Sendable func note(_ s: String) { ran.append(s) }
            let tail = head.then(on: queue) { v -> CancellablePromise<Int> in
                note("then"); return .value(v)
            }
            .map(on: queue) { v -> Int in
                note("map"); return v
            }
            .compactMap(on: queue) { v -> Int? in
                note("compactMap"); return v
            }
            .get(on: queue) { _ in note("get") }
            .recover(on: queue, policy: .allErrors) { _ -> CancellablePromise<Int> in
                note("recover"); return .value(0)
            }
            .done(on: queue) { _ in note("done") }
            let ensured = Handshake()
            tail.ensure(on: queue) { ensured.signal() }.cauterize()
            tail.cancel()
            resolver.fulfill(1)
            XCTAssertTrue(ensured.wait(seconds: 10))
            drainMainQueue()
            XCTAssertEqual(ran.all, [], "queue \(String(describing: queue))")
            XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
        }
    }

    func testStepAddedToAnAlreadyCancelledChainDoesNotRun() {
        let settled = CancellablePromise.value(1)
        settled.cancel()
        let ran = Flag()
        let step = settled.map(on: nil) { v -> Int in
            ran.raise()
            return v
        }
        XCTAssertFalse(ran.value)
        XCTAssertEqual(step.error as? CancellablePromiseError, .cancelled)
        let recovered = Flag()
        let (pending, _) = CancellablePromise<Int>.pending()
        pending.cancel()
        let recover = pending.recover(on: nil, policy: .allErrors) { _ -> Promise<Int> in
            recovered.raise()
            return .value(0)
        }
        XCTAssertFalse(recovered.value)
        XCTAssertTrue(recover.isRejected)
    }

    func testRunningBodyCompletesButItsResultIsDiscarded() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let bodyFinished = Flag()
        let tailBox = SendableBox<CancellablePromise<Int>?>(nil)
        let tail = head.map(on: nil) { v -> Int in
            tailBox.value!.cancel()  // cancelled while the body runs (as from another thread)
            bodyFinished.raise()
            return v + 1
        }
        tailBox.value = tail
        resolver.fulfill(1)
        XCTAssertTrue(bodyFinished.value)
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
    }

    // MARK: cancel() is thread-safe, from any thread

    func testCancelFromAnotherThreadRejectsBeforeReturning() {
        let task = FakeTask<Int>()
        let chain = UncheckedBox(task.promise.cancellize().map(on: nil) { $0 })
        runWithoutDeadlock {
            chain.value.cancel()
            XCTAssertTrue(chain.value.isRejected)  // before cancel() returned
        }
        XCTAssertTrue(task.isCancelled)
    }

    // MARK: after, firstly, when, race are cancellable

    func testPrimitivesAreCancellable() {
        let scheduler = TestScheduler()
        let timer = after(seconds: 30, scheduler: scheduler).cancellize()
        let first = firstly { timer }
        let both = when(fulfilled: [first, after(seconds: 30, scheduler: scheduler).cancellize()], autoCancel: true)
        let raced = race([both.asVoid(), after(seconds: 30, scheduler: scheduler).cancellize()], autoCancel: true)
        raced.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0, "every timer was unscheduled")
        XCTAssertTrue(raced.isRejected)
        XCTAssertTrue(both.isRejected)
        XCTAssertTrue(timer.isRejected)
        XCTAssertTrue(first.isCancelled)
    }

    // MARK: New cancellable promises are simple to make

    func testNewCancellablePromiseFromResolverAndCancelFunction() {
        let scheduler = TestScheduler()
        let promise = CancellablePromise<Void> { resolver in
            let timer = scheduler.schedule(after: 30) { resolver.fulfill(()) }
            return { timer.cancel() }
        }
        XCTAssertEqual(scheduler.pendingCount, 1)
        promise.cancel()
        XCTAssertEqual(scheduler.pendingCount, 0, "the timer was cancelled")
        scheduler.advance(by: 30)
        XCTAssertTrue(promise.isRejected)
    }

    func testResolverBodyThrowingRejectsAndHasNothingToCancel() {
        let promise = CancellablePromise<Int> { _ in throw CustomCancel() }
        XCTAssertEqual(promise.error as? CustomCancel, CustomCancel())
        promise.cancel()
        XCTAssertEqual(promise.error as? CustomCancel, CustomCancel())
    }

    // MARK: Every branch of a chain is cancelled (updateWeather)

    /// Its state behind locks: the chain's bodies run on the main queue, the test reads it.
    final class WeatherScreen: Sendable {
        let backend: FakeBackend
        let refreshButton = RefreshButton()
        private let shownForecasts = Recorder<WeatherInfo>()
        private let shownAlerts = Recorder<Error>()
        private let onUpdateUI = SendableBox<(@Sendable () -> Void)?>(nil)
        var shown: [WeatherInfo] { shownForecasts.all }
        var alerts: [Error] { shownAlerts.all }
        var updateUIStarted: (@Sendable () -> Void)? {
            get { onUpdateUI.value }
            set { onUpdateUI.value = newValue }
        }
        init(backend: FakeBackend) { self.backend = backend }

        func updateUI(forecast: WeatherInfo) {
            updateUIStarted?()
            shownForecasts.append(forecast)
        }
        func showAlert(error: Error) { shownAlerts.append(error) }
        func format(_ response: WeatherResponse) -> WeatherInfo { WeatherInfo(text: "\(response.temperature)°") }

        func getForecast(forCity name: String) -> CancellablePromise<WeatherInfo> {
            let httpClient = FakeHTTPClient(backend: backend)
            return firstly {
                httpClient.request("https://autocomplete.weather.com/\(name)")
                    .responseDecodable(AutoCompleteCity.self)
            }.cancellize().then { city in
                httpClient.request("https://forecast.weather.com/\(city.name)")
                    .responseDecodable(WeatherResponse.self).cancellize()
            }.map { response in
                self.format(response)
            }
        }

        func updateWeather(forCity searchName: String) -> CancelContext {
            refreshButton.startAnimating()
            let context = firstly {
                getForecast(forCity: searchName)
            }.cancellize().done { response in
                self.updateUI(forecast: response)
            }.ensure {
                self.refreshButton.stopAnimating()
            }.catch { error in
                // Cancellation errors are ignored by default
                self.showAlert(error: error)
            }.cancelContext
            return context
        }
    }

    func testBranchesCancelEverythingExceptEnsure() {
        let backend = FakeBackend()
        let screen = WeatherScreen(backend: backend)
        let context = screen.updateWeather(forCity: "Oslo")
        backend.task("https://autocomplete.weather.com/Oslo", AutoCompleteCity.self).succeed(
            AutoCompleteCity(name: "oslo"))
        XCTAssertTrue(eventually(seconds: 10) { backend.wasStarted("https://forecast.weather.com/oslo") })
        context.cancel()
        XCTAssertTrue(backend.task("https://forecast.weather.com/oslo", WeatherResponse.self).isCancelled)
        XCTAssertTrue(eventually(seconds: 10) { screen.refreshButton.stopCount == 1 })
        drainMainQueue()
        XCTAssertTrue(screen.shown.isEmpty)
        XCTAssertTrue(screen.alerts.isEmpty)  // cancellation ignored by the default policy
        XCTAssertFalse(screen.refreshButton.isAnimating)
    }

    func testBranchesCancelDuringAutocompleteCancelsIt() {
        let backend = FakeBackend()
        let screen = WeatherScreen(backend: backend)
        let context = screen.updateWeather(forCity: "Rome")
        context.cancel()
        XCTAssertTrue(backend.task("https://autocomplete.weather.com/Rome", AutoCompleteCity.self).isCancelled)
        XCTAssertTrue(eventually(seconds: 10) { screen.refreshButton.stopCount == 1 })
        XCTAssertFalse(backend.wasStarted("https://forecast.weather.com/rome"))
    }

    func testBranchesCancelDuringUpdateUILetsItCompleteAndDiscardsTheResult() {
        let backend = FakeBackend()
        let screen = WeatherScreen(backend: backend)
        let contextBox = SendableBox<CancelContext?>(nil)
        screen.updateUIStarted = { contextBox.value!.cancel() }
        let context = screen.updateWeather(forCity: "Nice")
        contextBox.value = context
        backend.task("https://autocomplete.weather.com/Nice", AutoCompleteCity.self).succeed(
            AutoCompleteCity(name: "nice"))
        XCTAssertTrue(eventually(seconds: 10) { backend.wasStarted("https://forecast.weather.com/nice") })
        backend.task("https://forecast.weather.com/nice", WeatherResponse.self).succeed(
            WeatherResponse(temperature: 20))
        XCTAssertTrue(eventually(seconds: 10) { screen.refreshButton.stopCount == 1 })
        XCTAssertEqual(screen.shown, [WeatherInfo(text: "20°")])  // completed normally
        XCTAssertTrue(context.isCancelled)
        XCTAssertEqual(screen.refreshButton.stopCount, 1)
    }

    func testBranchesCompleteWithoutCancel() {
        let backend = FakeBackend()
        let screen = WeatherScreen(backend: backend)
        _ = screen.updateWeather(forCity: "Bern")
        backend.task("https://autocomplete.weather.com/Bern", AutoCompleteCity.self).succeed(
            AutoCompleteCity(name: "bern"))
        XCTAssertTrue(eventually(seconds: 10) { backend.wasStarted("https://forecast.weather.com/bern") })
        backend.task("https://forecast.weather.com/bern", WeatherResponse.self).succeed(WeatherResponse(temperature: 3))
        XCTAssertTrue(eventually(seconds: 10) { screen.refreshButton.stopCount == 1 })
        XCTAssertEqual(screen.shown, [WeatherInfo(text: "3°")])
    }

    func testBranchesOfOneChainAreCancelledTogether() {
        let (head, _) = CancellablePromise<Int>.pending()
        let left = head.map(on: nil) { $0 + 1 }
        let right = head.map(on: nil) { $0 + 2 }.done(on: nil) { _ in }
        left.cancel()
        XCTAssertTrue(right.isRejected)
        XCTAssertTrue(head.isRejected)
    }

    // MARK: Inside cancel(): the promises reject first, then the cancel closures run

    func testCancelClosureRunsAfterThePromisesAreRejected() {
        let stateSeenByCancel = SendableBox<Bool?>(nil)
        let promiseBox = SendableBox<CancellablePromise<Int>?>(nil)
        let promise = CancellablePromise<Int> { _ in
            { stateSeenByCancel.value = promiseBox.value?.isRejected }
        }
        promiseBox.value = promise
        let tail = promise.map(on: nil) { $0 }
        tail.cancel()
        XCTAssertEqual(stateSeenByCancel.value, true)
    }

    // MARK: isCancelled is true once cancel was requested; a cancel closure runs at most once

    func testIsCancelledIsTrueOnceRequestedEvenAfterSettling() {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        XCTAssertFalse(promise.isCancelled)
        XCTAssertFalse(promise.cancelAttempted)
        resolver.fulfill(1)
        promise.cancel()
        XCTAssertTrue(promise.isCancelled)
        XCTAssertTrue(promise.cancelAttempted)
        XCTAssertEqual(promise.value, 1)  // cancel after settle changes nothing
    }

    func testSettledLinksCancelClosureIsNotCalled() {
        let (promise, resolver, cancels) = pendingPromiseCountingCancels()
        let tail = promise.then(on: nil) { _ in CancellablePromise<Int>.pending().promise }
        resolver.fulfill(1)
        tail.cancel()
        XCTAssertEqual(cancels.value, 0)
        XCTAssertTrue(tail.isRejected)
    }

    func testCancelTwiceCallsTheCancelClosureOnceAndKeepsTheFirstError() {
        let calls = Counter()
        let promise = CancellablePromise<Int> { _ in { calls.increment() } }
        promise.cancel(with: CustomCancel())
        promise.cancel()
        promise.cancelContext.cancel()
        XCTAssertEqual(calls.value, 1)
        XCTAssertEqual(promise.error as? CustomCancel, CustomCancel())
        XCTAssertEqual(promise.cancelledError as? CustomCancel, CustomCancel())
    }

    func testCancelWithCustomErrorRejectsTheWholeChainWithIt() {
        let (head, _) = CancellablePromise<Int>.pending()
        let tail = head.map(on: nil) { $0 }
        let caught = SendableBox<Error?>(nil)
        let defaultCaught = SendableBox<Error?>(nil)
        tail.catch(on: nil) { defaultCaught.value = $0 }
        tail.catch(on: nil, policy: .allErrors) { caught.value = $0 }
        head.cancel(with: CustomCancel())
        XCTAssertEqual(tail.error as? CustomCancel, CustomCancel())
        XCTAssertEqual(caught.value as? CustomCancel, CustomCancel())
        XCTAssertEqual(defaultCaught.value as? CustomCancel, CustomCancel())  // not a cancellation error
    }

    // MARK: Observers run with the cancellation, steps (recover included) do not

    func testRecoverNeverRunsForTheChainsOwnCancellation() {
        let (head, _) = CancellablePromise<Int>.pending()
        let recovered = Counter()
        let recoveredAll = head.recover(on: nil, policy: .allErrors) { _ -> Promise<Int> in
            recovered.increment()
            return .value(0)
        }
        let recoveredGuarantee = head.recover(on: nil) { _ -> Guarantee<Int> in
            recovered.increment()
            return .value(0)
        }
        let void = head.asVoid().recover(on: nil) { _ in recovered.increment() }
        head.cancel()
        XCTAssertEqual(recovered.value, 0)
        XCTAssertEqual(recoveredAll.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(recoveredGuarantee.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(void.isRejected)
    }

    func testRecoverRunsForOtherErrors() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let recovered = head.recover(on: nil) { _ in CancellablePromise.value(9) }
        resolver.reject(CustomCancel())
        XCTAssertEqual(recovered.value, 9)
    }

    func testRecoverReturningCancellablePromiseJoinsTheChain() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let task = FakeTask<Int>()
        let recovered = head.recover(on: nil) { _ in task.promise.cancellize() }
        resolver.reject(CustomCancel())
        recovered.cancel()
        XCTAssertTrue(task.isCancelled)
    }

    func testPlainPromiseRecoverAllErrorsBehavesAsPromiseKit() {
        let promise = Promise<Int>(error: CancellablePromiseError.cancelled)
        let recovered = promise.recover(on: nil, policy: .allErrors) { _ in Promise.value(1) }
        XCTAssertEqual(recovered.value, 1)
    }

    func testObserversRunWithTheCancellation() {
        let (head, _) = CancellablePromise<Int>.pending()
        let seen = Recorder<String>()
        head.tap(on: nil) { if case .rejected(let e) = $0, e.isCancelled { seen.append("tap") } }.cauterize()
        head.ensure(on: nil) { seen.append("ensure") }.cauterize()
        head.ensureThen(on: nil) {
            seen.append("ensureThen"); return Guarantee()
        }.cauterize()
        head.ensureThen(on: nil) { () -> CancellablePromise<Void> in
            seen.append("ensureThen cp"); return CancellablePromise()
        }
        .cauterize()
        head.catch(on: nil, policy: .allErrors) { if $0.isCancelled { seen.append("catch") } }
            .finally(on: nil) { seen.append("finally") }
        head.catch(on: nil) { _ in seen.append("default catch") }
        head.cancel()
        XCTAssertEqual(seen.all, ["tap", "ensure", "ensureThen", "ensureThen cp", "catch", "finally"])
    }

    // MARK: asPromise and init(using:cancel:) settle as the cancellable promise

    func testAsPromiseSettlesAsTheCancellablePromise() {
        let (plain, resolver) = Promise<Int>.pending()
        let cancellable = CancellablePromise(using: plain, cancel: { resolver.reject(CustomCancel()) })
        let asPromise = cancellable.asPromise()
        XCTAssertTrue(asPromise === cancellable.promise)
        cancellable.cancel()
        XCTAssertEqual(asPromise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(plain.error as? CustomCancel, CustomCancel())
    }

    func testPlainChainFromAsPromiseIsNotCancellable() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let plainTail = head.asPromise().map(on: nil) { $0 + 1 }
        resolver.fulfill(1)
        head.cancel()
        XCTAssertEqual(plainTail.value, 2)
    }

    // MARK: CancellableFinalizer

    func testFinalizerCancelAndFinally() {
        let (head, _) = CancellablePromise<Int>.pending()
        let finalizer = head.catch(on: nil, policy: .allErrors) { _ in }
        XCTAssertTrue(finalizer.cancelContext === head.cancelContext)
        XCTAssertFalse(finalizer.isCancelled)
        let finallyRan = Flag()
        let context = finalizer.finally(on: nil) { finallyRan.raise() }
        XCTAssertTrue(context === head.cancelContext)
        finalizer.cancel()
        XCTAssertTrue(finalizer.isCancelled)
        XCTAssertTrue(finalizer.cancelAttempted)
        XCTAssertTrue(finallyRan.value)
        XCTAssertTrue(head.isRejected)
    }

    func testFinalizerCancelWithError() {
        let (head, _) = CancellablePromise<Int>.pending()
        let caught = SendableBox<Error?>(nil)
        let finalizer = head.catch(on: nil, policy: .allErrors) { caught.value = $0 }
        finalizer.cancel(with: CustomCancel())
        XCTAssertEqual(caught.value as? CustomCancel, CustomCancel())
    }

    // MARK: Re-entrant cancel (no deadlock)

    func testCancelFromInsideHandlersDoesNotDeadlock() {
        runWithoutDeadlock {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let chainBox = SendableBox<CancellablePromise<Void>?>(nil)
            let mid = head.then(on: nil) { v -> CancellablePromise<Int> in
                chainBox.value!.cancel()
                return .value(v)
            }
            let chain = mid.done(on: nil) { _ in XCTFail("done after cancel") }
            chainBox.value = chain
            resolver.fulfill(1)
            XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
        }
        runWithoutDeadlock {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let tailBox = SendableBox<CancellablePromise<Int>?>(nil)
            let tail = head.done(on: nil) { _ in tailBox.value!.cancel() }.map(on: nil) { 1 }
            tailBox.value = tail
            resolver.fulfill(1)
            XCTAssertTrue(tail.isRejected)
        }
        runWithoutDeadlock {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let tailBox = SendableBox<CancellablePromise<Int>?>(nil)
            let tail = head.ensure(on: nil) { tailBox.value!.cancel() }.map(on: nil) { $0 }
            tailBox.value = tail
            resolver.fulfill(1)
            XCTAssertTrue(tail.isRejected)
        }
        runWithoutDeadlock {
            let (head, resolver) = CancellablePromise<Int>.pending()
            let finalizerBox = SendableBox<CancellableFinalizer?>(nil)
            let finalizer = head.catch(on: nil, policy: .allErrors) { _ in finalizerBox.value!.cancel() }
            finalizerBox.value = finalizer
            resolver.reject(CustomCancel())
            XCTAssertTrue(finalizer.isCancelled)
        }
        runWithoutDeadlock {
            let (head, _) = CancellablePromise<Int>.pending()
            head.catch(on: nil, policy: .allErrors) { _ in head.cancel() }
            head.cancel()
            XCTAssertTrue(head.isRejected)
        }
    }

    func testCancelFromInsideACancelClosureDoesNotDeadlock() {
        runWithoutDeadlock {
            let calls = Counter()
            let promiseBox = SendableBox<CancellablePromise<Int>?>(nil)
            let promise = CancellablePromise<Int> { _ in
                {
                    calls.increment()
                    promiseBox.value!.cancel()
                    promiseBox.value!.cancelContext.cancel(with: CustomCancel())
                }
            }
            promiseBox.value = promise
            let other = promise.map(on: nil) { $0 }
            promise.cancel()
            XCTAssertEqual(calls.value, 1)
            XCTAssertEqual(other.error as? CancellablePromiseError, .cancelled)
        }
        runWithoutDeadlock {
            // A cancel closure cancelling another chain that cancels back.
            let aBox = SendableBox<CancellablePromise<Int>?>(nil)
            let bBox = SendableBox<CancellablePromise<Int>?>(nil)
            let a = CancellablePromise<Int> { _ in { bBox.value!.cancel() } }
            let b = CancellablePromise<Int> { _ in { aBox.value!.cancel() } }
            aBox.value = a
            bBox.value = b
            a.cancel()
            XCTAssertTrue(a.isRejected && b.isRejected)
        }
    }

    // MARK: Bad input

    func testCancelAfterSettleIsANoOp() {
        let (promise, resolver, cancels) = pendingPromiseCountingCancels()
        resolver.reject(CustomCancel())
        promise.cancel()
        promise.cancel()
        XCTAssertEqual(cancels.value, 0)
        XCTAssertEqual(promise.error as? CustomCancel, CustomCancel())
    }

    func testThenReturningItsOwnPromiseRejects() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let tailBox = SendableBox<CancellablePromise<Int>?>(nil)
        let tail = head.then(on: nil) { _ in tailBox.value! }
        tailBox.value = tail
        resolver.fulfill(1)
        guard case .returnedSelf? = tail.error as? PMKError else {
            return XCTFail("\(String(describing: tail.error))")
        }
    }

    func testThrowingHandlerRejectsTheChainAndLaterCancelIsANoOp() {
        let (head, resolver) = CancellablePromise<Int>.pending()
        let later = Flag()
        let tail = head.map(on: nil) { _ -> Int in throw CustomCancel() }.done(on: nil) { _ in later.raise() }
        resolver.fulfill(1)
        XCTAssertEqual(tail.error as? CustomCancel, CustomCancel())
        XCTAssertFalse(later.value)
        tail.cancel()
        XCTAssertEqual(tail.error as? CustomCancel, CustomCancel())
    }

    func testHundredThousandMemberContextCancelsWithoutRecursion() {
        let context = CancelContext()
        let calls = Counter()
        var members: [CancellablePromise<Int>] = []
        members.reserveCapacity(100_000)
        for _ in 0..<100_000 {
            members.append(Promise<Int>.pending().promise.cancellize(cancelContext: context))
        }
        let counted = CancellablePromise<Int> { _ in { calls.increment() } }
        context.join(counted)
        context.cancel()
        XCTAssertTrue(members.allSatisfy { $0.isRejected })
        XCTAssertEqual(calls.value, 1)
    }

    func testHundredThousandLinkChainCancelledAtTheHeadRejectsTheTail() {
        let (head, _) = CancellablePromise<Int>.pending()
        var tail = head
        for _ in 0..<100_000 { tail = tail.then(on: nil) { CancellablePromise.value($0) } }
        head.cancel()
        XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
    }
}

extension CancelContext {
    /// Test helper: joins `promise`'s chain into this context, as `cancellize(cancelContext:)`.
    fileprivate func join<T>(_ promise: CancellablePromise<T>) {
        _ = promise.cancellize(cancelContext: self)
    }
}
