import CancellablePromiseKit
import Foundation
import PromiseCore

// The sequential model of the model-based cancellation test (CancellationModelTests.swift): the
// rules applied to a plan one event at a time, and what reference cycles may keep alive once the
// test holds nothing.

// MARK: - The model

/// The rules applied to a plan one event at a time, on one thread: which promises are settled
/// and how, which bodies ran, which cancel closures were called, which running bodies saw their
/// token cancelled, which chains say they are cancelled, what each wrapper's cancelPromise may be, and what can still cancel each chain.
///
/// Handlers are notified depth first, in the order they attached. Within one event the rules
/// leave the order open in a single place: when autoCancel cancels a branch of the winner's own
/// chain whose parent settled in that same event. There the model asks the log what the branch
/// did (ran its body or not, passed its parent's error or the cancellation) and checks that it
/// was one of the allowed outcomes.
final class CancellationModel {
    enum CancelFlag {
        case untouched
        case cancelled
        /// Cancelled through a link, a wrapper or autoCancel, or a settled input of a cancelled
        /// combinator: whether the context itself says cancelled is not specified.
        case unknown
    }

    enum Cleanup { case notStarted, pending, resolved }

    enum Cancellability {
        /// A held handle, or a link from a chain that has one, can cancel the chain.
        case certain
        /// Something might (a `then` body that will return its promise, another input of an
        /// autoCancel combinator): the checks stay silent.
        case possible
        /// Nothing can: its cancel closures must have been released.
        case impossible
    }

    /// Why a fact is what the model says: the rule that decided it (a settlement, a body run, a
    /// cancellation), or the rule that keeps it as it is (a tag: "this chain must not be
    /// cancelled now, because…"). Within an event the first reason is the closest cause.
    struct Reason {
        let rule: Rule
        let decided: Bool
        let event: Int
    }

    /// A fact the model predicts.
    enum Fact: Hashable {
        case outcome(NodeID)
        case body(NodeID)
        case closure(TaskID)
        case flag(ChainID)
        case cancelPromise(NodeID)
        case token(NodeID)
    }

    let plan: GraphPlan
    let index: PlanIndex
    private(set) var outcome: [Outcome?]
    private(set) var created: [Bool]
    private(set) var bodyRuns: [Int]
    /// How many times the `onCancel` handler a node's body (or a task's initialiser body)
    /// registered on `CancellationToken.current` may have run: once if the chain, or the node
    /// alone, was cancelled while the node's step was pending with its body run, or if the body
    /// ran in a chain already cancelled; never otherwise.
    private(set) var tokenHandlerRuns: [Set<Int>]
    private(set) var closureCalls: [Int]
    private(set) var flag: [CancelFlag]
    /// What each wrapper's cancelPromise may be now (`nil` for pending).
    private(set) var cancelPromise: [Set<Outcome?>]
    private var resolverHeld: [Bool]
    private var cleanup: [Cleanup]
    private var nodeHeld: [Bool]
    private var contextHeld: [Bool]
    private var reacted: [Bool]
    private var waitingOn: [NodeID?]
    /// A pending promise the chain's cancellation will reject once an ensureThen upstream passes
    /// it on.
    private var deferred: [ErrorKind?]
    /// The chain's pending work was cancelled (explicitly or through a link or autoCancel).
    private var workCancelled: [Bool]
    private var why: [Fact: Reason] = [:]
    private var eventNumber = 0
    private var observed: RoundLog.Snapshot?
    /// What can cancel each chain now; refreshed after every event.
    private(set) var cancellability: [Cancellability] = []

    init(plan: GraphPlan, index: PlanIndex) {
        self.plan = plan
        self.index = index
        let nodeCount = plan.nodes.count
        created = plan.nodes.indices.map { plan.existsAfterBuild($0) }
        outcome = Array(repeating: nil, count: nodeCount)
        reacted = Array(repeating: false, count: nodeCount)
        bodyRuns = Array(repeating: 0, count: nodeCount)
        tokenHandlerRuns = Array(repeating: [0], count: nodeCount)
        waitingOn = Array(repeating: nil, count: nodeCount)
        deferred = Array(repeating: nil, count: nodeCount)
        cancelPromise = Array(repeating: [nil], count: nodeCount)
        nodeHeld = plan.nodes.indices.map { plan.existsAfterBuild($0) && plan.nodes[$0].held }
        contextHeld = plan.chains.map(\.contextHeld)
        closureCalls = Array(repeating: 0, count: plan.tasks.count)
        resolverHeld = plan.tasks.map { plan.existsAfterBuild($0.node) }
        cleanup = Array(repeating: .notStarted, count: plan.cleanups.count)
        flag = Array(repeating: .untouched, count: plan.chains.count)
        workCancelled = Array(repeating: false, count: plan.chains.count)
        cancellability = Array(repeating: .impossible, count: plan.chains.count)
        settleCancelPromisesOfUnreachableWrappers(in: Array(0..<index.componentCount))
    }

