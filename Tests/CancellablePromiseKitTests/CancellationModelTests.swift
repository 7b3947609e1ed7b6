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
//
// A failure names the rule it broke, with the seed and round that show it. To replay one round:
//
//     CPK_MODEL_SEED=<seed> CPK_MODEL_FIRST_ROUND=<round> CPK_MODEL_ROUNDS=1 \
//         swift test --filter CancellationModelTests
//
// Reading order: the rules, the plan of a round and its builder, the schedule, the log and the
// world that runs a round, the model, the checks, and the driver.

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

    /// Timeouts cost wall time, so they get a few rounds of their own: a task that never answers
    /// (or answers around the deadline) behind a cancellable chain with `timeout(seconds:)`, and
    /// a `recover` after it.
    func testTimeoutCancelsTheSourceTaskAndIsRecoverable() {
        let settings = ModelRunSettings.fromEnvironment(defaultRounds: 40)
        let report = ModelRunReport(settings: settings)
        for round in settings.roundRange.prefix(40) {
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
        case .model:
            "The chain settles as the sequential model predicts (a divergence no more specific rule names)."
        }
    }
}

// MARK: - The plan of a round

typealias NodeID = Int
typealias TaskID = Int
typealias ChainID = Int

/// A round's graph as plain data: what the builder drew, what the model predicts from and what
/// the world instantiates. Every node is a `CancellablePromise<Int>` except `done` (a
/// `CancellablePromise<Void>`) and `catch` (a `CancellableFinalizer`). Node numbers follow
/// creation order, so a node's parent and inputs always come first.
struct GraphPlan {
    /// How a chain (one `CancelContext`) came to be.
    enum ChainRole {
        /// A task the test starts up front.
        case head
        /// A task (and maybe a map) only ever returned by `then` bodies.
        case target
        /// A task a `then` body starts.
        case lazy
        /// The task a wrapper's body starts.
        case inner
        case combinator
        case wrapper

        /// Chains the builder grows: started up front, by a combinator or by a wrapper.
        var isOpen: Bool {
            switch self {
            case .head, .combinator, .wrapper: return true
            case .target, .lazy, .inner: return false
            }
        }
    }

    enum ThenTarget {
        /// The body returns this existing promise (of a target chain), maybe shared.
        case promise(NodeID)
        /// The body starts this task and returns it.
        case lazyTask(TaskID)
    }

    enum Combinator: CaseIterable {
        case race, raceFulfilled, whenFulfilled, whenResolved
    }

    enum WrapperStyle: CaseIterable {
        /// The body returns the inner task's cancellable promise.
        case returnsInner
        /// The body returns `when(inner, while: cancelPromise, autoCancel: true)`.
        case whileAutoCancel
        /// The body returns `when(inner.promise, while: cancelPromise)`.
        case whilePlain
    }

    enum Kind {
        case task(TaskID)
        case map(NodeID, throwing: Bool)
        case get(NodeID)
        case done(NodeID)
        case then(NodeID, ThenTarget)
        case recover(NodeID, allErrors: Bool, returnsCancellable: Bool)
        case ensure(NodeID)
        case ensureThen(NodeID, cleanup: Int)
        case tap(NodeID)
        case catchAll(NodeID)
        case combinator(Combinator, inputs: [NodeID], autoCancel: Bool)
        case wrapper(inner: TaskID, WrapperStyle)
    }

    struct Node {
        let kind: Kind
        let chain: ChainID
        /// Whether the test holds this node's promise (or finalizer) when it is created.
        var held = false
    }

    struct Chain {
        let role: ChainRole
        var nodes: [NodeID] = []
        /// No node may be added: the chain belongs to an autoCancel combinator's input.
        var sealed = false
        /// Built as `head`, `head.map`, `head.then { new task }` raced against each other.
        var isBranchPattern = false
        /// Whether the test holds the chain's `CancelContext`.
        var contextHeld = false
    }

    struct Task {
        let node: NodeID
        /// The cancel closure also rejects the task's promise with the task's own error (which
        /// must not change an outcome the cancellation already settled).
        let closureRejectsToo: Bool
    }

