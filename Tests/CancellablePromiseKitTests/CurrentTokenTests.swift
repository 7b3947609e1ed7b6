import Dispatch
import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// `CancellationToken.current` (DESIGN detail 25) through the public API: which token each body
// sees, when it is cancelled and when it completes on its own. Bodies run with `on: nil` where
// the test cancels from inside them, so every step of the rule happens on the test's thread.

final class CurrentTokenTests: XCTestCase {
    /// A `then` step on `root` whose body keeps the token it sees (`CancellationToken.current`)
    /// and returns `returned`: the step, and that token once the body ran.
    private func thenKeepingItsToken(
        on root: CancellablePromise<Int>, returning returned: Promise<Int>
    ) -> (step: CancellablePromise<Int>, token: SendableBox<CancellationToken?>) {
        let token = SendableBox<CancellationToken?>(nil)
        let step = root.then(on: nil) { _ -> Promise<Int> in
            token.value = CancellationToken.current
            return returned
        }
        return (step, token)
    }

    /// Outside every body, on the test's thread and on a queue: `none`.
    func testOutsideAnyBodyItIsNone() {
        XCTAssertTrue(CancellationToken.current === CancellationToken.none)
        let seen = SendableBox<CancellationToken?>(nil)
        let done = Handshake()
        DispatchQueue.global().async {
            seen.value = CancellationToken.current
            done.signal()
        }
        XCTAssertTrue(done.wait())
        XCTAssertTrue(seen.value === CancellationToken.none)
    }

    /// A plain promise's bodies see `none`, synchronously or on a queue.
    func testAPlainPromiseBodySeesNone() {
        let synchronous = SendableBox<CancellationToken?>(nil)
        _ = Promise.value(1).map(on: nil) { value -> Int in
            synchronous.value = CancellationToken.current
            return value
        }
        XCTAssertTrue(synchronous.value === CancellationToken.none)
        let onQueue = Promise.value(1).map(on: .global()) { _ in CancellationToken.current }
        XCTAssertTrue(waitForValue(onQueue) === CancellationToken.none)
    }