    /// Why `fact` is what the model says, for a report.
    func reason(for fact: Fact) -> Reason? { why[fact] }

    /// Whether a reason was recorded by the last event.
    func isRecent(_ reason: Reason) -> Bool { reason.event == eventNumber }

    // MARK: Events

    /// Applies `event`, which only touches `component`, to the model.
    func apply(_ event: Event, in component: Int, observed: RoundLog.Snapshot) {
        self.observed = observed
        eventNumber += 1
        switch event {
        case .fulfil(let task):
            settleTask(task, .fulfilled(plan.value(ofTask: task)))
        case .reject(let task):
            settleTask(task, .rejected(.task(task)))
        case .abandon(let task):
            resolverHeld[task] = false
        case .resolveCleanup(let index):
            resolveCleanup(index)
        case .cancel(let handle, let custom):
            guard isHeld(handle) else { break }
            let chain = plan.chain(of: handle)
            cancelExplicitly(chain, with: custom ? .chainCancel(chain) : .cancelled)
        case .drop(.node(let node)):
            nodeHeld[node] = false
        case .drop(.context(let chain)):
            contextHeld[chain] = false
        }
        settleCancelPromisesOfUnreachableWrappers(in: [component])
        self.observed = nil
    }

    /// Whether the event's subject is there (the resolver, the cleanup, the handle).
    func canPerform(_ event: Event) -> Bool {
        switch event {
        case .fulfil(let task), .reject(let task), .abandon(let task):
            return created[plan.tasks[task].node] && resolverHeld[task]
        case .resolveCleanup(let index): return cleanup[index] == .pending
        case .cancel(let handle, _), .drop(let handle): return isHeld(handle)
        }
    }

    private func isHeld(_ handle: Handle) -> Bool {
        switch handle {
        case .node(let node): return created[node] && nodeHeld[node]
        case .context(let chain): return contextHeld[chain]
        }
    }

    private func settleTask(_ task: TaskID, _ result: Outcome) {
        let node = plan.tasks[task].node
        guard created[node], resolverHeld[task] else { return }
        resolverHeld[task] = false
        let handleless = cancellability[plan.chain(node)] == .impossible
        settle(node, result, because: handleless ? .workSettlesWithoutHandles : .model)
    }

    private func resolveCleanup(_ cleanupIndex: Int) {
        guard cleanup[cleanupIndex] == .pending else { return }
        cleanup[cleanupIndex] = .resolved
        let node = plan.cleanups[cleanupIndex]
        guard outcome[node] == nil, let parent = plan.parentOf[node], let parentOutcome = outcome[parent]
        else { return }
        if let error = deferred[node] {
            settle(node, .rejected(error), because: .ensureThenOrder)
        } else {
            pass(parentOutcome, to: node, from: parent)
        }
    }

    // MARK: Settling and flowing down

    /// Settles `node` and, unless `notify` is false, notifies what depends on it at once.
    private func settle(_ node: NodeID, _ result: Outcome, because rule: Rule, notify: Bool = true) {
        guard outcome[node] == nil else { return }
        outcome[node] = result
        decide(.outcome(node), rule)
        if case .wrapper = plan.kind(node), cancelPromise[node].contains(nil) {
            cancelPromise[node] = [.fulfilled(0)]
            decide(.cancelPromise(node), .wrapperCancelPromise)
        }
        if notify { notifyDependents(of: node) }
    }

    private func notifyDependents(of node: NodeID) {
        for dependent in index.dependents[node] {
            switch plan.kind(dependent) {
            case .combinator: inputSettled(dependent, input: node)
            case .wrapper: pass(outcome[node]!, to: dependent, from: node)
            default: react(dependent)
            }
        }
        for step in index.stepsReturning[node] where waitingOn[step] == node {
            waitingOn[step] = nil
            linkEnded(returned: node)
            pass(outcome[node]!, to: step, from: node)
        }
    }