    private(set) var nodes: [Node] = []
    var chains: [Chain] = []
    var tasks: [Task] = []
    // Per node, what the hot loops ask (reading `nodes[n].kind` copies an enum with an array).
    private(set) var chainOf: [ChainID] = []
    private(set) var parentOf: [NodeID?] = []
    /// Whether the node has a result of its own to compare (all but `catch`).
    private(set) var hasOutcome: [Bool] = []
    private(set) var isStep: [Bool] = []
    private(set) var isObserver: [Bool] = []
    /// The ensureThen node of each cleanup.
    var cleanups: [NodeID] = []
    /// The combinators built over two branches of one chain.
    var branchPatterns: Set<NodeID> = []

    mutating func append(_ node: Node) {
        nodes.append(node)
        chainOf.append(node.chain)
        parentOf.append(node.kind.parent)
        isStep.append(node.kind.isStep)
        isObserver.append(node.kind.isObserver)
        if case .catchAll = node.kind { hasOutcome.append(false) } else { hasOutcome.append(true) }
    }

    mutating func hold(_ node: NodeID, _ held: Bool) { nodes[node].held = held }

    func kind(_ node: NodeID) -> Kind { nodes[node].kind }
    func chain(_ node: NodeID) -> ChainID { chainOf[node] }
    func role(_ node: NodeID) -> ChainRole { chains[nodes[node].chain].role }
    func taskChain(_ task: TaskID) -> ChainID { nodes[tasks[task].node].chain }

    func chain(of handle: Handle) -> ChainID {
        switch handle {
        case .node(let node): return chain(node)
        case .context(let chain): return chain
        }
    }

    /// Lazy tasks are created by the `then` body that returns them; everything else exists once
    /// the graph is built (an inner task is started by its wrapper's body, during the build).
    func existsAfterBuild(_ node: NodeID) -> Bool { role(node) != .lazy }

    /// Whether the node is a `CancellablePromise<Int>` (a parent or an input for others).
    func isIntPromise(_ node: NodeID) -> Bool {
        switch kind(node) {
        case .done, .catchAll: return false
        default: return true
        }
    }

    /// The in-chain path from the node up to its chain's head, nearest first.
    func ancestors(of node: NodeID) -> [NodeID] {
        var path: [NodeID] = []
        var current = parentOf[node]
        while let next = current {
            path.append(next)
            current = parentOf[next]
        }
        return path
    }

    var allHandles: [Handle] {
        nodes.indices.map { Handle.node($0) } + chains.indices.map { Handle.context($0) }
    }

    // Values: distinct enough that a wrong winner or a skipped step shows.

    func value(ofTask task: TaskID) -> Int { 1_000 + 10 * task }
    static func mapped(_ value: Int, by node: NodeID) -> Int { value &* 7 &+ node }
    static func recovered(by node: NodeID) -> Int { 500_000 + node }
    static func folded(_ values: [Int]) -> Int { values.reduce(17) { $0 &* 31 &+ $1 } }

    static func folded(results: [Outcome]) -> Int {
        folded(
            results.map {
                switch $0 {
                case .fulfilled(let value): return value
                case .rejected(let error): return error.code
                }
            })
    }
}

/// A handle the test can hold, cancel through and drop.
enum Handle: Hashable, Sendable, CustomStringConvertible {
    case node(NodeID)
    case context(ChainID)

    var description: String {
        switch self {
        case .node(let node): return "n\(node)"
        case .context(let chain): return "context of c\(chain)"
        }
    }
}

extension GraphPlan.Kind {
    var parent: NodeID? {
        switch self {
        case .map(let parent, _), .get(let parent), .done(let parent), .then(let parent, _),
            .recover(let parent, _, _), .ensure(let parent), .ensureThen(let parent, _), .tap(let parent),
            .catchAll(let parent):
            return parent
        case .task, .combinator, .wrapper:
            return nil
        }
    }

    /// A body that must not start once the chain is cancelled.
    var isStep: Bool {
        switch self {
        case .map, .get, .done, .then, .recover: return true
        default: return false
        }
    }

    /// A body that runs whatever the parent settles with.
    var isObserver: Bool {
        switch self {
        case .ensure, .tap, .ensureThen, .catchAll: return true
        default: return false
        }
    }
}

