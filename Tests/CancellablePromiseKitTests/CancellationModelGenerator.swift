import CancellablePromiseKit
import Foundation
import PromiseCore

// The generator of the model-based cancellation test (CancellationModelTests.swift): the plan of
// a round as plain data, what the plan implies, the builder that draws a random plan, and the
// events of a schedule.

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
