// Runs one hot path in a loop, for `valgrind --tool=callgrind` (release build):
//   PromiseProfile <workload> [iterations]
// Workloads: create_fulfil, done_fulfil, map_chain, then_chain, when_pending, race_pending,
// cancel_create_cancel, cancel_chain_tail, race_autocancel, serial_hop, base_queue_hops,
// core_operators, race_when_two, cancel_then_chain, cancel_then_cancellable_chain,
// cancel_resolver_cancel, cancel_race_when_two, cancellize_cancel, bridge_cancel, base_task_cancel,
// token_request_cancel, token_derived, token_promise, bag_store_cancel, share_follower_cancel,
// coalesce_hit_cancel, cancel_chain_tail_main_actor, cancel_chain_tail_on_main, main_actor_hops,
// main_queue_hops, abandon_pending.

import CancellablePromiseKit
import Dispatch
import Foundation
import SharedWorkloads
import Synchronization

conf.logHandler = { _ in }

let arguments = CommandLine.arguments
let workload = arguments.count > 1 ? arguments[1] : "create_fulfil"
let iterations = arguments.count > 2 ? Int(arguments[2]) ?? 1_000 : 1_000
/// Where bodies put what they compute, so the work stays observable. Atomic (relaxed, one
/// locked add): the bodies are `@Sendable`.
let sink = Atomic<Int>(0)

@inline(never) func consume<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

/// The measured part of `race_autocancel` (the inputs are made before): profile it alone with
/// `--collect-atstart=no --toggle-collect='*raceAndFulfilFirst*'`.
@inline(never) func raceAndFulfilFirst(
    _ inputs: [(promise: CancellablePromise<Int>, resolver: Resolver<Int>)]
) -> CancellablePromise<Int> {
    let winner = race(inputs.map(\.promise), autoCancel: true)
    inputs[0].resolver.fulfill(7)
    return winner
}

/// The measured part of `race_pending` (the inputs are made before): profile it alone with
/// `--collect-atstart=no --toggle-collect='*racePendingAndFulfilOne*'`.
@inline(never) func racePendingAndFulfilOne(_ promises: [Promise<Int>], _ resolver: Resolver<Int>) -> Promise<Int> {
    let winner = race(promises)
    resolver.fulfill(7)
    return winner
}

/// The measured part of `when_pending`: profile it alone with
/// `--collect-atstart=no --toggle-collect='*whenPendingAndFulfilAll*'`.
@inline(never) func whenPendingAndFulfilAll(
    _ inputs: [(promise: Promise<Int>, resolver: Resolver<Int>)]
) -> Promise<[Int]> {
    let all = when(fulfilled: inputs.map(\.promise))
    for (i, input) in inputs.enumerated() { input.resolver.fulfill(i) }
    return all
}

/// `create_fulfil`, in a function of its own (as the benchmark's closure is: in top-level code
/// the optimizer may keep the resolver on the heap).
@inline(never) func createAndFulfil(_ iterations: Int) {
    for i in 0..<iterations {
        let (promise, resolver) = Promise<Int>.pending()
        resolver.fulfill(i)
        consume(promise)
    }
}

/// `cancel_create_cancel`, in a function of its own (see `createAndFulfil`).
@inline(never) func createAndCancel(_ iterations: Int) {
    for _ in 0..<iterations {
        let (task, resolver) = Promise<Int>.pending()
        let promise = CancellablePromise(using: task) { resolver.reject(CancellablePromiseError.cancelled) }
        promise.cancel()
        precondition(promise.promise.isRejected)
    }
}