extension GraphPlan: CustomStringConvertible {
    func describe(_ node: NodeID) -> String {
        let text: String
        switch kind(node) {
        case .task(let task):
            let origin: [ChainRole: String] = [
                .target: " (returned by thens)", .lazy: " (started by a then body)", .inner: " (inner)",
            ]
            text = "task t\(task)\(origin[role(node)] ?? "")\(tasks[task].closureRejectsToo ? ", closure rejects" : "")"
        case .map(let parent, let throwing): text = "n\(parent).map\(throwing ? " (throws)" : "")"
        case .get(let parent): text = "n\(parent).get"
        case .done(let parent): text = "n\(parent).done"
        case .then(let parent, .promise(let target)): text = "n\(parent).then { n\(target) }"
        case .then(let parent, .lazyTask(let task)): text = "n\(parent).then { start t\(task) }"
        case .recover(let parent, let allErrors, let cancellable):
            let policy = allErrors ? ".allErrors" : "default"
            text = "n\(parent).recover(\(policy)) { \(cancellable ? "cancellable " : "")value }"
        case .ensure(let parent): text = "n\(parent).ensure"
        case .ensureThen(let parent, let cleanup): text = "n\(parent).ensureThen { cleanup k\(cleanup) }"
        case .tap(let parent): text = "n\(parent).tap"
        case .catchAll(let parent): text = "n\(parent).catch(.allErrors)"
        case .combinator(let combinator, let inputs, let autoCancel):
            let list = inputs.map { "n\($0)" }.joined(separator: ", ")
            text = "\(combinator)([\(list)], autoCancel: \(autoCancel))"
        case .wrapper(let inner, let style): text = "wrapper { cancelPromise in t\(inner) } \(style)"
        }
        return "n\(node) = \(text)  [c\(chain(node))\(nodes[node].held ? ", held" : "")]"
    }

    var description: String {
        var lines = nodes.indices.map { "  " + describe($0) }
        let contexts = chains.indices.filter { chains[$0].contextHeld }.map { "c\($0)" }
        if !contexts.isEmpty { lines.append("  contexts held: " + contexts.joined(separator: ", ")) }
        return lines.joined(separator: "\n")
    }
}

// MARK: - What the plan implies

/// Which chains an event in one chain can settle or cancel something in. Results flow from a
/// returned promise, a combinator's inputs and a wrapper's inner task to the chain waiting on
/// them; cancellation goes back through then-links, wrappers and autoCancel, and autoCancel also
/// goes from each input to the others. Edges of an autoCancel combinator are marked with it.
struct ChainInfluence {
    private var edges: [[(to: ChainID, combinator: NodeID?)]]

    init(_ plan: GraphPlan) {
        edges = Array(repeating: [], count: plan.chains.count)
        for (node, entry) in plan.nodes.enumerated() {
            let chain = entry.chain
            switch entry.kind {
            case .then(_, let target):
                let targetChain: ChainID
                switch target {
                case .promise(let promise): targetChain = plan.chain(promise)
                case .lazyTask(let task): targetChain = plan.taskChain(task)
                }
                edges[targetChain].append((chain, nil))
                edges[chain].append((targetChain, nil))
            case .combinator(_, let inputs, let autoCancel):
                for input in inputs {
                    edges[plan.chain(input)].append((chain, nil))
                    guard autoCancel else { continue }
                    edges[chain].append((plan.chain(input), node))
                    for other in inputs where plan.chain(other) != plan.chain(input) {
                        edges[plan.chain(input)].append((plan.chain(other), node))
                    }
                }
            case .wrapper(let inner, let style):
                edges[plan.taskChain(inner)].append((chain, nil))
                if style != .whilePlain { edges[chain].append((plan.taskChain(inner), nil)) }
            default:
                break
            }
        }
    }

    /// The chains reachable from `chain`, itself included, leaving out the edges of `combinator`,
    /// as a bit set (a plan has fewer than 64 chains).
    func reachable(from chain: ChainID, ignoring combinator: NodeID? = nil) -> UInt64 {
        var seen: UInt64 = 1 << chain
        var stack = [chain]
        while let next = stack.popLast() {
            for edge in edges[next] where edge.combinator == nil || edge.combinator != combinator {
                guard seen & (1 << edge.to) == 0 else { continue }
                seen |= 1 << edge.to
                stack.append(edge.to)
            }
        }
        return seen
    }

