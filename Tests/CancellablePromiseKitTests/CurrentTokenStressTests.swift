import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// `CancellationToken.current` (DESIGN detail 25) under thread races: step bodies run on a
// concurrent queue, read their token and register an `onCancel` handler, while other threads
// release them, settle what they wait on and cancel their chains.
//
// Whether a step was pending when its chain was cancelled is told by the step itself, with no
// race in the test: a step the cancel found pending rejects with the cancellation error, one
// that settled first keeps its own value (the bodies never fail on their own). Every round
// checks the rule against that: the handler ran once if the step was pending at the cancel,
// never otherwise, and the token ended cancelled or completed "not cancelled" accordingly. What
// the threads saw in between is checked too, each from one thread's own order of events: a
// body whose handler was registered before `cancel()` and whose step could not settle until
// after it returned had its handler run before `cancel()` returned; a body that returned after
// `cancel()` had returned, or that read its token cancelled, had its step rejected.

final class CurrentTokenStressTests: XCTestCase {
    /// Steps whose bodies race `cancel()` from other threads: `map` bodies (the step settles when
    /// the body returns) and `then` bodies (the step waits on the promise the body returned,
    /// which another thread fulfils), cancelled at once, while the body runs, once it returned,
    /// or once the step settled; through the step, a step after it or the chain's context.
    func testEachRunningBodysHandlerRunsOnceIffItsStepWasPendingAtTheCancel() {
        let seed = UInt64.random(in: 1...UInt64.max)
        var rng = SeededGenerator(seed: seed)
        var failures: [String] = []
        var tally = CancelRaceRound.Tally()
        for batch in 0..<CancelRaceRound.batches {
            let rounds = (0..<CancelRaceRound.roundsPerBatch).map { _ in CancelRaceRound(using: &rng) }
            CancelRaceRound.race(rounds)
            for (index, round) in rounds.enumerated() {
                tally.add(round)
                if let problem = round.problem() {
                    failures.append("batch \(batch), round \(index) (\(round)): \(problem)")
                }
            }
        }
        XCTAssertEqual(tally.rounds, 10_000)
        XCTAssertTrue(
            failures.isEmpty, "seed \(seed): \(failures.count) rounds broke the rule; first: \(failures.prefix(5))")
        // The races happened: steps cancelled while pending, steps settled first, and cancels that
        // came while the step could not settle.
        print("Current token stress: \(tally)")
        XCTAssertGreaterThan(tally.cancelledWithTokenRead, 100, "seed \(seed): \(tally)")
        XCTAssertGreaterThan(tally.settledWithTokenRead, 100, "seed \(seed): \(tally)")
        XCTAssertGreaterThan(tally.cancelledWhileTheStepCouldNotSettle, 100, "seed \(seed): \(tally)")
    }

    /// A `then` body's step, a loser of `race(autoCancel:)` against a branch of the same chain
    /// that another thread settles, is cancelled alone: its handler runs once if the other branch
    /// won while the step was pending, never if the step won; the chain is never cancelled.
    func testARaceLosersHandlerRunsOnceIffItWasPendingWhenTheOtherBranchWon() {
        let queue = DispatchQueue(label: "current-token-race-bodies", attributes: .concurrent)
        var failures: [String] = []
        var lost = 0
        var won = 0
        for round in 0..<1_000 {
            let (root, rootResolver) = CancellablePromise<Int>.pending()
            let (returned, returnedResolver) = Promise<Int>.pending()
            let (winnerSource, winnerResolver) = Promise<Int>.pending()
            let handlerRuns = Counter()
            let token = SendableBox<CancellationToken?>(nil)
            let returnedIt = Handshake()
            let step = root.then(on: queue) { _ -> Promise<Int> in
                let current = CancellationToken.current
                token.value = current
                current.onCancel { handlerRuns.increment() }
                returnedIt.signal()
                return returned
            }
            let other = root.then(on: nil) { _ in winnerSource }
            let raced = race([step, other], autoCancel: true)
            rootResolver.fulfill(round)
            let answers = UncheckedBox((returnedResolver, winnerResolver))
            runConcurrently([
                {
                    returnedIt.wait()
                    answers.value.0.fulfill(1)
                },
                {
                    returnedIt.wait()
                    answers.value.1.fulfill(2)
                },
            ])
            queue.sync(flags: .barrier) {}  // every body queued so far has returned
            guard let outcome = waitForResult(step.promise) else {
                failures.append("round \(round): the step did not settle")
                continue
            }
            let stepLost = outcome.rejectedError?.isCancelled == true
            if stepLost { lost += 1 } else { won += 1 }
            let problem: String? =
                if stepLost && waitForValue(raced) != 2 {
                    "the step was cancelled, yet the race is \(String(describing: raced.promise.result))"
                } else if handlerRuns.value != (stepLost ? 1 : 0) {
                    "the step is \(outcome), its handler ran \(handlerRuns.value) times"
                } else if token.value?.isCancelled != stepLost || token.value?.isCompleted != true {
                    "the step is \(outcome), its token is \(String(describing: token.value))"
                } else if root.isCancelled {
                    "the chain was cancelled"
                } else {
                    nil
                }
            if let problem { failures.append("round \(round): \(problem)") }
        }
        XCTAssertTrue(failures.isEmpty, "\(failures.count) rounds broke the rule; first: \(failures.prefix(5))")
        XCTAssertGreaterThan(lost, 0, "the other branch sometimes won")
        XCTAssertGreaterThan(won, 0, "the step sometimes won")
    }
}

