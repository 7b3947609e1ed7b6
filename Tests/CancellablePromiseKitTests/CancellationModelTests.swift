import CancellablePromiseKit
import Dispatch
import Foundation
import PromiseCore
import XCTest

// A seeded, model-based randomized test of the cancellation graph.
//
// Every round draws a small graph (tasks, chain operators, then-links to other chains, race and
// when with and without autoCancel, wrappers, held and dropped handles) and a schedule of events
// (fulfil, reject or abandon a task, resolve an ensureThen cleanup, cancel through a handle, drop
// a handle). It runs the schedule on one thread, or on two to four threads at once, settles or
// cancels whatever remains, drops everything, and checks what happened against a small
// sequential model of the rules. Every body runs with `on: nil`, so nothing waits for a queue.
// Every body, and every task's initialiser, registers an `onCancel` handler on
// `CancellationToken.current`, and the model says when it must have run.
//
// A failure names the rule it broke, with the seed and round that show it. To replay one round:
//
//     CPK_MODEL_SEED=<seed> CPK_MODEL_FIRST_ROUND=<round> CPK_MODEL_ROUNDS=1 \
//         swift test --filter CancellationModelTests
//
// Three files: CancellationModelGenerator.swift draws the plan of a round and its schedule,
// CancellationModel.swift holds the sequential model that predicts what a round must do, and this
// file runs a round and checks it. Reading order here: the test cases, the rules, the log and the
// world that runs a round, the checks, and the driver. The seeded generator, the run settings and
// the outcomes are in CancellationModelSupport.swift.

final class CancellationModelTests: XCTestCase {
    static let defaultRounds = 10_000

    func testRandomGraphsFollowTheSequentialModel() {
        let settings = ModelRunSettings.fromEnvironment(defaultRounds: Self.defaultRounds)
        let report = ModelRunReport(settings: settings)
        for round in settings.roundRange {
            ModelRound(settings: settings, round: round).run(into: report)
        }
        report.printSummary()
        for failure in report.failures() {
            XCTFail(failure)
        }
    }

    /// Timeouts get rounds of their own, on virtual time: a task that answers at once, never,
    /// or from another thread while the deadline passes, behind a cancellable chain with
    /// `timeout(seconds:scheduler:)`, and a `recover` after it.
    func testTimeoutCancelsTheSourceTaskAndIsRecoverable() {
        let settings = ModelRunSettings.fromEnvironment(defaultRounds: 1_000)
        let report = ModelRunReport(settings: settings)
        for round in settings.roundRange.prefix(1_000) {
            TimeoutRound(settings: settings, round: round).run(into: report)
        }
        for failure in report.failures() {
            XCTFail(failure)
        }
    }
}

// MARK: - Rules

/// The rules checked, in the order a report lists them, each with the sentence it reports.
enum Rule: Int, CaseIterable, Comparable {
    case settlesOnce
    case cancelRejectsPending
    case cancelCallsClosureOnce
    case isCancelledSticks
    case noStepBodyAfterCancel
    case observersOnceInOrder
    case ensureThenOrder
    case recoverSkipsOwnCancellation
    case linkCancelsWaitedPromise
    case linkEndsWhenSettled
    case chainsAreNotJoined
    case combinatorSettles
    case autoCancelSparesWinner
    case autoCancelCancelsLosers
    case autoCancelResultCancelsInputs
    case wrapperCancelPromise
    case wrapperCancelsInner
    case releasedWithoutCancelHandle
    case workSettlesWithoutHandles
    case settledChainHoldsNothing
    case abandonedWorkIsFreed
    case everythingFreedAtEnd
    case timeoutIsRecoverable
    case runningBodySeesTheCancel
    case model

    static func < (lhs: Rule, rhs: Rule) -> Bool { lhs.rawValue < rhs.rawValue }

    var statement: String {
        switch self {
        case .settlesOnce:
            "Each promise settles exactly once."
        case .cancelRejectsPending:
            "cancel() rejects every pending promise of the chain with the cancellation error before it returns."
        case .cancelCallsClosureOnce:
            "cancel() calls the cancel closure of every pending task of the chain exactly once before it "
                + "returns; a task that settled first never has its closure called."
        case .isCancelledSticks:
            "isCancelled is true on every handle of a cancelled chain once cancel() returned, on any thread, "
                + "and never goes back to false; a chain nothing cancelled says false."
        case .noStepBodyAfterCancel:
            "No then/map/get/done/recover body starts after the cancel() that covered it returned, unless "
                + "it was already starting then (released by an event that began before, its parent settled before)."
        case .observersOnceInOrder:
            "ensure/tap/catch bodies run exactly once, in chain order; an observer passes the cancellation "
                + "on only after its body ran."
        case .ensureThenOrder:
            "A handler downstream of ensureThen runs only after the cleanup promise it returned resolved; "
                + "until then the promises downstream stay pending."
        case .recoverSkipsOwnCancellation:
            "recover never runs for the chain's own cancellation (cancel() or cancel(with:)), and runs for "
                + "other errors."
        case .linkCancelsWaitedPromise:
            "Cancelling a chain while its then waits on a returned cancellable promise cancels that promise "
                + "(its task closure is called, it rejects, the rejection flows down)."
        case .linkEndsWhenSettled:
            "Once the promise a then returned has settled (or if it was settled when returned), cancelling "
                + "the outer chain leaves that promise's chain alone."
        case .chainsAreNotJoined:
            "A then does not join chains: cancelling the promise it waits on, or another chain waiting on "
                + "the same promise, rejects the waiting step, but its chain stays not cancelled and its other "
                + "tasks untouched."
        case .combinatorSettles:
            "race settles with the first input to settle, race(fulfilled:) with the first fulfilment, "
                + "when(fulfilled:) with all values or the failing input's own error, when(resolved:) with all."
        case .autoCancelSparesWinner:
            "autoCancel never cancels the input that settled the combinator, the same promise passed twice, "
                + "or the chain the winner belongs to (its isCancelled stays false)."
        case .autoCancelCancelsLosers:
            "With autoCancel, every other input still pending when the combinator settles is cancelled: its "
                + "own pending task's closure is called and it rejects with the cancellation error."
        case .autoCancelResultCancelsInputs:
            "Cancelling a combinator's result cancels its pending inputs with autoCancel, and never touches "
                + "them without it."
        case .wrapperCancelPromise:
            "The cancelPromise of CancellablePromise { cancelPromise in … } rejects when the wrapper is "
                + "cancelled, and is fulfilled when it settles or its last cancel handle goes away while pending."
        case .wrapperCancelsInner:
            "Cancelling a wrapper cancels the cancellable promise its body returned (or waited on with "
                + "autoCancel), and leaves alone a task it only waited on."
        case .releasedWithoutCancelHandle:
            "When no cancel handle of a pending chain is left, its cancel closures are released uncalled "
                + "(what they captured is freed)."
        case .workSettlesWithoutHandles:
            "A chain whose cancel handles are all gone is still settled by its work: its bodies run and its "
                + "promises settle normally."
        case .settledChainHoldsNothing:
            "A settled chain holds nothing: a settled task's cancel closure and a settled step's body are "
                + "released, and once the test lets go every promise, context and capture is freed."
        case .abandonedWorkIsFreed:
            "When nothing can settle or cancel a chain any more, everything it holds is freed: no cycle keeps "
                + "abandoned work alive but a pending autoCancel combinator's (it holds its inputs' chains until it "
                + "settles) or one the test's closures made."
        case .everythingFreedAtEnd:
            "After every task settled or was cancelled and the test dropped its handles, every object of the "
                + "round is freed."
        case .timeoutIsRecoverable:
            "timeout(seconds:) on a cancellable chain cancels the source's task and rejects with "
                + "PromiseTimeoutError, which a downstream recover recovers from."
        case .runningBodySeesTheCancel:
            "The onCancel handler a body registers on CancellationToken.current (a step's, an observer's, a "
                + "task initialiser's) runs once if the chain, or the step alone, was cancelled while the step was "
                + "pending with its body run, or if the body ran in a chain already cancelled; never otherwise, "
                + "never twice."
        case .model:
            "The chain settles as the sequential model predicts (a divergence no more specific rule names)."
        }
    }
}