    /// The chains connected to each other by any edge, in either direction: the components.
    func components() -> (ofChain: [Int], count: Int) {
        var parent = Array(edges.indices)
        func root(_ chain: ChainID) -> ChainID {
            var chain = chain
            while parent[chain] != chain { chain = parent[chain] }
            return chain
        }
        for (from, list) in edges.enumerated() {
            for edge in list { parent[root(edge.to)] = root(from) }
        }
        var numbers: [ChainID: Int] = [:]
        let ofChain = edges.indices.map { chain in
            let root = root(chain)
            if let number = numbers[root] { return number }
            numbers[root] = numbers.count
            return numbers.count - 1
        }
        return (ofChain, numbers.count)
    }

    /// Whether each combinator's inputs settle one event at a time: no single event (a task, a
    /// cleanup or a cancellation in any chain) can reach two distinct inputs, except the inputs of
    /// a branch pattern, whose simultaneous outcomes the model accepts either way. Only then is
    /// a combinator's outcome independent of the order handlers run in.
    static func combinatorsAreUnambiguous(_ plan: GraphPlan) -> Bool {
        guard plan.nodes.contains(where: { if case .combinator = $0.kind { return true } else { return false } })
        else { return true }
        let influence = ChainInfluence(plan)
        for (node, entry) in plan.nodes.enumerated() {
            guard case .combinator(_, let inputs, _) = entry.kind else { continue }
            guard !plan.branchPatterns.contains(node) else { continue }
            let chains = Set(inputs.map { plan.chain($0) })
            guard chains.count == Set(inputs).count else { return false }
            let inputMask = chains.reduce(UInt64(0)) { $0 | (1 << $1) }
            for source in plan.chains.indices {
                if (influence.reachable(from: source, ignoring: node) & inputMask).nonzeroBitCount > 1 { return false }
            }
        }
        return true
    }
}

/// Static facts about a plan the model and the checks look up often.
struct PlanIndex {
    /// The nodes notified when a node settles, in the order they attached to it: its children,
    /// the combinators it is an input of, the wrapper it is the inner task of.
    let dependents: [[NodeID]]
    /// The `then` steps whose body returns this node.
    let stepsReturning: [[NodeID]]
    /// For a task started by a body, the `then` step or wrapper whose body starts it.
    let starter: [NodeID?]
    /// For a `then` whose body returns an existing promise, that promise's chain: until the body
    /// runs, it holds the promise (a cancel handle of that chain).
    let heldByBody: [ChainID?]
    /// For a wrapper that cancels its inner task, the inner task's chain.
    let cancelsInnerChain: [ChainID?]
    /// For an autoCancel combinator, the chains of its inputs.
    let cancelsInputChains: [[ChainID]]
    /// For an autoCancel combinator that cancels its losers when it settles (race,
    /// race(fulfilled:), when(fulfilled:)), its inputs: it holds their chains' handles until it
    /// settles, even when nothing holds its result. (With when(resolved:) only the result's cancel
    /// closure holds them, released with the result's chain's last cancel handle.)
    let inputsHeldUntilSettled: [[NodeID]]
    let ancestors: [[NodeID]]
    let wrappers: [NodeID]
    let tasksOfChain: [[TaskID]]
    let componentOfChain: [Int]
    let componentCount: Int
    let nodesOfComponent: [[NodeID]]
    let tasksOfComponent: [[TaskID]]
    let chainsOfComponent: [[ChainID]]
    /// Chains whose cancellation reaches another chain (then-links, wrappers, autoCancel): they are
    /// only cancelled with the plain cancellation error, so that error is the same everywhere.
    let chainHasCancelLinks: [Bool]