    /// Settles `node` with what flowed from `source`: the rule that decided it this event stays
    /// (a tag saying why the node should not have settled otherwise), else the source's rule.
    private func pass(_ result: Outcome, to node: NodeID, from source: NodeID) {
        settle(node, result, because: reasonOfThisEvent(.outcome(node)) ?? flowing(from: source))
    }

    /// Records the rule that decided a fact; it takes precedence over tags.
    private func decide(_ fact: Fact, _ rule: Rule) {
        why[fact] = Reason(rule: rule, decided: true, event: eventNumber)
    }

    private func reasonOfThisEvent(_ fact: Fact) -> Rule? {
        guard let reason = why[fact], reason.event == eventNumber else { return nil }
        return reason.rule
    }

    /// The rule a result carries down the chain: the cancellation or liveness rule that decided
    /// it, if any.
    private func flowing(from node: NodeID) -> Rule {
        guard let rule = why[.outcome(node)]?.rule else { return .model }
        switch rule {
        case .cancelRejectsPending, .linkCancelsWaitedPromise, .linkEndsWhenSettled, .chainsAreNotJoined,
            .autoCancelCancelsLosers, .autoCancelResultCancelsInputs, .wrapperCancelsInner, .ensureThenOrder,
            .workSettlesWithoutHandles:
            return rule
        default:
            return .model
        }
    }

    /// A node whose parent settled runs its body (if it is an observer, or a step still pending
    /// whose parent fulfilled) and settles.
    private func react(_ node: NodeID) {
        guard created[node], !reacted[node], let parent = plan.parentOf[node], let parentOutcome = outcome[parent]
        else { return }
        reacted[node] = true
        let inherited = flowing(from: parent)
        switch plan.kind(node) {
        case .ensure, .tap:
            runBody(node, because: .observersOnceInOrder)
            pass(parentOutcome, to: node, from: parent)
        case .catchAll:
            if parentOutcome.isRejected { runBody(node, because: .observersOnceInOrder) }
        case .ensureThen(_, let cleanupIndex):
            runBody(node, because: .ensureThenOrder)
            cleanup[cleanupIndex] = .pending
        case .map(_, let throwing):
            guard outcome[node] == nil else { return }
            guard case .fulfilled(let value) = parentOutcome else {
                return pass(parentOutcome, to: node, from: parent)
            }
            runBody(node, because: inherited)
            let result: Outcome = throwing ? .rejected(.step(node)) : .fulfilled(GraphPlan.mapped(value, by: node))
            pass(result, to: node, from: parent)
        case .get, .done:
            guard outcome[node] == nil else { return }
            guard case .fulfilled = parentOutcome else { return pass(parentOutcome, to: node, from: parent) }
            runBody(node, because: inherited)
            pass(plan.isIntPromise(node) ? parentOutcome : .fulfilled(0), to: node, from: parent)
        case .then(_, let target):
            guard outcome[node] == nil else { return }
            guard case .fulfilled = parentOutcome else { return pass(parentOutcome, to: node, from: parent) }
            runBody(node, because: inherited)
            followReturnedPromise(of: node, target)
        case .recover:
            guard outcome[node] == nil else { return }
            guard case .rejected(let error) = parentOutcome else {
                return pass(parentOutcome, to: node, from: parent)
            }
            if error == .cancelled || error == .chainCancel(plan.chain(node)) {
                decide(.body(node), reasonOfThisEvent(.body(node)) ?? .recoverSkipsOwnCancellation)
                pass(parentOutcome, to: node, from: parent)
            } else {
                runBody(node, because: .recoverSkipsOwnCancellation)
                pass(.fulfilled(GraphPlan.recovered(by: node)), to: node, from: parent)
            }
        case .task, .combinator, .wrapper:
            break
        }
    }

    private func runBody(_ node: NodeID, because rule: Rule) {
        bodyRuns[node] += 1
        decide(.body(node), reasonOfThisEvent(.body(node)) ?? rule)
        // The body reads its token: already cancelled in a cancelled chain (an observer passing
        // the cancellation on); in a chain cancelled through a link, a wrapper or autoCancel,
        // whether the context itself says cancelled is not specified.
        switch flag[plan.chain(node)] {
        case .untouched: tokenHandlerRuns[node] = [0]
        case .cancelled: tokenHandlerRuns[node] = [1]
        case .unknown: tokenHandlerRuns[node] = [0, 1]
        }
        decide(.token(node), .runningBodySeesTheCancel)
    }