/// One round of the cancel race: a chain `root → step → next`, the step's body on a concurrent
/// queue, and what the threads saw.
private final class CancelRaceRound: Sendable, CustomStringConvertible {
    static let batches = 125
    static let roundsPerBatch = 80

    /// The queue the bodies run on: a concurrent queue of the global pool, so that a barrier
    /// tells when every body queued so far has returned.
    static let queue = DispatchQueue(label: "current-token-stress-bodies", attributes: .concurrent)

    enum Kind: CaseIterable { case map, then }

    /// When the cancelling thread cancels.
    enum Moment: CaseIterable {
        /// At once: the body may not have started, or not run at all.
        case atOnce
        /// Once the body registered its handler: it is most likely still running.
        case whileTheBodyRuns
        /// Once the body returned: the step settles meanwhile (a `map`), or another thread
        /// fulfils what it returned (a `then`).
        case afterTheBody
        /// Once the step settled on its own: the cancel must not reach the token.
        case afterTheStepSettled
    }

    /// What the round cancels its chain through.
    enum Handle: CaseIterable { case step, next, context }

    let kind: Kind
    let moment: Moment
    let handle: Handle
    let seen: SeenByTheThreads
    private let rootResolver: Resolver<Int>
    private let returnedResolver: Resolver<Int>
    private let step: CancellablePromise<Int>
    private let next: CancellablePromise<Int>

    init(using rng: inout SeededGenerator) {
        kind = rng.element(of: Kind.allCases)!
        moment = rng.element(of: Moment.allCases)!
        handle = rng.element(of: Handle.allCases)!
        // A body cancelled while it runs reads its token until it sees the cancel (or gives up):
        // long enough for the cancelling thread, woken by the handshake, to come while it runs.
        let seen = SeenByTheThreads(spins: rng.int(moment == .whileTheBodyRuns ? 0...20_000 : 0...500))
        self.seen = seen
        let (root, rootResolver) = CancellablePromise<Int>.pending()
        let (returned, returnedResolver) = Promise<Int>.pending()
        self.rootResolver = rootResolver
        self.returnedResolver = returnedResolver
        switch kind {
        case .map:
            step = root.map(on: Self.queue) { value -> Int in
                seen.runBody(settlesWhenItReturns: true)
                return value + 1
            }
        case .then:
            step = root.then(on: Self.queue) { _ -> Promise<Int> in
                seen.runBody(settlesWhenItReturns: false)
                return returned
            }
        }
        next = step.map(on: nil) { $0 }
        step.pipe { result in
            seen.outcome.value = result
            seen.stepSettled.signal()
            seen.bodyOver.signal()  // if the body has not run, it never will
        }
    }

    var description: String { "\(kind), cancelled \(moment) through the \(handle), \(seen.spins) spins" }

    /// Runs a batch of rounds: one thread releases the bodies (fulfils the roots), one fulfils
    /// what the `then` bodies returned, two cancel; then waits until every body has returned.
    static func race(_ rounds: [CancelRaceRound]) {
        let rounds = UncheckedBox(rounds)
        let finished = runConcurrently([
            { for (index, round) in rounds.value.enumerated() { round.rootResolver.fulfill(index) } },
            {
                for round in rounds.value {
                    if round.kind == .then {
                        round.seen.bodyOver.wait()
                        round.seen.mayNowSettle.raise()
                    }
                    round.returnedResolver.fulfill(-1)  // a `map` round's is never used
                }
            },
            { for round in rounds.value.enumerated() where round.offset.isMultiple(of: 2) { round.element.cancel() } },
            { for round in rounds.value.enumerated() where !round.offset.isMultiple(of: 2) { round.element.cancel() } },
        ])
        precondition(finished, "the threads of a batch did not return")
        queue.sync(flags: .barrier) {}  // every body queued so far has returned
        for round in rounds.value { round.seen.stepSettled.wait() }
    }

    /// Cancels the chain at the round's moment, and records what this thread saw around it.
    private func cancel() {
        switch moment {
        case .atOnce: break
        case .whileTheBodyRuns: seen.registered.wait()
        case .afterTheBody: seen.bodyOver.wait()
        case .afterTheStepSettled: seen.stepSettled.wait()
        }
        let registeredBefore = seen.registered.hasArrived
        switch handle {
        case .step: step.cancel()
        case .next: next.cancel()
        case .context: step.cancelContext.cancel()
        }
        let handlerRan = seen.handlerRuns.value > 0
        let mayHaveSettled = seen.mayNowSettle.value
        seen.cancelReturned.raise()
        if registeredBefore && !mayHaveSettled {
            seen.cancelCameWhileTheStepCouldNotSettle.raise()
            if !handlerRan { seen.cancelReturnedBeforeTheHandlerRan.raise() }
        }
    }