    init(_ plan: GraphPlan) {
        var dependents = Array(repeating: [NodeID](), count: plan.nodes.count)
        var stepsReturning = Array(repeating: [NodeID](), count: plan.nodes.count)
        var starter = [NodeID?](repeating: nil, count: plan.nodes.count)
        var wrappers: [NodeID] = []
        var links = Array(repeating: false, count: plan.chains.count)
        var tasksOfChain = Array(repeating: [TaskID](), count: plan.chains.count)
        for (task, entry) in plan.tasks.enumerated() { tasksOfChain[plan.chain(entry.node)].append(task) }
        for (node, entry) in plan.nodes.enumerated() {
            if let parent = entry.kind.parent { dependents[parent].append(node) }
            switch entry.kind {
            case .then(_, let target):
                links[entry.chain] = true
                switch target {
                case .promise(let promise): stepsReturning[promise].append(node)
                case .lazyTask(let task):
                    stepsReturning[plan.tasks[task].node].append(node)
                    starter[plan.tasks[task].node] = node
                }
            case .combinator(_, let inputs, let autoCancel):
                if autoCancel { links[entry.chain] = true }
                for input in Set(inputs) { dependents[input].append(node) }
            case .wrapper(let inner, let style):
                wrappers.append(node)
                starter[plan.tasks[inner].node] = node
                if style != .whilePlain { links[entry.chain] = true }
                dependents[plan.tasks[inner].node].append(node)
            default:
                break
            }
        }
        self.dependents = dependents.map { $0.sorted() }
        self.stepsReturning = stepsReturning
        self.starter = starter
        heldByBody = plan.nodes.map {
            if case .then(_, .promise(let promise)) = $0.kind { return plan.chain(promise) }
            return nil
        }
        cancelsInnerChain = plan.nodes.map {
            if case .wrapper(let inner, let style) = $0.kind, style != .whilePlain { return plan.taskChain(inner) }
            return nil
        }
        cancelsInputChains = plan.nodes.map {
            if case .combinator(_, let inputs, true) = $0.kind { return inputs.map { plan.chain($0) } }
            return []
        }
        inputsHeldUntilSettled = plan.nodes.map {
            guard case .combinator(let combinator, let inputs, true) = $0.kind, combinator != .whenResolved else {
                return []
            }
            return Array(Set(inputs)).sorted()
        }
        self.ancestors = plan.nodes.indices.map { plan.ancestors(of: $0) }
        self.wrappers = wrappers
        self.tasksOfChain = tasksOfChain
        self.chainHasCancelLinks = links

        let (component, count) = ChainInfluence(plan).components()
        self.componentOfChain = component
        self.componentCount = count
        var nodesOfComponent = Array(repeating: [NodeID](), count: count)
        var tasksOfComponent = Array(repeating: [TaskID](), count: count)
        var chainsOfComponent = Array(repeating: [ChainID](), count: count)
        for node in plan.nodes.indices { nodesOfComponent[component[plan.chain(node)]].append(node) }
        for task in plan.tasks.indices { tasksOfComponent[component[plan.taskChain(task)]].append(task) }
        for chain in plan.chains.indices { chainsOfComponent[component[chain]].append(chain) }
        self.nodesOfComponent = nodesOfComponent
        self.tasksOfComponent = tasksOfComponent
        self.chainsOfComponent = chainsOfComponent
    }
}

// MARK: - Building a plan

/// Draws a small random graph. Its constraints keep the model exact without constraining the
/// rules: combinator inputs never settle in one event (except a branch pattern's), the inputs of
/// an autoCancel combinator are the tips of chains of their own (so cancelling "the loser's
/// pending work" and "the loser's chain" are the same thing), and `recover(policy: .allErrors)`
/// only sits where the only cancellation that can reach it is its own chain's.
struct PlanBuilder {
    private(set) var plan = GraphPlan()

    static func build(using rng: inout SeededGenerator) -> GraphPlan {
        var builder = PlanBuilder()
        for _ in 0..<rng.int(0...2) { builder.addTargetChain(&rng) }
        for _ in 0..<rng.int(1...3) { builder.addTaskChain(&rng) }
        for _ in 0..<rng.int(2...9) where builder.plan.chains.count < 56 {
            switch rng.int(0...99) {
            case 0..<56: builder.addOperator(&rng)
            case 56..<64: builder.addTerminal(&rng)
            case 64..<80: builder.addCombinator(&rng)
            case 80..<86: builder.addBranchPattern(&rng)
            case 86..<94: builder.addWrapper(&rng)
            default: builder.addTaskChain(&rng)
            }
        }
        builder.chooseHandles(&rng)
        return builder.plan
    }