// MARK: - The log

/// What happened in a round: recorded from any thread by the promises' observers, the bodies,
/// the cancel closures and the event runner, every entry stamped from one clock.
final class RoundLog: @unchecked Sendable {
    struct NodeRecord {
        var created = false
        var settleCount = 0
        var outcome: Outcome?
        var settledAt = 0
        var bodyRuns = 0
        /// The runs of the `onCancel` handler the body registered on `CancellationToken.current`.
        var tokenHandlerRuns = 0
        var tokenHandlerRanAt = 0
        var bodyStartedAt = 0
        var bodyEndedAt = 0
        var bodyInput: Outcome?
        /// The event running on the thread the body started on: the one that released it.
        var bodyTrigger: Int?
        var cancelPromise: Outcome?
        var cancelPromiseSettleCount = 0
    }

    struct EventRecord {
        let event: Int
        let thread: Int
        let start: Int
        let end: Int
        /// Whether the event's subject was there (the resolver, the handle…).
        let performed: Bool
    }

    struct CancelledRead {
        let chain: ChainID
        let at: Int
        let value: Bool
    }

    struct Snapshot {
        let nodes: [NodeRecord]
        let closureCalls: [Int]
        let closureCalledAt: [Int]
        let cleanupResolvedAt: [Int]
        let events: [EventRecord]
        let reads: [CancelledRead]
    }

    private let lock = NSLock()
    private var clock = 0
    private var nodes: [NodeRecord]
    private var closureCalls: [Int]
    private var closureCalledAt: [Int]
    private var cleanupResolvedAt: [Int]
    private var events: [EventRecord] = []
    private var reads: [CancelledRead] = []
    /// The event each thread is running (bodies run on the thread that released them).
    private var running: [ObjectIdentifier: Int] = [:]

    init(_ plan: GraphPlan) {
        nodes = Array(repeating: NodeRecord(), count: plan.nodes.count)
        closureCalls = Array(repeating: 0, count: plan.tasks.count)
        closureCalledAt = Array(repeating: 0, count: plan.tasks.count)
        cleanupResolvedAt = Array(repeating: 0, count: plan.cleanups.count)
    }

    func tick() -> Int {
        lock.withLock {
            clock += 1
            return clock
        }
    }

    /// Stamps the start of event `number` on this thread.
    func begin(event number: Int) -> Int {
        let thread = ObjectIdentifier(Thread.current)
        return lock.withLock {
            clock += 1
            running[thread] = number
            return clock
        }
    }

    /// Stamps the end of the event running on this thread.
    func end() -> Int {
        let thread = ObjectIdentifier(Thread.current)
        return lock.withLock {
            clock += 1
            running[thread] = nil
            return clock
        }
    }

    func created(_ node: NodeID) { lock.withLock { nodes[node].created = true } }

    func settled(_ node: NodeID, _ outcome: Outcome) {
        lock.withLock {
            clock += 1
            nodes[node].settleCount += 1
            nodes[node].outcome = nodes[node].outcome ?? outcome
            nodes[node].settledAt = clock
        }
    }

    /// Stamps the start of `node`'s body, which watches its token.
    func bodyStarted(_ node: NodeID, input: Outcome? = nil) {
        let thread = ObjectIdentifier(Thread.current)
        lock.withLock {
            clock += 1
            nodes[node].bodyTrigger = running[thread]
            nodes[node].bodyRuns += 1
            nodes[node].bodyStartedAt = clock
            nodes[node].bodyInput = input
        }
        watchCurrentToken(of: node)
    }

    /// Registers an `onCancel` handler on the token of the body running on this thread (the
    /// body of `node`, or its task's initialiser), counting its runs.
    func watchCurrentToken(of node: NodeID) {
        CancellationToken.current.onCancel {
            self.lock.withLock {
                self.clock += 1
                self.nodes[node].tokenHandlerRuns += 1
                self.nodes[node].tokenHandlerRanAt = self.clock
            }
        }
    }

    func bodyEnded(_ node: NodeID) {
        lock.withLock {
            clock += 1
            nodes[node].bodyEndedAt = clock
        }
    }

    func closureCalled(_ task: TaskID) {
        lock.withLock {
            clock += 1
            closureCalls[task] += 1
            closureCalledAt[task] = closureCalledAt[task] == 0 ? clock : closureCalledAt[task]
        }
    }

    func cleanupResolving(_ cleanup: Int) {
        lock.withLock {
            clock += 1
            cleanupResolvedAt[cleanup] = clock
        }
    }

    func cancelPromiseSettled(_ node: NodeID, _ outcome: Outcome) {
        lock.withLock {
            nodes[node].cancelPromiseSettleCount += 1
            nodes[node].cancelPromise = nodes[node].cancelPromise ?? outcome
        }
    }

    func record(_ event: EventRecord) { lock.withLock { events.append(event) } }

    func read(chain: ChainID, at: Int, isCancelled: Bool) {
        lock.withLock { reads.append(CancelledRead(chain: chain, at: at, value: isCancelled)) }
    }

    func snapshot() -> Snapshot {
        lock.withLock {
            Snapshot(
                nodes: nodes, closureCalls: closureCalls, closureCalledAt: closureCalledAt,
                cleanupResolvedAt: cleanupResolvedAt, events: events, reads: reads)
        }
    }
}

// MARK: - The world

/// The real objects of a round, built from its plan with the public API only, and the work that
/// settles them: the resolvers of started tasks and the resolve functions of ensureThen
/// cleanups. The test's handles live here too; dropping one releases the world's only reference.
///
/// Bodies and cancel closures capture nothing but the log, a `Tracked` box (whose release shows
/// the closure was released) and what they must return; a `then` body that starts a task reaches
/// the world weakly.
final class World: @unchecked Sendable {
    /// The objects whose release the checks observe.
    enum TrackedObject {
        case promise(NodeID)
        case combinedResult(NodeID)
        case cancelPromise(NodeID)
        case context(ChainID)
        case cancelClosure(TaskID)
        case body(NodeID)
    }

    let plan: GraphPlan
    let index: PlanIndex
    let log: RoundLog

    private let lock = NSLock()
    private var nodeHandles: [AnyObject?]
    private var contextHandles: [CancelContext?]
    private var resolvers: [Resolver<Int>?]
    private var cleanupResolvers: [(@Sendable (()) -> Void)?]
    private var tracked: [(object: WeakRef, what: TrackedObject)] = []
    private var closureBoxes: [WeakRef]
    private var bodyBoxes: [WeakRef]
    private var promises: [WeakRef]
    private var contexts: [WeakRef]