switch workload {
case "create_fulfil":
    createAndFulfil(iterations)
case "done_fulfil":
    for i in 0..<iterations {
        let (promise, resolver) = Promise<Int>.pending()
        let done = promise.done(on: nil) { sink.wrappingAdd($0, ordering: .relaxed) }
        resolver.fulfill(i)
        consume(done)
    }
case "map_chain":
    let (head, resolver) = Promise<Int>.pending()
    var tail = head
    for _ in 0..<iterations { tail = tail.map(on: nil) { $0 &+ 1 } }
    resolver.fulfill(0)
    precondition(tail.value == iterations)
case "then_chain":
    let (head, resolver) = Promise<Int>.pending()
    var tail = head
    for _ in 0..<iterations { tail = tail.then(on: nil) { Promise.value($0 &+ 1) } }
    resolver.fulfill(0)
    precondition(tail.value == iterations)
case "when_pending":
    let inputs = (0..<iterations).map { _ in Promise<Int>.pending() }
    let all = whenPendingAndFulfilAll(inputs)
    precondition(all.value?.count == iterations)
case "race_pending":
    let inputs = (0..<iterations).map { _ in Promise<Int>.pending() }
    let winner = racePendingAndFulfilOne(inputs.map(\.promise), inputs[0].resolver)
    precondition(winner.value == 7)
case "cancel_create_cancel":
    createAndCancel(iterations)
case "cancel_chain_build":
    // The chain of `cancel_chain_tail`, built and left pending (the memory row's workload).
    let (head, resolver) = CancellablePromise<Int>.pending()
    var tail = head
    for _ in 0..<iterations { tail = tail.map(on: nil) { $0 &+ 1 } }
    consume(tail)
    consume(resolver)
case "cancel_join":
    // Joins into one long-lived chain, one a iteration, alternating as the scaling rows do: a
    // pending promise adopted into the long-lived context, and the long-lived chain's member
    // adopted into a new chain's context (that chain absorbed, or absorbing); then the whole
    // group cancelled.
    let shared = CancelContext()
    let (source, sharedResolver) = Promise<Int>.pending()
    let sharedMember = CancellablePromise(source, cancelContext: shared)
    var kept: [CancellablePromise<Int>] = []
    var resolvers: [Resolver<Int>] = []
    kept.reserveCapacity(iterations)
    resolvers.reserveCapacity(iterations)
    for index in 0..<iterations {
        let (head, resolver) = CancellablePromise<Int>.pending()
        resolvers.append(resolver)
        if index.isMultiple(of: 2) {
            kept.append(head.cancellize(cancelContext: shared))
        } else {
            let tail = head.map(on: nil) { $0 &+ 1 }
            kept.append(sharedMember.cancellize(cancelContext: tail.cancelContext))
        }
    }
    shared.cancel()
    precondition(kept.allSatisfy { $0.promise.isRejected })
    consume(sharedResolver)
    consume(resolvers)
case "cancel_chain_tail":
    let (head, resolver) = CancellablePromise<Int>.pending()
    var tail = head
    for _ in 0..<iterations { tail = tail.map(on: nil) { $0 &+ 1 } }
    tail.cancel()
    precondition(head.promise.isRejected && tail.promise.isRejected)
    consume(resolver)
case "cancel_chain_tail_main_actor":
    // `cancel_chain_tail` with main-actor bodies (no `on:`): what choosing that overload costs a
    // link. The bodies never run.
    let (head, resolver) = CancellablePromise<Int>.pending()
    var tail = head
    for _ in 0..<iterations { tail = tail.map { $0 &+ 1 } }
    tail.cancel()
    precondition(head.promise.isRejected && tail.promise.isRejected)
    consume(resolver)
case "cancel_chain_tail_on_main":
    // The baseline of `cancel_chain_tail_main_actor`: the same links given
    // `on: DispatchQueue.main` (a `@Sendable` body on the same queue).
    let (head, resolver) = CancellablePromise<Int>.pending()
    var tail = head
    for _ in 0..<iterations { tail = tail.map(on: DispatchQueue.main) { $0 &+ 1 } }
    tail.cancel()
    precondition(head.promise.isRejected && tail.promise.isRejected)
    consume(resolver)
case "main_actor_hops", "main_queue_hops":
    // A chain of `map` links whose bodies run on the main queue, as main-actor bodies (no `on:`)
    // or as `@Sendable` bodies given `on: DispatchQueue.main`: the difference is what a
    // main-actor body adds per body (in a release build, no isolation check: see
    // MainActorQueue.swift). The main queue is run by the main run loop until the last body ran
    // (not `dispatchMain()`, which valgrind cannot follow).
    let (head, resolver) = Promise<Int>.pending()
    var tail = head
    if workload == "main_actor_hops" {
        for _ in 0..<iterations { tail = tail.map { $0 &+ 1 } }
    } else {
        for _ in 0..<iterations { tail = tail.map(on: DispatchQueue.main) { $0 &+ 1 } }
    }
    resolver.fulfill(0)
    while tail.isPending { _ = RunLoop.main.run(mode: .default, before: .distantFuture) }
    precondition(tail.value == iterations)
case "cancel_map_run", "current_first_read", "current_read_three":
    // Cancellable `map` links, resolved: every body runs and reads `CancellationToken.current`
    // not at all, once, or three times.
    let reads: CurrentTokenReads =
        workload == "cancel_map_run" ? .none : workload == "current_first_read" ? .once : .thrice
    runCancellableMapChain(length: iterations, reads: reads)
case "serial_hop":
    // A chain of `map(on: queue)` links on one serial queue, each hopping once, as the
    // benchmark row runs it (links kept, so none is freed while it runs). Profile the hops alone
    // with `--collect-atstart=no --toggle-collect=_dispatch_call_block_and_release`.
    let chain = SerialHopChain(length: iterations, on: DispatchQueue(label: "serial_hop"))
    chain.run()
    precondition(chain.isComplete)
case "base_queue_hops":
    // The baseline of `serial_hop`: blocks on one serial queue, each enqueuing the next.
    let finished = DispatchSemaphore(value: 0)
    hop(iterations, on: DispatchQueue(label: "base_queue_hops"), done: finished)
    finished.wait()
case "race_autocancel":
    let inputs = (0..<iterations).map { _ in CancellablePromise<Int>.pending() }
    let winner = raceAndFulfilFirst(inputs)
    precondition(winner.value == 7)
case "cancel_then_chain", "cancel_then_cancellable_chain":
    // Cancellable `then` links, per link: the body returns a plain promise, or a cancellable
    // one (which the step links to its chain).
    let (head, resolver) = CancellablePromise<Int>.pending()
    var tail = head
    if workload == "cancel_then_chain" {
        for _ in 0..<iterations { tail = tail.then(on: nil) { Promise.value($0 &+ 1) } }
    } else {
        for _ in 0..<iterations { tail = tail.then(on: nil) { CancellablePromise.value($0 &+ 1) } }
    }
    resolver.fulfill(1)
    precondition(tail.value == iterations &+ 1)
case "core_operators":
    // The operators built on the general step, one of each, on a promise made with a resolver.
    for i in 0..<iterations {
        let promise = Promise<Int> { $0.fulfill(i) }
        promise.get(on: nil) { sink.wrappingAdd($0, ordering: .relaxed) }.tap(on: nil) { _ in }
            .compactMap(on: nil) { $0 }.recover(on: nil) { _ in Promise.value(0) }.ensure(on: nil) {}.asVoid()
            .catch(on: nil) { _ in }
    }
case "race_when_two":
    // `race` and `when` over two promises, the common size.
    for i in 0..<iterations { raceAndWhenOverTwo(i) }
case "cancel_race_when_two":
    // Cancellable `race` and `when` over two promises, then the same with `autoCancel` (the
    // benchmark rows `cancel_race_when_two` and `cancel_race_when_two_autocancel`).
    for i in 0..<iterations {
        cancellableRaceAndWhenOverTwo(i)
        cancellableRaceAndWhenOverTwoAutoCancel(i)
    }
case "cancellize_cancel":
    // A plain promise made cancellable with `cancellize()`, then cancelled.
    for _ in 0..<iterations {
        let (promise, resolver) = Promise<Int>.pending()
        let cancellable = promise.cancellize()
        cancellable.cancel()
        resolver.fulfill(1)
        consume(cancellable)
    }
case "abandon_pending":
    // A pending `CancellablePromise` whose last handle goes away while its work runs (the chain is
    // abandoned: its cancel closure released uncalled), then its work finishes.
    for _ in 0..<iterations {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        let core = promise.promise
        consume(promise)
        resolver.fulfill(1)
        precondition(core.isFulfilled)
    }
case "cancel_resolver_cancel":
    // `CancellablePromise(resolver:)` made and cancelled.
    for _ in 0..<iterations {
        let promise = CancellablePromise<Int> { resolver in { resolver.reject(CancellablePromiseError.cancelled) } }
        promise.cancel()
        precondition(promise.promise.isRejected)
    }
case "token_request_cancel":
    // A `CancellationRequest` made, one `onCancel` handler registered on its token, cancelled.
    for _ in 0..<iterations {
        let request = CancellationRequest()
        _ = request.token.onCancel { sink.wrappingAdd(1, ordering: .relaxed) }
        request.cancel()
    }
case "token_derived":
    // A token derived from a long-lived one with `map` and dropped (it leaves its operand).
    let request = CancellationRequest()
    for _ in 0..<iterations {
        consume(request.token.map { true })
    }
case "token_promise":
    // `Promise(cancellationToken:)` on a long-lived token, fulfilled at once (it leaves the token).
    let request = CancellationRequest()
    for i in 0..<iterations {
        let promise = Promise<Int>(cancellationToken: request.token) { resolver in
            resolver.fulfill(i)
            return {}
        }
        consume(promise)
    }
case "bag_store_cancel":
    // A pending chain stored in a new `CancelBag`, then the bag cancelled.
    for _ in 0..<iterations {
        let chain = CancellablePromise<Int> { _ in {} }
        let bag = CancelBag()
        chain.store(in: bag)
        bag.cancelAll()
        precondition(chain.promise.isRejected)
    }
case "share_follower_cancel":
    // A follower of a running shared source made and cancelled while another follower waits
    // (the benchmark row of the same name).
    let (source, resolver) = CancellablePromise<Int>.pending()
    let shared = source.shared()
    let keep = shared.follower()
    for _ in 0..<iterations {
        let follower = shared.follower()
        follower.cancel()
        precondition(follower.promise.isRejected)
    }
    resolver.fulfill(1)
    precondition(keep.value == 1)
case "coalesce_hit_cancel":
    // A request to an `InFlightCoalescer` for a key in flight, then cancelled (the benchmark row
    // of the same name).
    let coalescer = InFlightCoalescer<Int, Int>()
    let (source, resolver) = CancellablePromise<Int>.pending()
    let keep = coalescer.promise(for: 0) { source }
    for _ in 0..<iterations {
        let follower = coalescer.promise(for: 0) { () -> CancellablePromise<Int> in
            preconditionFailure("a hit starts nothing")
        }
        follower.cancel()
        precondition(follower.promise.isRejected)
    }
    resolver.fulfill(1)
    precondition(keep.value == 1)
case "bridge_cancel", "base_task_cancel":
    // `CancellablePromise { try await … }` made and cancelled, or (the baseline) a `Task` made
    // and cancelled; each waits for its task's end before the next.
    let bridge = workload == "bridge_cancel"
    let all = DispatchSemaphore(value: 0)
    Task.detached {
        for _ in 0..<iterations {
            let end = DispatchSemaphore(value: 0)
            if bridge {
                let promise = CancellablePromise<Void> {
                    defer { end.signal() }
                    try await Task.sleep(nanoseconds: 60_000_000_000)
                }
                promise.cancel()
            } else {
                let task = Task {
                    defer { end.signal() }
                    try await Task.sleep(nanoseconds: 60_000_000_000)
                }
                task.cancel()
            }
            end.wait()
        }
        all.signal()
    }
    all.wait()
default:
    fatalError("unknown workload \(workload)")
}
consume(sink.load(ordering: .relaxed))