    private mutating func addChain(_ role: GraphPlan.ChainRole) -> ChainID {
        plan.chains.append(GraphPlan.Chain(role: role))
        return plan.chains.count - 1
    }

    @discardableResult
    private mutating func addNode(_ kind: GraphPlan.Kind, in chain: ChainID) -> NodeID {
        plan.append(GraphPlan.Node(kind: kind, chain: chain))
        plan.chains[chain].nodes.append(plan.nodes.count - 1)
        return plan.nodes.count - 1
    }

    @discardableResult
    private mutating func addTask(in chain: ChainID, _ rng: inout SeededGenerator) -> TaskID {
        let task = plan.tasks.count
        let node = addNode(.task(task), in: chain)
        plan.tasks.append(GraphPlan.Task(node: node, closureRejectsToo: rng.chance(0.2)))
        return task
    }

    private mutating func addTaskChain(_ rng: inout SeededGenerator) {
        addTask(in: addChain(.head), &rng)
    }

    private mutating func addTargetChain(_ rng: inout SeededGenerator) {
        let chain = addChain(.target)
        let task = addTask(in: chain, &rng)
        if rng.chance(0.5) { addNode(.map(plan.tasks[task].node, throwing: rng.chance(0.15)), in: chain) }
    }

    /// Promises new steps can be added to.
    private var openNodes: [NodeID] {
        plan.nodes.indices.filter { node in
            let chain = plan.chains[plan.chain(node)]
            return plan.isIntPromise(node) && !chain.sealed && chain.role.isOpen
        }
    }

    private mutating func addOperator(_ rng: inout SeededGenerator) {
        guard let parent = rng.element(of: openNodes) else { return addTaskChain(&rng) }
        let chain = plan.chain(parent)
        switch rng.int(0...99) {
        case 0..<24:
            addNode(.map(parent, throwing: rng.chance(0.15)), in: chain)
        case 24..<44:
            addThen(on: parent, &rng)
        case 44..<51:
            addNode(.get(parent), in: chain)
        case 51..<61:
            addNode(.ensure(parent), in: chain)
        case 61..<69:
            plan.cleanups.append(plan.nodes.count)
            addNode(.ensureThen(parent, cleanup: plan.cleanups.count - 1), in: chain)
        case 69..<77:
            addNode(.tap(parent), in: chain)
        default:
            let path = [parent] + plan.ancestors(of: parent)
            let onlyOwnCancellation =
                plan.chains[chain].role == .head
                && !path.contains {
                    if case .then = plan.kind($0) { return true }
                    return false
                }
            let allErrors = onlyOwnCancellation && rng.chance(0.4)
            addNode(.recover(parent, allErrors: allErrors, returnsCancellable: rng.chance(0.5)), in: chain)
        }
    }

    private mutating func addThen(on parent: NodeID, _ rng: inout SeededGenerator) {
        let chain = plan.chain(parent)
        let targets = plan.chains.filter { $0.role == .target }.compactMap { $0.nodes.last }
        if let target = rng.element(of: targets), rng.chance(0.55) {
            let saved = plan
            addNode(.then(parent, .promise(target)), in: chain)
            if ChainInfluence.combinatorsAreUnambiguous(plan) { return }
            plan = saved
        }
        let task = addTask(in: addChain(.lazy), &rng)
        addNode(.then(parent, .lazyTask(task)), in: chain)
    }

    private mutating func addTerminal(_ rng: inout SeededGenerator) {
        guard let parent = rng.element(of: openNodes) else { return }
        addNode(rng.chance(0.5) ? .done(parent) : .catchAll(parent), in: plan.chain(parent))
    }

    /// Whether `node` is the tip of a chain made only of its own path, so that its chain is
    /// exactly its own pending work.
    private func isTipOfItsChain(_ node: NodeID) -> Bool {
        let chain = plan.chains[plan.chain(node)]
        return chain.role.isOpen && !chain.isBranchPattern && chain.nodes.count == plan.ancestors(of: node).count + 1
    }