    init(plan: GraphPlan, index: PlanIndex) {
        self.plan = plan
        self.index = index
        log = RoundLog(plan)
        nodeHandles = Array(repeating: nil, count: plan.nodes.count)
        contextHandles = Array(repeating: nil, count: plan.chains.count)
        resolvers = Array(repeating: nil, count: plan.tasks.count)
        cleanupResolvers = Array(repeating: nil, count: plan.cleanups.count)
        closureBoxes = Array(repeating: WeakRef(), count: plan.tasks.count)
        bodyBoxes = Array(repeating: WeakRef(), count: plan.nodes.count)
        promises = Array(repeating: WeakRef(), count: plan.nodes.count)
        contexts = Array(repeating: WeakRef(), count: plan.chains.count)
        build()
    }

    // MARK: Building

    private func build() {
        var built = [AnyObject?](repeating: nil, count: plan.nodes.count)
        func promise(_ node: NodeID) -> CancellablePromise<Int> {
            built[node] as! CancellablePromise<Int>
        }
        for (node, entry) in plan.nodes.enumerated() {
            switch entry.kind {
            case .task(let task):
                guard plan.role(node) == .head || plan.role(node) == .target else { continue }
                built[node] = startTask(task)
            case .combinator(let combinator, let inputs, let autoCancel):
                built[node] = combine(node, combinator, inputs.map(promise), autoCancel: autoCancel)
            case .wrapper(let inner, let style):
                built[node] = wrap(node, inner: inner, style)
            case .catchAll(let parent):
                let box = bodyBox(node)
                let finalizer = promise(parent).catch(on: nil, policy: .allErrors) { [log] error in
                    log.bodyStarted(node, input: .rejected(ErrorKind(error)))
                    withExtendedLifetime(box) {}
                    log.bodyEnded(node)
                }
                register(node, finalizer)
                built[node] = finalizer
            case .done(let parent):
                let box = bodyBox(node)
                let done = promise(parent).done(on: nil) { [log] value in
                    log.bodyStarted(node, input: .fulfilled(value))
                    withExtendedLifetime(box) {}
                    log.bodyEnded(node)
                }
                done.pipe { [log] in log.settled(node, Outcome($0)) }
                register(node, done)
                built[node] = done
            default:
                let step = chainStep(node, entry.kind, on: promise(entry.kind.parent!))
                register(node, step)
                built[node] = step
            }
        }
    }

    /// Starts a task: its cancel closure records the call and holds a tracked box.
    func startTask(_ task: TaskID) -> CancellablePromise<Int> {
        let box = Tracked()
        let log = self.log
        let rejectsToo = plan.tasks[task].closureRejectsToo
        let node = plan.tasks[task].node
        let promise = CancellablePromise<Int> { resolver in
            log.watchCurrentToken(of: node)
            lock.withLock { resolvers[task] = resolver }
            let ownResolver = rejectsToo ? resolver : nil
            return {
                log.closureCalled(task)
                withExtendedLifetime(box) {}
                ownResolver?.reject(TaskFailure(task: task))
            }
        }
        lock.withLock {
            closureBoxes[task].object = box
            track(box, as: .cancelClosure(task))
        }
        promise.pipe { log.settled(node, Outcome($0)) }
        register(node, promise)
        return promise
    }

    private func chainStep(
        _ node: NodeID, _ kind: GraphPlan.Kind, on parent: CancellablePromise<Int>
    )
        -> CancellablePromise<Int>
    {
        let log = self.log
        let box = bodyBox(node)
        let step: CancellablePromise<Int>
        switch kind {
        case .map(_, let throwing):
            step = parent.map(on: nil) { value -> Int in
                log.bodyStarted(node, input: .fulfilled(value))
                defer { log.bodyEnded(node) }
                withExtendedLifetime(box) {}
                if throwing { throw StepFailure(node: node) }
                return GraphPlan.mapped(value, by: node)
            }
        case .get:
            step = parent.get(on: nil) { value in
                log.bodyStarted(node, input: .fulfilled(value))
                withExtendedLifetime(box) {}
                log.bodyEnded(node)
            }
        case .then(_, .promise(let target)):
            let returned = promisesForThen(target)
            step = parent.then(on: nil) { value -> CancellablePromise<Int> in
                log.bodyStarted(node, input: .fulfilled(value))
                defer { log.bodyEnded(node) }
                withExtendedLifetime(box) {}
                return returned
            }
        case .then(_, .lazyTask(let task)):
            step = parent.then(on: nil) { [weak self] value -> CancellablePromise<Int> in
                log.bodyStarted(node, input: .fulfilled(value))
                defer { log.bodyEnded(node) }
                withExtendedLifetime(box) {}
                guard let self else { return CancellablePromise(error: StepFailure(node: node)) }
                return self.startTask(task)
            }
        case .recover(_, let allErrors, let returnsCancellable):
            let policy: CatchPolicy = allErrors ? .allErrors : .allErrorsExceptCancellation
            let value = GraphPlan.recovered(by: node)
            if returnsCancellable {
                step = parent.recover(on: nil, policy: policy) { error -> CancellablePromise<Int> in
                    log.bodyStarted(node, input: .rejected(ErrorKind(error)))
                    defer { log.bodyEnded(node) }
                    withExtendedLifetime(box) {}
                    return .value(value)
                }
            } else {
                step = parent.recover(on: nil, policy: policy) { error -> Promise<Int> in
                    log.bodyStarted(node, input: .rejected(ErrorKind(error)))
                    defer { log.bodyEnded(node) }
                    withExtendedLifetime(box) {}
                    return .value(value)
                }
            }
        case .ensure:
            step = parent.ensure(on: nil) {
                log.bodyStarted(node)
                withExtendedLifetime(box) {}
                log.bodyEnded(node)
            }
        case .ensureThen(_, let cleanup):
            step = parent.ensureThen(on: nil) { [weak self] () -> Guarantee<Void> in
                log.bodyStarted(node)
                defer { log.bodyEnded(node) }
                withExtendedLifetime(box) {}
                let (guarantee, resolve) = Guarantee<Void>.pending()
                self?.lock.withLock { self?.cleanupResolvers[cleanup] = resolve }
                return guarantee
            }
        case .tap:
            step = parent.tap(on: nil) { result in
                log.bodyStarted(node, input: Outcome(result))
                withExtendedLifetime(box) {}
                log.bodyEnded(node)
            }
        default:
            fatalError("not a step: \(kind)")
        }
        step.pipe { log.settled(node, Outcome($0)) }
        return step
    }

    private func promisesForThen(_ target: NodeID) -> CancellablePromise<Int> {
        lock.withLock { promises[target].object as! CancellablePromise<Int> }
    }

    private func combine(
        _ node: NodeID, _ combinator: GraphPlan.Combinator, _ inputs: [CancellablePromise<Int>], autoCancel: Bool
    ) -> CancellablePromise<Int> {
        let log = self.log
        let result: CancellablePromise<Int>
        switch combinator {
        case .race:
            result = race(inputs, autoCancel: autoCancel)
        case .raceFulfilled:
            result = race(fulfilled: inputs, autoCancel: autoCancel)
        case .whenFulfilled:
            let all = when(fulfilled: inputs, autoCancel: autoCancel)
            lock.withLock { track(all, as: .combinedResult(node)) }
            result = all.map(on: nil) { GraphPlan.folded($0) }
        case .whenResolved:
            let all = when(resolved: inputs, autoCancel: autoCancel)
            lock.withLock { track(all, as: .combinedResult(node)) }
            result = all.map(on: nil) { GraphPlan.folded(results: $0.map(Outcome.init)) }
        }
        result.pipe { log.settled(node, Outcome($0)) }
        register(node, result)
        return result
    }