    /// The node is pending with its token read (its body ran, or it is a started task, whose
    /// initialiser's body read it), and is cancelled now: its handler runs.
    private func cancelToken(ofPending node: NodeID) {
        let readIt: Bool
        if case .task = plan.kind(node) { readIt = created[node] } else { readIt = bodyRuns[node] > 0 }
        guard readIt, plan.hasOutcome[node], outcome[node] == nil else { return }
        tokenHandlerRuns[node] = [1]
        decide(.token(node), .runningBodySeesTheCancel)
    }

    /// The body of the `then` at `node` ran: it returned a settled promise (which links nothing)
    /// or a pending one the step now waits on.
    private func followReturnedPromise(of node: NodeID, _ target: GraphPlan.ThenTarget) {
        let returned: NodeID
        switch target {
        case .promise(let promise):
            returned = promise
        case .lazyTask(let task):
            returned = plan.tasks[task].node
            created[returned] = true
            resolverHeld[task] = true
            nodeHeld[returned] = plan.nodes[returned].held
        }
        if let settled = outcome[returned] {
            linkEnded(returned: returned)
            tag(plan.chain(node), .linkEndsWhenSettled)
            pass(settled, to: node, from: returned)
        } else {
            waitingOn[node] = returned
            tag(plan.chain(node), .chainsAreNotJoined)
        }
    }

    /// The promise a `then` returned settled: from now on the outer chain's cancellation must
    /// leave its chain alone.
    private func linkEnded(returned: NodeID) {
        tag(plan.chain(returned), .linkEndsWhenSettled)
    }

    /// Records that `rule` is what keeps the chain as it is now (not cancelled, its pending
    /// tasks' closures not called, its pending promises pending), and the chains its cancellation
    /// would reach. A failure to stay so names the rule, unless something decided it since.
    private func tag(_ chain: ChainID, _ rule: Rule) {
        var chains = [chain]
        var seen: Set<ChainID> = [chain]
        while let next = chains.popLast() {
            var facts: [Fact] = []
            if flag[next] == .untouched { facts.append(.flag(next)) }
            for task in index.tasksOfChain[next] where outcome[plan.tasks[task].node] == nil {
                facts.append(.closure(task))
            }
            for node in plan.chains[next].nodes where outcome[node] == nil {
                facts.append(.outcome(node))
                if !reacted[node] { facts.append(.body(node)) }
                if let promise = waitingOn[node], seen.insert(plan.chain(promise)).inserted {
                    chains.append(plan.chain(promise))
                }
            }
            for fact in facts {
                if let reason = why[fact] {
                    let (old, new) = (Self.tagStrength(reason.rule), Self.tagStrength(rule))
                    if reason.decided || new < old || (new == old && reason.event == eventNumber) { continue }
                }
                why[fact] = Reason(rule: rule, decided: false, event: eventNumber)
            }
        }
    }

    /// Which tag names the closer cause when two apply: a link that joins chains explains more than
    /// a combinator that merely leaves its inputs alone. A weaker tag never replaces a stronger
    /// one; of equal ones, the first of an event and the latest across events count.
    private static func tagStrength(_ rule: Rule) -> Int {
        switch rule {
        case .linkEndsWhenSettled, .chainsAreNotJoined: return 3
        case .autoCancelSparesWinner: return 2
        case .wrapperCancelsInner: return 1
        default: return 0
        }
    }

    // MARK: Combinators

    private func inputSettled(_ node: NodeID, input: NodeID) {
        guard outcome[node] == nil, case .combinator(let combinator, let inputs, _) = plan.kind(node),
            let result = outcome[input]
        else { return }
        let results = inputs.map { outcome[$0] }
        switch combinator {
        case .race:
            settle(node, result, because: .combinatorSettles)
            afterWinning(node, winner: input)
        case .raceFulfilled:
            if case .fulfilled = result {
                settle(node, result, because: .combinatorSettles)
                afterWinning(node, winner: input)
            } else if results.allSatisfy({ $0?.isRejected == true }) {
                settle(node, .rejected(.noWinner), because: .combinatorSettles)
            }
        case .whenFulfilled:
            if result.isRejected {
                settle(node, result, because: .combinatorSettles)
                afterWinning(node, winner: input)
            } else {
                let values = results.compactMap { result -> Int? in
                    if case .fulfilled(let value)? = result { return value }
                    return nil
                }
                if values.count == inputs.count {
                    settle(node, .fulfilled(GraphPlan.folded(values)), because: .combinatorSettles)
                }
            }
        case .whenResolved:
            let settled = results.compactMap { $0 }
            if settled.count == inputs.count {
                settle(node, .fulfilled(GraphPlan.folded(results: settled)), because: .combinatorSettles)
            }
        }
    }