    /// What broke the rule in this round, if anything; once the batch is over.
    func problem() -> String? {
        guard let outcome = seen.outcome.value else { return "the step did not settle" }
        let pendingAtTheCancel: Bool
        switch outcome {
        case .fulfilled: pendingAtTheCancel = false
        case .rejected(let error):
            guard error.isCancelled else { return "the step rejected with \(error)" }
            pendingAtTheCancel = true
        }
        let runs = seen.handlerRuns.value
        guard let token = seen.token.value else {
            if moment != .atOnce { return "the body did not run" }
            return runs == 0 ? nil : "no body read a token, yet a handler ran \(runs) times"
        }
        if runs != (pendingAtTheCancel ? 1 : 0) {
            return "the step is \(outcome), yet the handler ran \(runs) times"
        }
        if !token.isCompleted && !eventually(seconds: 2, { token.isCompleted }) {
            return "the step is \(outcome), yet its token never completed"
        }
        if token.isCancelled != pendingAtTheCancel {
            return "the step is \(outcome), yet its token is \(token.isCancelled ? "" : "not ")cancelled"
        }
        if token.pendingHandlerCount != 0 { return "the completed token holds \(token.pendingHandlerCount) handlers" }
        if seen.cancelReturnedBeforeTheHandlerRan.value {
            return "cancel() returned while the step was pending throughout, before the handler ran"
        }
        if seen.bodyReturnedAfterTheCancel.value && !pendingAtTheCancel {
            return "the body returned after cancel() had returned, yet the step is \(outcome)"
        }
        if seen.bodySawItsTokenCancelled.value && !pendingAtTheCancel {
            return "the body read its token cancelled, yet the step is \(outcome)"
        }
        if moment == .afterTheStepSettled && pendingAtTheCancel {
            return "a cancel after the step settled rejected it"
        }
        return nil
    }

    /// How many rounds fell in each case, to check that the races happened.
    struct Tally: CustomStringConvertible {
        var rounds = 0
        var cancelledWithTokenRead = 0
        var settledWithTokenRead = 0
        var cancelledWhileTheStepCouldNotSettle = 0

        mutating func add(_ round: CancelRaceRound) {
            rounds += 1
            guard round.seen.token.value != nil else { return }
            if round.seen.outcome.value?.rejectedError != nil {
                cancelledWithTokenRead += 1
            } else {
                settledWithTokenRead += 1
            }
            if round.seen.cancelCameWhileTheStepCouldNotSettle.value { cancelledWhileTheStepCouldNotSettle += 1 }
        }

        var description: String {
            "\(rounds) rounds: a body read its token and the step was cancelled in \(cancelledWithTokenRead), "
                + "settled first in \(settledWithTokenRead); cancel() came while the step could not settle in "
                + "\(cancelledWhileTheStepCouldNotSettle)"
        }
    }
}

/// What the threads of a round saw, each entry safe from any thread.
private final class SeenByTheThreads: Sendable {
    /// How many times the body reads its token after registering (to keep it running a while).
    let spins: Int
    let token = SendableBox<CancellationToken?>(nil)
    let handlerRuns = Counter()
    let outcome = SendableBox<PromiseCore.Result<Int>?>(nil)
    /// The body registered its handler.
    let registered = Handshake()
    /// The body returned, or the step settled (it will not run then).
    let bodyOver = Handshake()
    let stepSettled = Handshake()
    /// From now on the step may settle on its own: the `map` body is returning, or the promise
    /// the `then` body returned is being fulfilled.
    let mayNowSettle = Flag()
    let cancelReturned = Flag()
    let bodySawItsTokenCancelled = Flag()
    let bodyReturnedAfterTheCancel = Flag()
    /// The handler was registered before `cancel()` was called, and the step could not settle
    /// until `cancel()` returned.
    let cancelCameWhileTheStepCouldNotSettle = Flag()
    /// … and the handler had not run when `cancel()` returned.
    let cancelReturnedBeforeTheHandlerRan = Flag()

    init(spins: Int) {
        self.spins = spins
    }

    /// The step's body: reads its token, registers a handler, keeps reading the token a while.
    func runBody(settlesWhenItReturns: Bool) {
        let token = CancellationToken.current
        self.token.value = token
        token.onCancel { self.handlerRuns.increment() }
        registered.signal()
        for _ in 0..<spins where token.isCancelled {
            bodySawItsTokenCancelled.raise()
            break
        }
        if settlesWhenItReturns { mayNowSettle.raise() }
        if cancelReturned.value { bodyReturnedAfterTheCancel.raise() }
        bodyOver.signal()
    }
}