    private func wrap(_ node: NodeID, inner: TaskID, _ style: GraphPlan.WrapperStyle) -> CancellablePromise<Int> {
        let log = self.log
        let wrapper: CancellablePromise<Int>
        switch style {
        case .returnsInner:
            wrapper = CancellablePromise<Int>(wrapper: { cancelPromise -> CancellablePromise<Int> in
                self.watch(cancelPromise, of: node)
                return self.startTask(inner)
            })
        case .whileAutoCancel:
            wrapper = CancellablePromise<Int>(wrapper: { cancelPromise -> Promise<Int> in
                self.watch(cancelPromise, of: node)
                return when(self.startTask(inner), while: cancelPromise, autoCancel: true)
            })
        case .whilePlain:
            wrapper = CancellablePromise<Int>(wrapper: { cancelPromise -> Promise<Int> in
                self.watch(cancelPromise, of: node)
                return when(self.startTask(inner).promise, while: cancelPromise)
            })
        }
        wrapper.pipe { log.settled(node, Outcome($0)) }
        register(node, wrapper)
        return wrapper
    }

    private func watch(_ cancelPromise: Promise<Void>, of node: NodeID) {
        let log = self.log
        cancelPromise.pipe { log.cancelPromiseSettled(node, Outcome($0)) }
        lock.withLock { track(cancelPromise, as: .cancelPromise(node)) }
    }

    private func bodyBox(_ node: NodeID) -> Tracked {
        let box = Tracked()
        lock.withLock {
            bodyBoxes[node].object = box
            track(box, as: .body(node))
        }
        return box
    }

    /// Records a created node and holds it if the plan says so; for the head of a chain, tracks
    /// (and maybe holds) the chain's context too.
    private func register(_ node: NodeID, _ object: CancelHandle) {
        let chain = plan.chain(node)
        let isHead = plan.chains[chain].nodes.first == node
        let context = isHead ? (object as? CancellablePromise<Int>)?.cancelContext : nil
        lock.withLock {
            promises[node].object = object
            track(object, as: .promise(node))
            if plan.nodes[node].held { nodeHandles[node] = object }
            if let context {
                contexts[chain].object = context
                track(context, as: .context(chain))
                if plan.chains[chain].contextHeld { contextHandles[chain] = context }
            }
        }
        log.created(node)
    }

    /// Called with the lock held.
    private func track(_ object: AnyObject, as what: TrackedObject) {
        tracked.append((WeakRef(object: object), what))
    }

    // MARK: Running events

    /// Performs `event` and stamps it; returns whether its subject was there.
    @discardableResult
    func run(_ event: Event, number: Int, thread: Int) -> Bool {
        let start = log.begin(event: number)
        let performed = perform(event)
        let end = log.end()
        log.record(RoundLog.EventRecord(event: number, thread: thread, start: start, end: end, performed: performed))
        return performed
    }

    /// Reads `isCancelled` through the handles held of `chain` (all of them after a cancel, one
    /// otherwise), from whichever thread: what a read sees must never be `false` once a `cancel()`
    /// of the chain returned.
    func readIsCancelled(of chain: ChainID, all: Bool, using rng: inout SeededGenerator) {
        var handles: [CancelHandle] = lock.withLock {
            plan.chains[chain].nodes.compactMap { nodeHandles[$0] as? CancelHandle }
                + [contextHandles[chain]].compactMap { $0 }
        }
        if !all, let one = rng.element(of: handles) { handles = [one] }
        for handle in handles {
            let at = log.tick()  // stamped before reading: a read that starts after cancel() returned sees true
            log.read(chain: chain, at: at, isCancelled: handle.isCancelled)
        }
    }

    private func perform(_ event: Event) -> Bool {
        switch event {
        case .fulfil(let task):
            guard let resolver = takeResolver(task) else { return false }
            resolver.fulfill(plan.value(ofTask: task))
        case .reject(let task):
            guard let resolver = takeResolver(task) else { return false }
            resolver.reject(TaskFailure(task: task))
        case .abandon(let task):
            return takeResolver(task) != nil
        case .resolveCleanup(let cleanup):
            guard let resolve = lock.withLock({ cleanupResolvers[cleanup].take() }) else { return false }
            log.cleanupResolving(cleanup)
            resolve(())
        case .cancel(let handle, let custom):
            guard let object = self.handle(handle) else { return false }
            if custom {
                object.cancel(with: ChainCancel(chain: plan.chain(of: handle)))
            } else {
                object.cancel()
            }
        case .drop(let handle):
            let dropped: AnyObject? = lock.withLock {
                switch handle {
                case .node(let node): return nodeHandles[node].take()
                case .context(let chain): return contextHandles[chain].take()
                }
            }
            return dropped != nil
        }
        return true
    }

    private func takeResolver(_ task: TaskID) -> Resolver<Int>? {
        lock.withLock { resolvers[task].take() }
    }

    func handle(_ handle: Handle) -> CancelHandle? {
        lock.withLock {
            switch handle {
            case .node(let node): return nodeHandles[node] as? CancelHandle
            case .context(let chain): return contextHandles[chain]
            }
        }
    }

    func heldHandles() -> [Handle] {
        lock.withLock {
            nodeHandles.indices.filter { nodeHandles[$0] != nil }.map { Handle.node($0) }
                + contextHandles.indices.filter { contextHandles[$0] != nil }.map { Handle.context($0) }
        }
    }

    /// Whether the test still holds anything of the component: a handle, a resolver, a cleanup.
    func holdsAnything(inComponent component: Int) -> Bool {
        lock.withLock {
            index.nodesOfComponent[component].contains { nodeHandles[$0] != nil }
                || index.chainsOfComponent[component].contains { contextHandles[$0] != nil }
                || index.tasksOfComponent[component].contains { resolvers[$0] != nil }
                || plan.cleanups.indices.contains {
                    cleanupResolvers[$0] != nil && index.componentOfChain[plan.chain(plan.cleanups[$0])] == component
                }
        }
    }

    var heldResolvers: [TaskID] { lock.withLock { resolvers.indices.filter { resolvers[$0] != nil } } }
    var heldCleanups: [Int] { lock.withLock { cleanupResolvers.indices.filter { cleanupResolvers[$0] != nil } } }

    // MARK: Observing

    /// `isCancelled` of the chain, read through any of its objects still alive.
    func isCancelled(chain: ChainID) -> Bool? {
        let object: CancelHandle? = lock.withLock {
            if let context = contextHandles[chain] { return context }
            for node in plan.chains[chain].nodes {
                if let handle = promises[node].object as? CancelHandle { return handle }
            }
            return contexts[chain].object as? CancelContext
        }
        return object?.isCancelled
    }

    func isClosureAlive(_ task: TaskID) -> Bool { lock.withLock { closureBoxes[task].object != nil } }
    func isBodyAlive(_ node: NodeID) -> Bool { lock.withLock { bodyBoxes[node].object != nil } }

    /// The tracked objects still alive, those of one component or all of them.
    func liveObjects(inComponent component: Int? = nil) -> [TrackedObject] {
        lock.withLock {
            tracked.filter { entry in
                guard entry.object.object != nil else { return false }
                guard let component else { return true }
                return index.componentOfChain[self.chain(of: entry.what)] == component
            }.map(\.what)
        }
    }