    /// `winner` settled the combinator: with autoCancel, every other input still pending is
    /// cancelled, never the winner nor its chain; without, nothing is.
    private func afterWinning(_ node: NodeID, winner: NodeID) {
        guard case .combinator(_, let inputs, let autoCancel) = plan.kind(node) else { return }
        guard autoCancel else { return leaveInputsAlone(of: node) }
        let winnerChain = plan.chain(winner)
        tag(winnerChain, .autoCancelSparesWinner)
        let losers = Set(inputs).subtracting([winner]).sorted()
        for loser in losers where plan.chain(loser) == winnerChain {
            cancelBranch(loser)
        }
        for loser in losers where plan.chain(loser) != winnerChain && outcome[loser] == nil {
            cancelIndirectly(plan.chain(loser), because: .autoCancelCancelsLosers)
        }
        for loser in losers where plan.chain(loser) != winnerChain && flag[plan.chain(loser)] == .untouched {
            flag[plan.chain(loser)] = .unknown  // a settled loser: cancelling it may mark its context
        }
    }

    private func leaveInputsAlone(of node: NodeID) {
        guard case .combinator(_, let inputs, _) = plan.kind(node) else { return }
        for input in inputs { tag(plan.chain(input), .autoCancelResultCancelsInputs) }
    }

    /// autoCancel of a loser that is a branch of the winner's own chain: its own pending work is
    /// cancelled, the chain (the winner's) is not.
    private func cancelBranch(_ loser: NodeID) {
        guard outcome[loser] == nil else { return }
        cancelToken(ofPending: loser)
        if let returned = waitingOn[loser] {
            waitingOn[loser] = nil
            settle(loser, .rejected(.cancelled), because: .autoCancelCancelsLosers)
            cancelIndirectly(plan.chain(returned), because: .autoCancelCancelsLosers)
            return
        }
        guard !reacted[loser], let parent = plan.kind(loser).parent, let parentOutcome = outcome[parent] else {
            reacted[loser] = true
            return settle(loser, .rejected(.cancelled), because: .autoCancelCancelsLosers)
        }
        // The parent settled in this very event: the branch may have reacted before the
        // combinator's autoCancel reached it. Follow what it did, if that was allowed.
        switch parentOutcome {
        case .fulfilled:
            if (observed?.nodes[loser].bodyRuns ?? 0) > 0 {
                react(loser)
                cancelBranch(loser)
            } else {
                reacted[loser] = true
                decide(.body(loser), .autoCancelCancelsLosers)
                settle(loser, .rejected(.cancelled), because: .autoCancelCancelsLosers)
            }
        case .rejected(let error):
            reacted[loser] = true
            let allowed: [Outcome] = [.rejected(error), .rejected(.cancelled)]
            let seen = observed?.nodes[loser].outcome.flatMap { allowed.contains($0) ? $0 : nil }
            settle(loser, seen ?? .rejected(.cancelled), because: .autoCancelCancelsLosers)
        }
    }

    // MARK: Cancelling

    private func cancelExplicitly(_ chain: ChainID, with error: ErrorKind) {
        guard flag[chain] != .cancelled else { return }
        flag[chain] = .cancelled
        decide(.flag(chain), .isCancelledSticks)
        workCancelled[chain] = true
        cancelPending(chain, with: error, because: .cancelRejectsPending, closures: .cancelCallsClosureOnce)
    }

    /// Cancelled through a link, a wrapper or autoCancel: all of its pending work (the chains
    /// cancelled this way are paths, so that is the whole chain).
    private func cancelIndirectly(_ chain: ChainID, because rule: Rule) {
        guard !workCancelled[chain] else { return }
        workCancelled[chain] = true
        if flag[chain] == .untouched { flag[chain] = .unknown }
        cancelPending(chain, with: .cancelled, because: rule, closures: rule)
    }