    private mutating func addCombinator(_ rng: inout SeededGenerator) {
        let combinator = rng.element(of: GraphPlan.Combinator.allCases)!
        let autoCancel = rng.chance(0.5)
        let candidates = plan.nodes.indices.filter { node in
            guard plan.isIntPromise(node) else { return false }
            if autoCancel { return isTipOfItsChain(node) }
            return plan.role(node).isOpen
        }
        guard candidates.count >= 2 else { return }
        for _ in 0..<6 {
            var inputs = Array(candidates.shuffled(using: &rng).prefix(rng.int(2...3)))
            if rng.chance(0.15) { inputs.append(inputs[0]) }
            let saved = plan
            addNode(.combinator(combinator, inputs: inputs, autoCancel: autoCancel), in: addChain(.combinator))
            if ChainInfluence.combinatorsAreUnambiguous(plan) {
                if autoCancel { for input in inputs { plan.chains[plan.chain(input)].sealed = true } }
                return
            }
            plan = saved
        }
    }

    /// `race([head.map { … }, head.then { slowTask }])` and the like: two branches of one chain.
    private mutating func addBranchPattern(_ rng: inout SeededGenerator) {
        let chain = addChain(.head)
        plan.chains[chain].isBranchPattern = true
        let head = plan.tasks[addTask(in: chain, &rng)].node
        var branches: [NodeID] = []
        let mapFirst = rng.chance(0.5)
        for makeMap in [mapFirst, !mapFirst] {
            if makeMap {
                branches.append(addNode(.map(head, throwing: false), in: chain))
            } else {
                let slowTask = addTask(in: addChain(.lazy), &rng)
                branches.append(addNode(.then(head, .lazyTask(slowTask)), in: chain))
            }
        }
        var inputs = branches.shuffled(using: &rng)
        if rng.chance(0.2) { inputs.append(inputs[0]) }
        let combinator = rng.element(of: GraphPlan.Combinator.allCases)!
        let node = addNode(
            .combinator(combinator, inputs: inputs, autoCancel: rng.chance(0.75)), in: addChain(.combinator))
        plan.branchPatterns.insert(node)
        plan.chains[chain].sealed = true
    }

    private mutating func addWrapper(_ rng: inout SeededGenerator) {
        let wrapperChain = addChain(.wrapper)
        let inner = addTask(in: addChain(.inner), &rng)
        addNode(.wrapper(inner: inner, rng.element(of: GraphPlan.WrapperStyle.allCases)!), in: wrapperChain)
    }

    private mutating func chooseHandles(_ rng: inout SeededGenerator) {
        for node in plan.nodes.indices {
            let probability: Double
            switch (plan.role(node), plan.kind(node)) {
            case (.lazy, _), (.inner, _): probability = 0.35
            case (_, .catchAll): probability = 0.6
            default: probability = 0.75
            }
            plan.hold(node, rng.chance(probability))
        }
        for chain in plan.chains.indices
        where [.head, .target, .combinator, .wrapper].contains(plan.chains[chain].role) {
            plan.chains[chain].contextHeld = rng.chance(0.2)
        }
    }
}

// MARK: - Events

/// One step of a schedule. Events whose subject is gone (a resolver used or dropped, a handle
/// dropped, a task not started yet) do nothing, in the world and in the model.
enum Event: Sendable, CustomStringConvertible {
    case fulfil(TaskID)
    case reject(TaskID)
    /// The work lets go of its resolver without settling.
    case abandon(TaskID)
    case resolveCleanup(Int)
    case cancel(Handle, custom: Bool)
    case drop(Handle)

    var description: String {
        switch self {
        case .fulfil(let task): return "fulfil t\(task)"
        case .reject(let task): return "reject t\(task)"
        case .abandon(let task): return "abandon t\(task)"
        case .resolveCleanup(let cleanup): return "resolve cleanup k\(cleanup)"
        case .cancel(let handle, let custom): return "cancel\(custom ? "(with:)" : "()") through \(handle)"
        case .drop(let handle): return "drop \(handle)"
        }
    }