    func chain(of object: TrackedObject) -> ChainID {
        switch object {
        case .promise(let node), .combinedResult(let node), .cancelPromise(let node), .body(let node):
            return plan.chain(node)
        case .context(let chain): return chain
        case .cancelClosure(let task): return plan.taskChain(task)
        }
    }
}

extension World.TrackedObject: CustomStringConvertible {
    var description: String {
        switch self {
        case .promise(let node): return "promise n\(node)"
        case .combinedResult(let node): return "combined result of n\(node)"
        case .cancelPromise(let node): return "cancelPromise of n\(node)"
        case .context(let chain): return "context of c\(chain)"
        case .cancelClosure(let task): return "cancel closure of t\(task)"
        case .body(let node): return "body of n\(node)"
        }
    }
}

extension Optional {
    /// Returns the value and leaves `nil` behind.
    fileprivate mutating func take() -> Wrapped? {
        defer { self = nil }
        return self
    }
}

// MARK: - Checks

/// Compares a round's log and world with the model, rule by rule, and keeps the first message
/// of each rule broken in the round.
///
/// Once a component has diverged from the model, the model no longer knows what it should do:
/// only its first divergence is reported (every mismatch seen at that moment), and from then on
/// it gets only the checks that need no model.
final class RoundChecker {
    let plan: GraphPlan
    let index: PlanIndex
    private(set) var problems: [Rule: String] = [:]
    private var diverged: Set<Int> = []
    /// Components the test let go of and that were checked freed.
    private var released: Set<Int> = []

    init(plan: GraphPlan, index: PlanIndex) {
        self.plan = plan
        self.index = index
    }

    func fail(_ rule: Rule, _ message: @autoclosure () -> String) {
        if problems[rule] == nil { problems[rule] = message() }
    }

    private func component(_ node: NodeID) -> Int { index.componentOfChain[plan.chain(node)] }

    /// Compares the model with what happened, in `components` (an event only changes its own),
    /// for those whose events were ordered (`exact`) and that have not diverged yet; then checks
    /// what must have been released.
    func compare(
        _ model: CancellationModel, _ world: World, _ observed: RoundLog.Snapshot, after moment: String,
        in components: [Int], exact: [Bool]
    ) {
        let compared = components.filter { exact[$0] && !diverged.contains($0) }
        // A promise held back by an ensureThen that the implementation let through makes
        // everything downstream diverge, in other chains too: name that rule when no reason of
        // the model is closer.
        var heldBack: [Int: Bool] = [:]
        func isHeldBack(_ component: Int) -> Bool {
            if let known = heldBack[component] { return known }
            let found = index.nodesOfComponent[component].contains { model.dependsOnAPendingEnsureThen($0) }
            heldBack[component] = found
            return found
        }
        var mismatches: [Mismatch] = []
        func mismatch(
            _ component: Int, _ fact: CancellationModel.Fact?, otherwise rule: Rule, at: Int?, _ message: String
        ) {
            let held = isHeldBack(component)
            var blamed = held ? .ensureThenOrder : rule
            if let fact, let reason = model.reason(for: fact),
                !held
                    || (reason.rule != .model
                        && (reason.decided || model.isRecent(reason)))
            {
                blamed = reason.rule
            }
            mismatches.append(
                Mismatch(component: component, rule: blamed, at: at, message: "after \(moment): " + message))
        }
        func time(_ stamp: Int) -> Int? { stamp > 0 ? stamp : nil }

        for node in Self.gather(index.nodesOfComponent, compared) {
            let record = observed.nodes[node]
            let component = component(node)
            var what: String { "n\(node) (\(plan.describe(node)))" }
            if model.created[node] != record.created {
                let starter = index.starter[node]
                mismatch(
                    component, starter.map { .body($0) }, otherwise: .model,
                    at: record.created ? starter.flatMap { time(observed.nodes[$0].bodyStartedAt) } : nil,
                    "\(what) \(record.created ? "was" : "was not") started")
            }
            guard model.created[node] else { continue }
            if plan.hasOutcome[node], model.outcome[node] != record.outcome {
                mismatch(
                    component, .outcome(node), otherwise: .model, at: time(record.settledAt),
                    "\(what) is \(Self.text(record.outcome)), the model says \(Self.text(model.outcome[node]))")
            }
            if plan.parentOf[node] != nil, model.bodyRuns[node] != record.bodyRuns {
                mismatch(
                    component, .body(node), otherwise: plan.isObserver[node] ? .observersOnceInOrder : .model,
                    at: record.bodyRuns > model.bodyRuns[node] ? time(record.bodyStartedAt) : nil,
                    "the body of \(what) ran \(record.bodyRuns) times, the model says \(model.bodyRuns[node])")
            }
            if !model.tokenHandlerRuns[node].contains(record.tokenHandlerRuns) {
                let allowed = model.tokenHandlerRuns[node].sorted().map(String.init).joined(separator: " or ")
                mismatch(
                    component, .token(node), otherwise: .runningBodySeesTheCancel,
                    at: record.tokenHandlerRuns > 0 ? time(record.tokenHandlerRanAt) : nil,
                    "the token handler of \(what) ran \(record.tokenHandlerRuns) times, the model says \(allowed)")
            }
            if case .wrapper = plan.kind(node), !model.cancelPromise[node].contains(record.cancelPromise) {
                let allowed = model.cancelPromise[node].map { Self.text($0) }.sorted().joined(separator: " or ")
                mismatch(
                    component, .cancelPromise(node), otherwise: .wrapperCancelPromise, at: nil,
                    "the cancelPromise of \(what) is \(Self.text(record.cancelPromise)), it should be \(allowed)")
            }
        }
        for task in Self.gather(index.tasksOfComponent, compared) {
            if model.closureCalls[task] != observed.closureCalls[task] {
                mismatch(
                    component(plan.tasks[task].node), .closure(task), otherwise: .cancelCallsClosureOnce,
                    at: observed.closureCalls[task] > model.closureCalls[task]
                        ? time(observed.closureCalledAt[task]) : nil,
                    "the cancel closure of t\(task) was called \(observed.closureCalls[task]) times, "
                        + "the model says \(model.closureCalls[task])")
            }
        }
        for chain in Self.gather(index.chainsOfComponent, compared) {
            let expected: Bool
            switch model.flag[chain] {
            case .untouched: expected = false
            case .cancelled: expected = true
            case .unknown: continue
            }
            guard let actual = world.isCancelled(chain: chain), actual != expected else { continue }
            mismatch(
                index.componentOfChain[chain], .flag(chain), otherwise: expected ? .isCancelledSticks : .model, at: nil,
                "isCancelled of c\(chain) is \(actual), the model says \(expected)")
        }
        for component in Set(mismatches.map(\.component)) {
            diverged.insert(component)
            for entry in Self.firstDivergence(mismatches.filter { $0.component == component }) {
                fail(entry.rule, entry.message)
            }
        }
        checkReleased(model, world, observed, after: moment, in: components, exact: exact)
    }