    /// Rejects the chain's pending promises (those held back by an ensureThen later, when it
    /// passes the cancellation on), calls its pending tasks' cancel closures, then cancels what
    /// the chain's cancellation reaches, and only then notifies the handlers.
    private func cancelPending(_ chain: ChainID, with error: ErrorKind, because rule: Rule, closures: Rule) {
        var rejected: [NodeID] = []
        var returned: [NodeID] = []
        var wrappers: [NodeID] = []
        var combinators: [NodeID] = []
        for node in plan.chains[chain].nodes {
            for step in index.stepsReturning[node] where reacted[step] && plan.chain(step) != chain {
                tag(plan.chain(step), .chainsAreNotJoined)  // it waits, or waited, on this chain
            }
        }
        for node in plan.chains[chain].nodes where created[node] && outcome[node] == nil && deferred[node] == nil {
            cancelToken(ofPending: node)
            if isHeldBackByEnsureThen(node) {
                if !reacted[node] { decide(.body(node), .ensureThenOrder) }
                if plan.hasOutcome[node] {
                    deferred[node] = error
                    decide(.outcome(node), .ensureThenOrder)
                }
                continue
            }
            if case .catchAll = plan.kind(node) { continue }
            if let promise = waitingOn[node] {
                waitingOn[node] = nil
                returned.append(promise)
            }
            switch plan.kind(node) {
            case .task(let task):
                closureCalls[task] += 1
                decide(.closure(task), closures)
            case .wrapper:
                var allowed: Set<Outcome?> = [.rejected(.cancelled), .rejected(error)]
                if cancelPromise[node].contains(.fulfilled(0)) { allowed.insert(.fulfilled(0)) }
                cancelPromise[node] = allowed
                decide(.cancelPromise(node), .wrapperCancelPromise)
                wrappers.append(node)
            case .combinator(_, _, let autoCancel):
                if autoCancel { combinators.append(node) } else { leaveInputsAlone(of: node) }
            default:
                if plan.isStep[node], !reacted[node] { decide(.body(node), .noStepBodyAfterCancel) }
            }
            settle(node, .rejected(error), because: rule, notify: false)
            rejected.append(node)
        }
        for promise in returned {
            tagOtherChainsWaiting(on: promise, besides: chain)
            cancelIndirectly(plan.chain(promise), because: .linkCancelsWaitedPromise)
        }
        for wrapper in wrappers {
            guard case .wrapper(let inner, let style) = plan.kind(wrapper) else { continue }
            if style == .whilePlain {
                tag(plan.taskChain(inner), .wrapperCancelsInner)
            } else {
                cancelIndirectly(plan.taskChain(inner), because: .wrapperCancelsInner)
            }
        }
        for combinator in combinators {
            guard case .combinator(_, let inputs, _) = plan.kind(combinator) else { continue }
            let chains = Set(inputs.map { plan.chain($0) })
            for input in Set(inputs).sorted() where outcome[input] == nil {
                cancelIndirectly(plan.chain(input), because: .autoCancelResultCancelsInputs)
            }
            for chain in chains where flag[chain] == .untouched { flag[chain] = .unknown }
        }
        for node in rejected { notifyDependents(of: node) }
    }

    /// Whether the node is an ensureThen, or downstream of one in its chain, that has not passed
    /// anything on.
    func isHeldBackByEnsureThen(_ node: NodeID) -> Bool {
        for candidate in [node] + index.ancestors[node] {
            if case .ensureThen = plan.kind(candidate), outcome[candidate] == nil { return true }
        }
        return false
    }

    /// Whether the node waits, in its chain or through combinators, wrappers and links, on an
    /// ensureThen that has not passed anything on (to name the rule behind a divergence).
    func dependsOnAPendingEnsureThen(_ node: NodeID) -> Bool {
        guard outcome[node] == nil else { return false }
        if isHeldBackByEnsureThen(node) { return true }
        var upstream: [NodeID] = [node] + index.ancestors[node]
        for member in [node] + index.ancestors[node] {
            if let promise = waitingOn[member] { upstream.append(promise) }
            switch plan.kind(member) {
            case .combinator(_, let inputs, _): upstream += inputs
            case .wrapper(let inner, _): upstream.append(plan.tasks[inner].node)
            default: break
            }
        }
        return upstream.dropFirst(index.ancestors[node].count + 1).contains { dependsOnAPendingEnsureThen($0) }
    }