    /// A `map` body's token: pending while the body runs, cancelled when the chain is cancelled
    /// then, its `onCancel` handler run synchronously before `cancel()` returns.
    func testAMapBodysTokenIsCancelledWithTheChainBeforeCancelReturns() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let chainBox = SendableBox<CancellablePromise<Int>?>(nil)
        let events = Recorder<String>()
        let chain = root.map(on: nil) { value -> Int in
            let token = CancellationToken.current
            XCTAssertFalse(token.isCompleted, "pending while the body runs")
            XCTAssertTrue(CancellationToken.current === token, "the same token on every read")
            token.onCancel { events.append("onCancel") }
            chainBox.value!.cancel()
            events.append("cancel returned")
            XCTAssertTrue(token.isCancelled)
            XCTAssertTrue(CancellationToken.current.isCancelled, "read again: cancelled")
            XCTAssertThrowsError(try CancellationToken.current.checkCancellation())
            return value
        }
        chainBox.value = chain
        resolver.fulfill(1)
        XCTAssertEqual(events.all, ["onCancel", "cancel returned"])
        XCTAssertTrue(waitForError(chain)?.isCancelled == true, "the body's result is discarded")
    }

    /// Once the step settled on its own, its token completes "not cancelled" and releases its
    /// handlers; a later cancel of the chain does not reach it.
    func testATokenCompletesNotCancelledOnceItsStepSettled() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let token = SendableBox<CancellationToken?>(nil)
        let cancelled = Flag()
        let chain = root.map(on: nil) { value -> Int in
            token.value = CancellationToken.current
            token.value!.onCancel { cancelled.raise() }
            return value + 1
        }
        let next = chain.then(on: nil) { _ in CancellablePromise<Int>.pending().promise }
        resolver.fulfill(1)
        XCTAssertEqual(waitForValue(chain), 2)
        XCTAssertEqual(token.value?.isCompleted, true)
        XCTAssertEqual(token.value?.isCancelled, false)
        XCTAssertEqual(token.value?.pendingHandlerCount, 0, "its handlers are released")
        next.cancel()
        XCTAssertFalse(cancelled.value)
        XCTAssertEqual(token.value?.isCancelled, false)
    }

    /// A `then` step's token stays pending while the step waits on the promise its body
    /// returned, and is cancelled with the chain then.
    func testAThenBodysTokenCoversTheWaitOnWhatItReturned() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let (inner, innerResolver) = Promise<Int>.pending()
        let (chain, token) = thenKeepingItsToken(on: root, returning: inner)
        resolver.fulfill(1)
        XCTAssertEqual(token.value?.isCompleted, false, "the step waits on its returned promise")
        chain.cancel()
        XCTAssertEqual(token.value?.isCancelled, true)
        innerResolver.fulfill(2)
    }

    /// A token-taking API started in a `then` body with `.current` is cancelled with the chain.
    func testHandingTheTokenToATokenTakingAPICancelsItsWork() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let workCancelled = Flag()
        @Sendable func work(cancellationToken: CancellationToken) -> Promise<Int> {
            let (promise, workResolver) = Promise<Int>.pending()
            cancellationToken.onCancel {
                workCancelled.raise()
                workResolver.reject(CancellablePromiseError.cancelled)
            }
            return promise
        }
        let chain = root.then(on: nil) { _ in work(cancellationToken: .current) }
        resolver.fulfill(1)
        chain.cancel()
        XCTAssertTrue(workCancelled.value)
    }

    /// The body of `CancellablePromise(resolver:)` sees the promise's token: cancelled when the
    /// promise is cancelled while pending; completed "not cancelled" if the body settled it.
    func testAnInitialisersBodySeesThePromisesToken() {
        var token: CancellationToken?
        let promise = CancellablePromise<Int> { _ in
            token = CancellationToken.current
            XCTAssertFalse(token!.isCompleted)
            return {}
        }
        XCTAssertEqual(token?.isCompleted, false)
        promise.cancel()
        XCTAssertEqual(token?.isCancelled, true)

        var settledToken: CancellationToken?
        let settled = CancellablePromise<Int> { resolver in
            settledToken = CancellationToken.current
            resolver.fulfill(1)
            return {}
        }
        XCTAssertEqual(settledToken?.isCompleted, true)
        XCTAssertEqual(settledToken?.isCancelled, false)
        settled.cancel()
        XCTAssertEqual(settledToken?.isCancelled, false)

        var taskToken: CancellationToken?
        let withTask = CancellablePromise<Int>(cancellable: nil) { _ in taskToken = CancellationToken.current }
        withTask.cancel()
        XCTAssertEqual(taskToken?.isCancelled, true, "init(cancellable:resolver:) too")
    }

    /// Observer bodies (`ensure`, `tap`) see their step's token; once the chain was cancelled,
    /// a token already cancelled.
    func testObserverBodiesSeeTheirTokenCancelledAfterACancel() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let seen = Recorder<Bool>()
        let chain = root.tap(on: nil) { _ in seen.append(CancellationToken.current.isCancelled) }
            .ensure(on: nil) { seen.append(CancellationToken.current.isCancelled) }
        resolver.fulfill(1)
        XCTAssertEqual(seen.all, [false, false])
        XCTAssertNotNil(waitForValue(chain))

        let (cancelledRoot, cancelledResolver) = CancellablePromise<Int>.pending()
        let afterCancel = Recorder<Bool>()
        let cancelledChain = cancelledRoot.ensure(on: nil) { afterCancel.append(CancellationToken.current.isCancelled) }
        cancelledChain.cancel()
        XCTAssertEqual(afterCancel.all, [true])
        cancelledResolver.fulfill(1)
    }

    /// `catch` and `finally` bodies are operator bodies of the chain too (DESIGN detail 25: every
    /// operator body): run after a cancel, they see a token already cancelled, as `ensure` and
    /// `tap` do, not `none`.
    func testCatchAndFinallyBodiesSeeTheirTokenCancelledAfterACancel() {
        let (root, _) = CancellablePromise<Int>.pending()
        let seen = Recorder<String>()
        @Sendable func record(_ token: CancellationToken) {
            seen.append(token === CancellationToken.none ? "none" : token.isCancelled ? "cancelled" : "not cancelled")
        }
        root.catch(on: nil, policy: .allErrors) { _ in record(CancellationToken.current) }
            .finally(on: nil) { record(CancellationToken.current) }
        root.cancel()
        XCTAssertEqual(seen.all, ["cancelled", "cancelled"])
    }

    /// Nested bodies: a cancellable body that runs another chain's body synchronously sees the
    /// inner step's token there and its own again afterwards; a plain promise's body run
    /// synchronously inside it is part of it.
    func testNestedBodiesSeeTheInnermostTokenAndTheOuterOneAgainAfterwards() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let outer = SendableBox<CancellationToken?>(nil)
        let inner = SendableBox<CancellationToken?>(nil)
        let plain = SendableBox<CancellationToken?>(nil)
        let outerAfter = SendableBox<CancellationToken?>(nil)
        let chain = root.map(on: nil) { value -> Int in
            outer.value = CancellationToken.current
            _ = CancellablePromise.value(1).map(on: nil) { _ in inner.value = CancellationToken.current }
            _ = Promise.value(1).map(on: nil) { _ in plain.value = CancellationToken.current }
            outerAfter.value = CancellationToken.current
            return value
        }
        resolver.fulfill(1)
        XCTAssertNotNil(waitForValue(chain))
        XCTAssertNotNil(outer.value)
        XCTAssertFalse(inner.value === outer.value, "the inner step's own token")
        XCTAssertFalse(inner.value === CancellationToken.none)
        XCTAssertTrue(plain.value === outer.value, "a plain body run inside is part of the outer body")
        XCTAssertTrue(outerAfter.value === outer.value, "the outer token again afterwards")
        XCTAssertTrue(CancellationToken.current === CancellationToken.none, "nothing left marked")
    }

    /// A body of an abandoned chain (no `CancellablePromise` left) reads a token that is never
    /// cancelled; one it read before completes "not cancelled".
    func testAnAbandonedChainsBodySeesATokenThatNeverIsCancelled() {
        let (root, resolver) = Promise<Int>.pending()
        let started = Handshake()
        let release = Handshake()
        let tokens = SendableBox<[CancellationToken]>([])
        let finished = Handshake()
        _ = root.cancellize().map(on: .global()) { value -> Int in
            tokens.value.append(CancellationToken.current)
            started.signal()
            _ = release.wait()
            tokens.value.append(CancellationToken.current)
            finished.signal()
            return value
        }
        resolver.fulfill(1)
        XCTAssertTrue(started.wait())
        release.signal()
        XCTAssertTrue(finished.wait())
        XCTAssertEqual(tokens.value.count, 2)
        XCTAssertTrue(eventually { tokens.value[0].isCompleted })
        XCTAssertFalse(tokens.value[0].isCancelled)
        XCTAssertFalse(tokens.value[1].isCancelled)
    }

    /// A loser of `race(autoCancel:)` in the winner's chain has its own token cancelled; the
    /// winner's chain goes on.
    func testALoserCancelledAloneSeesItsTokenCancelled() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let (slow, slowResolver) = Promise<Int>.pending()
        let (loser, loserToken) = thenKeepingItsToken(on: root, returning: slow)
        let winner = root.map(on: nil) { $0 + 1 }
        let raced = race([loser, winner], autoCancel: true)
        resolver.fulfill(1)
        XCTAssertEqual(waitForValue(raced), 2)
        XCTAssertEqual(loserToken.value?.isCancelled, true)
        XCTAssertFalse(root.isCancelled, "the winner's chain is not cancelled")
        slowResolver.fulfill(0)
    }

    /// The body of `CancellablePromise { () async … }` runs in a task: `current` is `none`
    /// there, and `Task.isCancelled` tells the cancel.
    func testAnAsyncBodySeesNoneAndItsTaskIsCancelled() async {
        let started = Handshake()
        let seen = SendableBox<(CancellationToken?, Bool)>((nil, false))
        let promise = CancellablePromise<Int> { () async throws -> Int in
            let token = CancellationToken.current
            started.signal()
            do { try await untilCancelled() } catch {}
            seen.value = (token, Task.isCancelled)
            return 0
        }
        _ = await started.arrival()
        promise.cancel()
        _ = await untilHolds { seen.value.1 }
        XCTAssertTrue(seen.value.0 === CancellationToken.none)
        XCTAssertTrue(seen.value.1)
    }
}