    /// What must have been released by now: a settled task's cancel closure, a settled step's
    /// body, a pending task's cancel closure once nothing can cancel it (this one needs the
    /// model), and everything of a component the test holds nothing of any more.
    private func checkReleased(
        _ model: CancellationModel, _ world: World, _ observed: RoundLog.Snapshot, after moment: String,
        in components: [Int], exact: [Bool]
    ) {
        let cancellability = model.cancellability
        for task in Self.gather(index.tasksOfComponent, components) where world.isClosureAlive(task) {
            let node = plan.tasks[task].node
            if observed.nodes[node].settleCount > 0 {
                fail(
                    .settledChainHoldsNothing, "after \(moment): t\(task) settled but its cancel closure is still alive"
                )
            } else if exact[component(node)], !diverged.contains(component(node)),
                cancellability[plan.chain(node)] == .impossible
            {
                fail(
                    .releasedWithoutCancelHandle,
                    "after \(moment): t\(task) is pending and nothing can cancel c\(plan.chain(node)) any more, "
                        + "but its cancel closure is still alive")
            }
        }
        for node in Self.gather(index.nodesOfComponent, components) where world.isBodyAlive(node) {
            guard let parent = plan.parentOf[node], observed.nodes[parent].settleCount > 0 else { continue }
            let settled: Bool
            if case .catchAll = plan.kind(node) {
                settled = observed.nodes[node].bodyRuns > 0
            } else {
                settled = observed.nodes[node].settleCount > 0
            }
            if settled {
                fail(.settledChainHoldsNothing, "after \(moment): n\(node) settled but its body is still alive")
            }
        }
        for component in components where !released.contains(component) && !world.holdsAnything(inComponent: component)
        {
            released.insert(component)
            var live = world.liveObjects(inComponent: component)
            guard !live.isEmpty else { continue }
            let kept = KeptByCycles(plan: plan, index: index, observed: observed, component: component)
            live.removeAll { kept.keeps($0) }
            guard !live.isEmpty else { continue }
            let settled = index.nodesOfComponent[component].allSatisfy { node in
                !observed.nodes[node].created
                    || !plan.hasOutcome[node] || observed.nodes[node].settleCount > 0
            }
            fail(
                settled ? .settledChainHoldsNothing : .abandonedWorkIsFreed,
                "after \(moment): the test holds nothing of \(Self.chains(of: component, index)) any more, yet "
                    + live.map(\.description).joined(separator: ", ") + " still alive")
        }
    }

    /// Checks that need only the log, valid whatever the threads did.
    func checkLog(_ observed: RoundLog.Snapshot, events: [Event]) {
        for node in plan.nodes.indices {
            let record = observed.nodes[node]
            let kind = plan.kind(node)
            let what = "n\(node) (\(plan.describe(node)))"
            if record.settleCount > 1 { fail(.settlesOnce, "\(what) settled \(record.settleCount) times") }
            if record.cancelPromiseSettleCount > 1 { fail(.settlesOnce, "the cancelPromise of n\(node) settled twice") }
            if record.tokenHandlerRuns > 1 {
                fail(.runningBodySeesTheCancel, "the token handler of \(what) ran \(record.tokenHandlerRuns) times")
            }
            if record.bodyRuns > 1 {
                fail(
                    kind.isObserver ? .observersOnceInOrder : .model, "the body of \(what) ran \(record.bodyRuns) times"
                )
            }
            switch kind {
            case .ensure, .tap:
                if record.settleCount > 0, record.bodyRuns == 0 || record.settledAt < record.bodyEndedAt {
                    fail(.observersOnceInOrder, "\(what) settled before its body ran")
                }
            case .recover(_, let allErrors, _):
                guard record.bodyRuns > 0, case .rejected(let error)? = record.bodyInput else { break }
                if error == .chainCancel(plan.chain(node)) || (error == .cancelled && allErrors) {
                    fail(.recoverSkipsOwnCancellation, "\(what) ran for its chain's own cancellation (\(error))")
                }
            default:
                break
            }
            checkChainOrder(node, observed)
        }
        for task in plan.tasks.indices {
            let calls = observed.closureCalls[task]
            let taskOutcome = observed.nodes[plan.tasks[task].node].outcome
            let cancelled: Bool
            switch taskOutcome {
            case .rejected(.cancelled)?, .rejected(.chainCancel)?: cancelled = true
            default: cancelled = false
            }
            if calls > 1 {
                fail(.cancelCallsClosureOnce, "the cancel closure of t\(task) was called \(calls) times")
            } else if calls == 1, !cancelled {
                fail(
                    .cancelCallsClosureOnce,
                    "the cancel closure of t\(task) was called though the task settled \(Self.text(taskOutcome))")
            }
        }
        checkNothingAfterCancel(observed, events: events)
    }

    /// Handlers downstream of an ensure or tap run after its body; downstream of an ensureThen,
    /// after its cleanup resolved.
    private func checkChainOrder(_ node: NodeID, _ observed: RoundLog.Snapshot) {
        let record = observed.nodes[node]
        var activity: [Int] = []
        if record.settleCount > 0 { activity.append(record.settledAt) }
        if record.bodyRuns > 0 { activity.append(record.bodyStartedAt) }
        guard let first = activity.min() else { return }
        let what = "n\(node) (\(plan.describe(node)))"
        if case .ensureThen(_, let cleanup) = plan.kind(node), record.settleCount > 0 {
            let resolvedAt = observed.cleanupResolvedAt[cleanup]
            if resolvedAt == 0 || record.settledAt < resolvedAt {
                fail(.ensureThenOrder, "\(what) settled before its cleanup resolved")
            }
        }
        for ancestor in index.ancestors[node] {
            let upstream = observed.nodes[ancestor]
            let before = "\(what) ran or settled before n\(ancestor) (\(plan.describe(ancestor))) upstream"
            switch plan.kind(ancestor) {
            case .ensure, .tap:
                if upstream.bodyRuns == 0 || first < upstream.bodyEndedAt {
                    fail(.observersOnceInOrder, before + " finished its body")
                }
            case .ensureThen(_, let cleanup):
                let resolvedAt = observed.cleanupResolvedAt[cleanup]
                if resolvedAt == 0 || first < resolvedAt {
                    fail(.ensureThenOrder, before + " had its cleanup resolved")
                }
            default:
                break
            }
        }
    }

    /// No step body of a chain starts after a `cancel()` of that chain returned, and `isCancelled`
    /// read after it returned says `true`.
    ///
    /// The library decides that a body may start just before calling it (under a lock, then calls
    /// it), so a body whose start was decided before the `cancel()` returned may enter the user's
    /// closure after it returned: it was already running when the chain was cancelled. That
    /// decision is taken by the handler of the body's parent, on the thread that settled the
    /// parent, after the parent's settlement was logged (the log's handler attached first): so
    /// it can only come before the `cancel()` returned if the event that released the body (on
    /// the thread the body started on) began before it, and the parent settled before it. Any
    /// other body starting after the `cancel()` returned is flagged.
    private func checkNothingAfterCancel(_ observed: RoundLog.Snapshot, events: [Event]) {
        var cancelledAt: [ChainID: Int] = [:]
        var startOf: [Int: Int] = [:]
        for record in observed.events {
            startOf[record.event] = record.start
            guard record.performed, case .cancel(let handle, _) = events[record.event] else { continue }
            let chain = plan.chain(of: handle)
            cancelledAt[chain] = min(cancelledAt[chain] ?? .max, record.end)
        }
        for (chain, end) in cancelledAt {
            for node in plan.chains[chain].nodes where plan.isStep[node] {
                let record = observed.nodes[node]
                guard record.bodyRuns > 0, record.bodyStartedAt > end else { continue }
                let parentSettled = plan.parentOf[node].map { observed.nodes[$0].settledAt } ?? 0
                guard let trigger = record.bodyTrigger, let released = startOf[trigger] else {
                    fail(
                        .noStepBodyAfterCancel,
                        "the body of n\(node) (\(plan.describe(node))) started after cancel() of c\(chain) returned, "
                            + "outside any event")
                    continue
                }
                if released < end, parentSettled > 0, parentSettled < end { continue }
                fail(
                    .noStepBodyAfterCancel,
                    "the body of n\(node) (\(plan.describe(node))) started at \(record.bodyStartedAt), after cancel() "
                        + "of c\(chain) returned at \(end); event \(trigger) (\(events[trigger])) released it, begun at "
                        + "\(released), its parent settled at \(parentSettled)")
            }
        }
        for read in observed.reads where !read.value {
            if let end = cancelledAt[read.chain], end < read.at {
                fail(.isCancelledSticks, "isCancelled of c\(read.chain) read false after cancel() of it returned")
            }
        }
    }