    /// Another chain waiting on a promise that is being cancelled is not joined to the cancelled
    /// chain: only its waiting step hears of it.
    private func tagOtherChainsWaiting(on promise: NodeID, besides chain: ChainID) {
        for step in index.stepsReturning[promise] where waitingOn[step] == promise && plan.chain(step) != chain {
            tag(plan.chain(step), .chainsAreNotJoined)
        }
    }

    // MARK: What can still cancel a chain

    /// Recomputes `cancellability` for the chains of `components` (edges never leave one).
    private func updateCancellability(in components: [Int]) {
        let count = plan.chains.count
        var certain = Array(repeating: false, count: count)
        var possible = Array(repeating: false, count: count)
        let nodes = RoundChecker.gather(index.nodesOfComponent, components)
        for node in nodes where created[node] && nodeHeld[node] { certain[plan.chain(node)] = true }
        for chain in RoundChecker.gather(index.chainsOfComponent, components) where contextHeld[chain] {
            certain[chain] = true
        }
        var edges: [(from: ChainID, to: ChainID)] = []
        for node in nodes where created[node] && outcome[node] == nil {
            let chain = plan.chain(node)
            if let promise = waitingOn[node] {
                edges.append((chain, plan.chain(promise)))
            } else if !reacted[node], let held = index.heldByBody[node] {
                possible[held] = true  // the body holds the promise it will return
            }
            if let inner = index.cancelsInnerChain[node], cancelPromise[node].contains(nil) {
                edges.append((chain, inner))
            }
            for input in index.cancelsInputChains[node] { edges.append((chain, input)) }
            for input in index.inputsHeldUntilSettled[node] where outcome[input] == nil {
                certain[plan.chain(input)] = true  // it holds its pending inputs' handles until it settles
            }
        }
        Self.spread(&certain, along: edges)
        for chain in 0..<count where certain[chain] { possible[chain] = true }
        Self.spread(&possible, along: edges)
        for chain in RoundChecker.gather(index.chainsOfComponent, components) {
            cancellability[chain] = certain[chain] ? .certain : possible[chain] ? .possible : .impossible
        }
    }

    private static func spread(_ marked: inout [Bool], along edges: [(from: ChainID, to: ChainID)]) {
        var changed = true
        while changed {
            changed = false
            for edge in edges where marked[edge.from] && !marked[edge.to] {
                marked[edge.to] = true
                changed = true
            }
        }
    }

    /// Refreshes `cancellability`; a pending wrapper nothing can cancel any more has its
    /// cancelPromise fulfilled.
    private func settleCancelPromisesOfUnreachableWrappers(in components: [Int]) {
        updateCancellability(in: components)
        for wrapper in index.wrappers where outcome[wrapper] == nil && cancelPromise[wrapper].contains(nil) {
            switch cancellability[plan.chain(wrapper)] {
            case .impossible: cancelPromise[wrapper] = [.fulfilled(0)]
            case .possible: cancelPromise[wrapper] = [nil, .fulfilled(0)]
            case .certain: break
            }
            decide(.cancelPromise(wrapper), .wrapperCancelPromise)
        }
    }
}

// MARK: - What reference cycles keep alive

/// What may stay alive in a component the test holds nothing of any more (nothing can settle it:
/// no resolver, no cleanup; nothing outside can cancel it): what is on a cycle of references,
/// and what such a cycle reaches. Everything else must have been freed.
///
/// The references are those the rules imply, worked out from what the log says happened
/// (created, settled, ran), so they hold in any round, whatever the threads did:
/// - a `CancellablePromise` is a handle of its chain and holds its promise;
/// - a chain with a handle lists its pending promises: their entries hold the promises, the
///   pending tasks' cancel closures, the `CancellablePromise` a pending `then` waits on (a link,
///   through which it holds that chain), a pending wrapper's cancel closure (which holds its
///   cancelPromise) and link to the inner promise it returned, and the inputs of a pending
///   combinator with autoCancel (its cancel closure);
/// - a pending promise holds its handlers: what depends on it (with the bodies that have not
///   run) and the steps waiting on it;
/// - a race, race(fulfilled:) or when(fulfilled:) with autoCancel holds its inputs (each a
///   handle of its chain) until it settles (to cancel the losers then), even when nothing holds its result;
/// - a `then` body that has not run holds the promise it will return (a handle of its chain);
/// - a wrapper's pending cancelPromise holds the inner promise it cancels with
///   `when(_:while:autoCancel:)` until that settles; a cancel closure that rejects its task holds
///   the task's resolver.
///
/// Two cycles come out of these: a pending autoCancel combinator whose inputs can never settle
/// (it holds their chains, their pending promises hold it), which the rules document; and a
/// `then` body that holds a promise its own step waits on, upstream, which can never settle (the
/// test's closure captured it: no library can free that). A combinator that settled, or never
/// had autoCancel, is on no cycle.
struct KeptByCycles {
    private enum Vertex: Hashable {
        /// The `CancellablePromise` (or finalizer) of a node.
        case promise(NodeID)
        /// The promise underneath it.
        case underlying(NodeID)
        /// A handle of the chain: its context, with the storage listing its pending entries.
        case context(ChainID)
        case body(NodeID)
        case closure(TaskID)
        case cancelPromise(NodeID)
        /// The inputs a combinator with autoCancel holds.
        case inputs(NodeID)
    }