extension CurrentTokenTests {
    /// `catch` and `finally` bodies are members of the chain too: each sees its own token,
    /// cancelled when the chain is cancelled while it is pending.
    func testCatchAndFinallyBodiesSeeTheirOwnTokens() {
        struct Failure: Error {}
        let (root, resolver) = CancellablePromise<Int>.pending()
        let catchToken = SendableBox<CancellationToken?>(nil)
        let finallyToken = SendableBox<CancellationToken?>(nil)
        let finalizerBox = SendableBox<CancellableFinalizer?>(nil)
        let finalizer = root.map(on: nil) { _ -> Int in throw Failure() }
            .catch(on: nil) { _ in
                catchToken.value = CancellationToken.current
                XCTAssertFalse(catchToken.value!.isCompleted, "pending while the catch body runs")
                finalizerBox.value!.cancel()
                XCTAssertTrue(catchToken.value!.isCancelled, "cancelled with the chain while its body runs")
            }
        finalizerBox.value = finalizer
        finalizer.finally(on: nil) { finallyToken.value = CancellationToken.current }
        resolver.fulfill(1)
        XCTAssertEqual(catchToken.value?.isCancelled, true)
        XCTAssertEqual(finallyToken.value?.isCancelled, true, "the chain was cancelled before finally's body ran")

        let laterCatch = SendableBox<CancellationToken?>(nil)
        let laterFinally = SendableBox<CancellationToken?>(nil)
        let (other, otherResolver) = CancellablePromise<Int>.pending()
        other.map(on: nil) { _ -> Int in throw Failure() }
            .catch(on: nil) { _ in laterCatch.value = CancellationToken.current }
            .finally(on: nil) { laterFinally.value = CancellationToken.current }
        otherResolver.fulfill(1)
        XCTAssertEqual(laterCatch.value?.isCancelled, false)
        XCTAssertEqual(laterCatch.value?.isCompleted, true, "completed once the catch step settled")
        XCTAssertEqual(laterFinally.value?.isCancelled, false)
        XCTAssertFalse(laterCatch.value === laterFinally.value)
    }