    static func schedule(for plan: GraphPlan, _ index: PlanIndex, using rng: inout SeededGenerator) -> [Event] {
        let handles = plan.allHandles
        return (0..<rng.int(3...10)).map { _ in
            let roll = rng.int(0...99)
            let task = rng.int(0...(plan.tasks.count - 1))
            if roll < 34 { return rng.chance(0.7) ? .fulfil(task) : .reject(task) }
            if roll < 40 { return .abandon(task) }
            if roll < 50, !plan.cleanups.isEmpty { return .resolveCleanup(rng.int(0...(plan.cleanups.count - 1))) }
            let handle = rng.element(of: handles)!
            if roll < 78 {
                let custom = !index.chainHasCancelLinks[plan.chain(of: handle)] && rng.chance(0.25)
                return .cancel(handle, custom: custom)
            }
            return .drop(handle)
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

    func bodyStarted(_ node: NodeID, input: Outcome? = nil) {
        let thread = ObjectIdentifier(Thread.current)
        lock.withLock {
            clock += 1
            nodes[node].bodyTrigger = running[thread]
            nodes[node].bodyRuns += 1
            nodes[node].bodyStartedAt = clock
            nodes[node].bodyInput = input
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
        let promise = CancellablePromise<Int> { resolver in
            lock.withLock { resolvers[task] = resolver }
            let ownResolver = rejectsToo ? resolver : nil
            return {
                log.closureCalled(task)
                withExtendedLifetime(box) {}
                ownResolver?.reject(TaskFailure(task: task))
            }
        }
        let node = plan.tasks[task].node
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

// MARK: - The model

/// The rules applied to a plan one event at a time, on one thread: which promises are settled
/// and how, which bodies ran, which cancel closures were called, which chains say they are
/// cancelled, what each wrapper's cancelPromise may be, and what can still cancel each chain.
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
    }

    let plan: GraphPlan
    let index: PlanIndex
    private(set) var outcome: [Outcome?]
    private(set) var created: [Bool]
    private(set) var bodyRuns: [Int]
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
/// - a `CancellablePromise` holds its chain's handle and its promise;
/// - a chain with a handle lists its pending promises: their entries hold the promises, the
///   pending tasks' cancel closures, the chain a pending `then` waits on (a link), a pending
///   wrapper's cancel closure (which holds its cancelPromise) and link to the inner chain it
///   returned, and the inputs of a pending combinator with autoCancel (its cancel closure);
/// - a pending promise holds its handlers: what depends on it (with the bodies that have not
///   run) and the steps waiting on it;
/// - a race, race(fulfilled:) or when(fulfilled:) with autoCancel holds its inputs' chains'
///   handles until it settles (to cancel the losers then), even when nothing holds its result;
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
                edge(.context(chain), .context(plan.chain(returned)))
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
                case .returnsInner: edge(.context(chain), .context(plan.chain(innerNode)))
                case .whileAutoCancel: edge(.cancelPromise(node), .promise(innerNode))
                case .whilePlain: break
                }
            case .combinator(let combinator, let inputs, true):
                edge(.context(chain), .inputs(node))
                if combinator != .whenResolved { edge(.underlying(node), .inputs(node)) }
                for input in inputs { edge(.inputs(node), .context(plan.chain(input))) }
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

/// A task behind `task.map.timeout(seconds:).tap.recover.ensure`: the task answers before the
/// deadline, never, or around it from another thread. When the timeout wins, the task's cancel
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
        let done = DispatchSemaphore(value: 0)
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
                .timeout(seconds: seconds)
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
        switch answer {
        case 0:
            work?.fulfill(1)
        case 1:
            break
        default:
            let delay = seconds * Double(rng.int(50...150)) / 100
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [work] in work?.fulfill(1) }
        }
        let settled = done.wait(timeout: .now() + 5) == .success
        work = nil  // the work lets go of its resolver (a late answer holds its own until it lands)
        let outcomes = seen.snapshot()
        let timedOut = outcomes.timeoutOutput == .rejected(.timeout)
        let taskRejected = outcomes.task?.isRejected == true
        var problem: String?
        if !settled {
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
        let deadline = Date(timeIntervalSinceNow: 2)
        while (weakTask != nil || weakTail != nil || weakBox != nil) && Date() < deadline { usleep(1_000) }
        if weakTask != nil || weakTail != nil || weakBox != nil {
            problems[.everythingFreedAtEnd] = "the timed chain is still alive 2 s after it settled"
        }
        report.add(round: round, problems: problems) {
            "timeout \(seconds) s, answer \(["at once", "never", "around the deadline"][answer])"
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