    private let kept: Set<Vertex>

    init(plan: GraphPlan, index: PlanIndex, observed: RoundLog.Snapshot, component: Int) {
        var edges: [Vertex: [Vertex]] = [:]
        func edge(_ from: Vertex, _ to: Vertex) { edges[from, default: []].append(to) }
        func isPending(_ node: NodeID) -> Bool {
            let record = observed.nodes[node]
            guard record.created else { return false }
            return plan.hasOutcome[node] ? record.settleCount == 0 : record.bodyRuns == 0
        }
        /// The promise a pending `then` whose body ran waits on.
        func waitedOn(by node: NodeID) -> NodeID? {
            guard isPending(node), observed.nodes[node].bodyRuns > 0, case .then(_, let target) = plan.kind(node)
            else { return nil }
            switch target {
            case .promise(let promise): return promise
            case .lazyTask(let task): return plan.tasks[task].node
            }
        }
        for node in index.nodesOfComponent[component] where observed.nodes[node].created {
            let chain = plan.chain(node)
            edge(.promise(node), .context(chain))
            edge(.promise(node), .underlying(node))
            guard isPending(node) else { continue }
            edge(.context(chain), .underlying(node))
            if let returned = waitedOn(by: node), isPending(returned) {
                // The link holds the returned promise, a handle of its chain.
                edge(.context(chain), .promise(returned))
            }
            switch plan.kind(node) {
            case .task(let task):
                edge(.context(chain), .closure(task))
                if plan.tasks[task].closureRejectsToo { edge(.closure(task), .underlying(node)) }
            case .then(_, .promise(let target)) where observed.nodes[node].bodyRuns == 0:
                edge(.body(node), .promise(target))
            case .wrapper(let inner, let style):
                edge(.context(chain), .cancelPromise(node))
                let innerNode = plan.tasks[inner].node
                guard isPending(innerNode) else { break }
                switch style {
                case .returnsInner: edge(.context(chain), .promise(innerNode))
                case .whileAutoCancel: edge(.cancelPromise(node), .promise(innerNode))
                case .whilePlain: break
                }
            case .combinator(let combinator, let inputs, true):
                edge(.context(chain), .inputs(node))
                if combinator != .whenResolved { edge(.underlying(node), .inputs(node)) }
                for input in inputs { edge(.inputs(node), .promise(input)) }
            default:
                break
            }
            for dependent in index.dependents[node] {
                edge(.underlying(node), .underlying(dependent))
                if plan.parentOf[dependent] == node { edge(.underlying(node), .body(dependent)) }
            }
            for step in index.stepsReturning[node] where waitedOn(by: step) == node {
                edge(.underlying(node), .underlying(step))
            }
        }
        func reach(from starts: [Vertex]) -> Set<Vertex> {
            var seen: Set<Vertex> = []
            var stack = starts
            while let vertex = stack.popLast() {
                if seen.insert(vertex).inserted { stack += edges[vertex] ?? [] }
            }
            return seen
        }
        let onCycles = edges.keys.filter { reach(from: edges[$0]!).contains($0) }
        kept = reach(from: onCycles)
    }

    /// Whether the object may still be alive.
    func keeps(_ object: World.TrackedObject) -> Bool {
        switch object {
        case .promise(let node): return kept.contains(.promise(node))
        case .combinedResult: return false
        case .cancelPromise(let node): return kept.contains(.cancelPromise(node))
        case .context(let chain): return kept.contains(.context(chain))
        case .cancelClosure(let task): return kept.contains(.closure(task))
        case .body(let node): return kept.contains(.body(node))
        }
    }
}