    /// `catch(policy: .allErrors)` after the chain was cancelled: its body receives the
    /// cancellation and sees a cancelled token.
    func testACatchBodyRunForTheChainsCancellationSeesACancelledToken() {
        let (root, resolver) = CancellablePromise<Int>.pending()
        let seen = SendableBox<CancellationToken?>(nil)
        let finalizer = root.done(on: nil) { _ in }.catch(on: nil, policy: .allErrors) { _ in
            seen.value = CancellationToken.current
        }
        finalizer.cancel()
        XCTAssertEqual(seen.value?.isCancelled, true)
        resolver.fulfill(1)
    }

    /// A loser of `race(autoCancel:)` in the winner's chain, cancelled while its body runs on a
    /// queue, still sees a cancelled token when new members of the chain have taken its freed
    /// slot and read their own tokens before it reads its own.
    func testARaceLosersBodySeesItsCancelAfterItsSlotWasTakenAgain() {
        let (base, seal) = CancellablePromise<Int>.pending()
        let (winnerSource, winnerSeal) = Promise<Int>.pending()
        let started = Handshake()
        let proceed = Handshake()
        let finished = Handshake()
        let sawCancelled = SendableBox<Bool?>(nil)
        let loser = base.map(on: .global()) { value -> Int in
            started.signal()
            proceed.wait()
            sawCancelled.value = CancellationToken.current.isCancelled
            finished.signal()
            return value
        }
        let winner = base.then(on: nil) { _ in winnerSource }
        let raced = race([loser, winner], autoCancel: true)
        seal.fulfill(1)
        XCTAssertTrue(started.wait())
        winnerSeal.fulfill(2)
        XCTAssertTrue(eventually { loser.promise.isRejected }, "the loser is cancelled alone")
        let (newcomersSource, newcomersSeal) = Promise<Int>.pending()
        let newcomerTokens = Recorder<CancellationToken>()
        let newcomers = (0..<4).map { _ in
            base.then(on: nil) { _ -> Promise<Int> in
                newcomerTokens.append(CancellationToken.current)
                return newcomersSource
            }
        }
        XCTAssertEqual(newcomerTokens.all.map(\.isCompleted), [false, false, false, false])
        proceed.signal()
        XCTAssertTrue(finished.wait())
        XCTAssertEqual(sawCancelled.value, true)
        newcomersSeal.fulfill(3)
        withExtendedLifetime((raced, newcomers)) {}
    }
}