    /// Whatever is left alive once the test let go of everything.
    func checkEverythingFreed(_ world: World) {
        let live = world.liveObjects().filter { !released.contains(index.componentOfChain[world.chain(of: $0)]) }
        if !live.isEmpty {
            fail(.everythingFreedAtEnd, "still alive at the end: " + live.map(\.description).joined(separator: ", "))
        }
    }

    static func text(_ outcome: Outcome?) -> String { outcome.map(\.description) ?? "pending" }

    /// The members of `components` (most often one) in per-component `lists`.
    static func gather(_ lists: [[Int]], _ components: [Int]) -> [Int] {
        components.count == 1 ? lists[components[0]] : components.flatMap { lists[$0] }
    }

    struct Mismatch {
        let component: Int
        let rule: Rule
        /// When the implementation did what the model did not expect (settled, ran a body, called
        /// a closure), if it did something.
        let at: Int?
        let message: String
    }

    /// What a component's first divergence reports: the earliest thing the implementation did
    /// that the model did not expect (what followed from it is no news), or, if it only failed
    /// to do things, every one of them.
    static func firstDivergence(_ mismatches: [Mismatch]) -> [Mismatch] {
        let timed = mismatches.filter { $0.at != nil }
        guard let first = timed.min(by: { $0.at! < $1.at! }) else { return mismatches }
        return [first]
    }

    static func chains(of component: Int, _ index: PlanIndex) -> String {
        let chains = index.chainsOfComponent[component]
        return "chain" + (chains.count > 1 ? "s " : " ") + chains.map { "c\($0)" }.joined(separator: ", ")
    }
}

// MARK: - A round

/// One round: draw a plan and a schedule, build the world, run the schedule on one thread (the
/// model checked after every event) or on several at once (the model replayed in the order the
/// events started, exact for the components whose events did not overlap), settle or cancel
/// what remains, drop everything, and check.
final class ModelRound {
    let settings: ModelRunSettings
    let round: Int
    private var rng: SeededGenerator
    private let plan: GraphPlan
    private let index: PlanIndex
    private let world: World
    private let model: CancellationModel
    private let checker: RoundChecker
    private var events: [Event]
    private let threads: Int
    private var exact: [Bool]

    init(settings: ModelRunSettings, round: Int) {
        self.settings = settings
        self.round = round
        var rng = settings.generator(forRound: round)
        plan = PlanBuilder.build(using: &rng)
        index = PlanIndex(plan)
        events = Event.schedule(for: plan, index, using: &rng)
        threads = rng.chance(0.4) ? rng.int(2...4) : 1
        self.rng = rng
        world = World(plan: plan, index: index)
        model = CancellationModel(plan: plan, index: index)
        checker = RoundChecker(plan: plan, index: index)
        exact = Array(repeating: true, count: index.componentCount)
    }

    func run(into report: ModelRunReport) {
        let scheduled = events.count
        checker.compare(model, world, world.log.snapshot(), after: "building", in: allComponents, exact: exact)
        if threads == 1 {
            for number in 0..<scheduled { step(number) }
        } else {
            runConcurrently()
        }
        settleWhatRemains()
        for handle in world.heldHandles().shuffled(using: &rng) where rng.chance(0.5) {
            append(.cancel(handle, custom: false))
        }
        settleWhatRemains()
        for handle in world.heldHandles().shuffled(using: &rng) { append(.drop(handle)) }
        for task in world.heldResolvers { append(.abandon(task)) }
        checker.checkLog(world.log.snapshot(), events: events)
        checker.checkEverythingFreed(world)
        report.add(round: round, problems: checker.problems) {
            let mode = threads == 1 ? "one thread" : "\(threads) threads, exact for components \(exactComponents)"
            let schedule = events.enumerated().map { "  \($0.offset): \($0.element)" }.joined(separator: "\n")
            return
                "graph:\n\(plan)\nevents (\(mode); the first \(scheduled) scheduled, then the final ones):\n\(schedule)"
        }
    }

    private var allComponents: [Int] { Array(0..<index.componentCount) }

    private var exactComponents: String {
        exact.indices.filter { exact[$0] }.map { RoundChecker.chains(of: $0, index) }.joined(separator: "; ")
    }

    /// Runs event `number` on this thread and checks the model right after it.
    private func step(_ number: Int) {
        let event = events[number]
        let component = index.componentOfChain[chain(of: event)]
        let performed = world.run(event, number: number, thread: 0)
        guard performed || model.canPerform(event) else { return }  // nothing to do, nothing done
        let observed = world.log.snapshot()
        model.apply(event, in: component, observed: observed)
        checker.compare(model, world, observed, after: "event \(number) (\(event))", in: [component], exact: exact)
    }

    private func append(_ event: Event) {
        events.append(event)
        step(events.count - 1)
    }

    /// Fulfils (mostly) or rejects every task still pending and resolves every cleanup, until
    /// nothing new starts.
    private func settleWhatRemains() {
        for _ in 0..<50 {
            let tasks = world.heldResolvers
            let cleanups = world.heldCleanups
            if tasks.isEmpty && cleanups.isEmpty { return }
            for task in tasks { append(rng.chance(0.8) ? .fulfil(task) : .reject(task)) }
            for cleanup in cleanups { append(.resolveCleanup(cleanup)) }
        }
    }

    private func runConcurrently() {
        let assignments = events.indices.map { _ in rng.int(0...(threads - 1)) }
        let perThread = (0..<threads).map { thread in
            events.indices.filter { assignments[$0] == thread }.map { ($0, events[$0]) }
        }
        let seeds = (0..<threads).map { _ in rng.next() }
        let chains = events.map { chain(of: $0) }
        let world = self.world
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            var reads = SeededGenerator(seed: seeds[thread])
            for (number, event) in perThread[thread] {
                world.run(event, number: number, thread: thread)
                let isCancel: Bool
                if case .cancel = event { isCancel = true } else { isCancel = false }
                world.readIsCancelled(of: chains[number], all: isCancel, using: &reads)
            }
        }
        let observed = world.log.snapshot()
        exact = orderedComponents(observed.events)
        for record in observed.events.sorted(by: { $0.start < $1.start }) {
            let event = events[record.event]
            model.apply(event, in: index.componentOfChain[chain(of: event)], observed: observed)
        }
        checker.compare(model, world, observed, after: "the concurrent events", in: allComponents, exact: exact)
    }

    /// The components whose events did not overlap in time: the model predicts them exactly.
    private func orderedComponents(_ records: [RoundLog.EventRecord]) -> [Bool] {
        var intervals = Array(repeating: [(start: Int, end: Int)](), count: index.componentCount)
        for record in records {
            intervals[index.componentOfChain[chain(of: events[record.event])]].append((record.start, record.end))
        }
        return intervals.map { list in
            let sorted = list.sorted { $0.start < $1.start }
            return zip(sorted, sorted.dropFirst()).allSatisfy { $0.end < $1.start }
        }
    }

    private func chain(of event: Event) -> ChainID {
        switch event {
        case .cancel(let handle, _), .drop(let handle): return plan.chain(of: handle)
        case .fulfil(let task), .reject(let task), .abandon(let task): return plan.taskChain(task)
        case .resolveCleanup(let cleanup): return plan.chain(plan.cleanups[cleanup])
        }
    }
}

// MARK: - Reporting

/// Collects the rules broken over a run: how many rounds broke each, and the first example.
final class ModelRunReport {
    let settings: ModelRunSettings
    private var rounds = 0
    private var broken: [Rule: (rounds: Int, example: String)] = [:]

    init(settings: ModelRunSettings) {
        self.settings = settings
    }

    func add(round: Int, problems: [Rule: String], describe: () -> String) {
        rounds += 1
        guard !problems.isEmpty else { return }
        var description: String?
        for (rule, message) in problems {
            if let entry = broken[rule] {
                broken[rule] = (entry.rounds + 1, entry.example)
                continue
            }
            if description == nil { description = describe() }
            let example =
                "round \(round) (replay with \(settings.replay(round: round))):\n  \(message)\n\(description!)"
            broken[rule] = (1, example)
        }
    }

    func failures() -> [String] {
        broken.keys.sorted().map { rule in
            let entry = broken[rule]!
            return
                "[\(rule)] \(rule.statement)\nBroken in \(entry.rounds) of \(rounds) rounds (seed \(settings.seed)). "
                + "First: \(entry.example)"
        }
    }

    func printSummary() {
        print("Cancellation model: \(rounds) rounds, seed \(settings.seed)")
        for rule in broken.keys.sorted() {
            print("  \(rule): broken in \(broken[rule]!.rounds) rounds")
        }
    }
}

// MARK: - Timeouts

/// A task behind `task.map.timeout(seconds:scheduler:).tap.recover.ensure`, on a test scheduler:
/// the task answers before the deadline, never, or from another thread while this one moves
/// time past the deadline. When the timeout wins, the task's cancel
/// closure is called once, the output rejects with `PromiseTimeoutError`, `recover` replaces it
/// and the tail fulfils; when the task wins, nothing is cancelled. Everything is freed after.
struct TimeoutRound {
    let settings: ModelRunSettings
    let round: Int

    func run(into report: ModelRunReport) {
        var rng = settings.generator(forRound: round)
        let seconds = Double(rng.int(2...12)) / 1_000
        let answer = rng.int(0...2)  // 0: at once, 1: never, 2: around the deadline
        let calls = Counter()
        let seen = SeenOutcomes()
        let done = Handshake()
        let scheduler = TestScheduler()
        weak var weakTask: CancellablePromise<Int>?
        weak var weakTail: CancellablePromise<Int>?
        weak var weakBox: Tracked?
        var work: Resolver<Int>?
        do {
            let box = Tracked()
            weakBox = box
            let task = CancellablePromise<Int> { resolver in
                work = resolver
                return {
                    calls.increment()
                    withExtendedLifetime(box) {}
                }
            }
            task.pipe { seen.record(task: Outcome($0)) }
            weakTask = task
            let tail = task.map(on: nil) { $0 + 1 }
                .timeout(seconds: seconds, scheduler: scheduler)
                .tap(on: nil) { seen.record(timeoutOutput: Outcome($0)) }
                .recover(on: nil) { error -> Promise<Int> in
                    seen.record(recovered: ErrorKind(error))
                    return .value(-1)
                }
                .ensure(on: nil) {}
            tail.pipe {
                seen.record(tail: Outcome($0))
                done.signal()
            }
            weakTail = tail
        }
        var answeredInTime = true
        switch answer {
        case 0:
            work?.fulfill(1)
            scheduler.advance(by: seconds)
        case 1:
            scheduler.advance(by: seconds)
        default:
            // The answer races the timer: another thread fulfils while this one fires it.
            answeredInTime = runConcurrently([{ [work] in work?.fulfill(1) }]) { scheduler.advance(by: seconds) }
        }
        let settled = done.wait(seconds: 5)
        work = nil  // the work lets go of its resolver (a late answer holds its own until it lands)
        let outcomes = seen.snapshot()
        let timedOut = outcomes.timeoutOutput == .rejected(.timeout)
        let taskRejected = outcomes.task?.isRejected == true
        var problem: String?
        if !answeredInTime {
            problem = "the thread answering while the deadline passed did not return within 60 s"
        } else if !settled {
            problem = "the chain did not settle within 5 s after a \(seconds) s timeout"
        } else if answer == 1 && !timedOut {
            problem = "a task that never answers: the timeout output is \(RoundChecker.text(outcomes.timeoutOutput))"
        } else if timedOut && outcomes.task == nil {
            problem = "timed out, but the task was not cancelled: it is still pending"
        } else if calls.value != (timedOut && taskRejected ? 1 : 0) {
            problem =
                "the task's cancel closure was called \(calls.value) times; the timeout output is "
                + "\(RoundChecker.text(outcomes.timeoutOutput)), the task \(RoundChecker.text(outcomes.task))"
        } else if timedOut && (outcomes.recovered != .timeout || outcomes.tail != .fulfilled(-1)) {
            problem =
                "timed out, recover saw \(outcomes.recovered.map(\.description) ?? "nothing") and the tail is "
                + RoundChecker.text(outcomes.tail)
        } else if !timedOut && outcomes.tail != .fulfilled(2) {
            problem = "the task answered first, yet the tail is \(RoundChecker.text(outcomes.tail))"
        }
        var problems: [Rule: String] = [:]
        if let problem { problems[.timeoutIsRecoverable] = problem }
        // The timer lets go once it fired or was stopped; give a late answer time to land.
        let freed = eventually(seconds: 2) { weakTask == nil && weakTail == nil && weakBox == nil }
        if !freed {
            problems[.everythingFreedAtEnd] = "the timed chain is still alive 2 s after it settled"
        }
        report.add(round: round, problems: problems) {
            "timeout \(seconds) s, answer \(["at once", "never", "while the deadline passes"][answer])"
        }
    }
}

/// What the timeout round saw, from whichever thread.
final class SeenOutcomes: @unchecked Sendable {
    struct Values {
        var task: Outcome?
        var timeoutOutput: Outcome?
        var recovered: ErrorKind?
        var tail: Outcome?
    }

    private let lock = NSLock()
    private var values = Values()

    func record(task: Outcome) { lock.withLock { values.task = task } }
    func record(timeoutOutput: Outcome) { lock.withLock { values.timeoutOutput = timeoutOutput } }
    func record(recovered: ErrorKind) { lock.withLock { values.recovered = recovered } }
    func record(tail: Outcome) { lock.withLock { values.tail = tail } }
    func snapshot() -> Values { lock.withLock { values } }
}
