// Scaling workloads: the same cancellable workload at a small and a large size. The table
// divides each by its own size and compares the large one with the small one, so a cost that
// grows faster than linearly (a quadratic regression) shows as a ratio well above 1. All
// handlers `on: nil`.

import Benchmark
import CancellablePromiseKit
import Synchronization

func registerScalingBenchmarks() {
    Benchmark("cancel_race_autocancel_16k", configuration: configuration()) { benchmark in
        raceAutoCancel(over: aggregateLarge, benchmark)
    }

    Benchmark("cancel_when_autocancel_16k", configuration: configuration()) { benchmark in
        whenAutoCancel(over: aggregateLarge, benchmark)
    }

    Benchmark("cancel_loop_pending_1k", configuration: configuration()) { benchmark in
        pendingStepLoop(steps: scalingSmall, benchmark)
    }

    Benchmark("cancel_loop_pending_64k", configuration: configuration(seconds: 2)) { benchmark in
        pendingStepLoop(steps: loopLarge, benchmark)
    }

    Benchmark("cancel_join_1k", configuration: configuration(seconds: 2)) { benchmark in
        joinContexts(scalingSmall, structures: joinLarge / scalingSmall, benchmark)
    }

    Benchmark("cancel_join_64k", configuration: configuration(seconds: 2)) { benchmark in
        joinContexts(joinLarge, structures: 1, benchmark)
    }

    // Long-lived structures (each add and remove O(1) amortised, in any order). The small row of each pair works on
    // `longLivedLarge / scalingSmall` structures of `scalingSmall` elements side by side, the
    // large row on one structure of `longLivedLarge`: the same number of elements and about the
    // same memory, so the ratio shows how the cost grows with the size of one structure, not how
    // it grows once the elements no longer fit in the processor's caches (a cancel that visits
    // 64,000 chains visits about 60 MB).
    for (suffix, count) in [("1k", scalingSmall), ("64k", longLivedLarge)] {
        let structures = longLivedLarge / count
        Benchmark("cancel_links_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            cancelFollowingLinks(count, structures: structures, benchmark)
        }
        Benchmark("token_settle_oldest_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            settleTokenPromises(count, structures: structures, newestFirst: false, benchmark)
        }
        Benchmark("token_settle_newest_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            settleTokenPromises(count, structures: structures, newestFirst: true, benchmark)
        }
        Benchmark("token_derived_drop_oldest_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            dropDerivedTokensOldestFirst(count, structures: structures, benchmark)
        }
        Benchmark("bag_settle_oldest_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            settleBagEntriesOldestFirst(count, structures: structures, benchmark)
        }
        Benchmark("bag_settle_newest_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            settleBagEntriesNewestFirst(count, structures: structures, benchmark)
        }
        Benchmark("when_while_settle_oldest_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            settleWhenWhileOutputsOldestFirst(count, structures: structures, benchmark)
        }
    }
}

/// race(autoCancel: true) over `count` pending inputs, one fulfilled: every loser must be
/// rejected (cancelled) when `fulfill` returns. Measures the race and the cancellation of the
/// losers, not the making of the inputs.
func raceAutoCancel(over count: Int, _ benchmark: Benchmark) {
    let inputs = (0..<count).map { _ in CancellablePromise<Int>.pending() }
    let promises = inputs.map(\.promise)
    let winnerIndex = count / 2
    benchmark.startMeasurement()
    let winner = race(promises, autoCancel: true)
    inputs[winnerIndex].resolver.fulfill(7)
    benchmark.stopMeasurement()
    precondition(winner.value == 7)
    for (i, input) in promises.enumerated() where i != winnerIndex {
        precondition(input.promise.isRejected && input.isCancelled, "a race loser is still pending")
    }
}

/// when(fulfilled:autoCancel: true) over `count` pending inputs, one rejected: the others are
/// cancelled. Measures the aggregate and the cancellation, not the making of the inputs.
func whenAutoCancel(over count: Int, _ benchmark: Benchmark) {
    let inputs = (0..<count).map { _ in CancellablePromise<Int>.pending() }
    let promises = inputs.map(\.promise)
    let failing = count / 2
    benchmark.startMeasurement()
    let all = when(fulfilled: promises, autoCancel: true)
    inputs[failing].resolver.reject(BenchmarkError.failed)
    benchmark.stopMeasurement()
    precondition(all.promise.isRejected)
    for (i, input) in promises.enumerated() where i != failing {
        precondition(input.promise.isRejected && input.isCancelled, "a when input is still pending")
    }
}

/// A promise loop of `steps` steps: step `i` is a pending cancellable promise whose `then` body
/// returns step `i + 1`'s promise, still pending, so every step waits on (is linked to) the
/// chain of the next one, `steps` deep. A driver fulfils the pending steps one after the other
/// as they appear; the last one's value settles the whole nest back up to the outer promise.
/// Measures the whole loop, from the first step to the outer promise's value.
///
/// The bodies are `@Sendable`, so the resolvers waiting for the driver are behind a lock (taken
/// twice per step, uncontended: the bodies run on the driver's thread, inside its `fulfill`).
/// Only a body makes a step after the first, so `steps + 1` resolvers fulfilled means every body
/// ran.
func pendingStepLoop(steps: Int, _ benchmark: Benchmark) {
    let waiting = WaitingResolvers()
    @Sendable func step(_ index: Int) -> CancellablePromise<Int> {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        waiting.append(resolver)
        guard index < steps else { return promise }
        return promise.then(on: nil) { _ -> CancellablePromise<Int> in
            step(index + 1)
        }
    }
    benchmark.startMeasurement()
    let outer = step(0)
    var fulfilled = 0
    while let resolver = waiting.popLast() {
        resolver.fulfill(fulfilled)  // runs the step's body, which appends the next step
        fulfilled += 1
    }
    benchmark.stopMeasurement()
    precondition(fulfilled == steps + 1, "the loop stopped early")
    precondition(outer.value == steps && !outer.isCancelled, "the loop's value did not reach the outer promise")
}

/// The resolvers of `pendingStepLoop`'s steps not yet fulfilled, appended by the step bodies and
/// taken by the driver.
final class WaitingResolvers: Sendable {
    private let resolvers = Mutex<[Resolver<Int>]>([])

    func append(_ resolver: Resolver<Int>) {
        resolvers.withLock { $0.append(resolver) }
    }

    func popLast() -> Resolver<Int>? {
        resolvers.withLock { $0.popLast() }
    }
}

/// `structures` times, `count` contexts joined into one with `cancellize(cancelContext:)`. A
/// join merges the chain with fewer pending promises into the other (union by size). The shared
/// chain is alternately the receiving and the other side of the join (`a` and `b` of
/// `ChainState.join`): a single-promise chain is joined into the shared context
/// (`single.cancellize(cancelContext: shared)`), then the shared chain's promise is joined into
/// a fresh two-promise chain (`sharedMember.cancellize(cancelContext: fresh)`). The shared chain
/// is merged into the other one only by the first join, while it is not yet the larger;
/// afterwards every other chain is merged into it, from either side. Measures the joins; the
/// chains are made before, and each joined chain is cancelled after, to check that every chain
/// is in it. The small row joins 64 groups of 1,000 side by side, the large row one group of
/// 64,000: the same contexts and memory, so the ratio shows how a join's cost grows with the
/// size of the chain it joins, not with what stops fitting in the caches.
func joinContexts(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    struct Group {
        let shared = CancelContext()
        let sharedMember: CancellablePromise<Int>
        let sharedResolver: Resolver<Int>
        let singles: [(promise: CancellablePromise<Int>, resolver: Resolver<Int>)]
        let fresh: [(head: CancellablePromise<Int>, tail: CancellablePromise<Int>, resolver: Resolver<Int>)]
        let freshContexts: [CancelContext]

        init(count: Int) {
            let (sharedSource, resolver) = Promise<Int>.pending()
            sharedResolver = resolver
            sharedMember = CancellablePromise(sharedSource, cancelContext: shared)
            singles = (0..<(count + 1) / 2).map { _ in CancellablePromise<Int>.pending() }
            fresh = (0..<count / 2).map { _ in
                let (head, resolver) = CancellablePromise<Int>.pending()
                return (head: head, tail: head.map(on: nil) { $0 &+ 1 }, resolver: resolver)
            }
            // Asked for before the joins: a chain makes its context on first use.
            freshContexts = fresh.map { $0.head.cancelContext }
        }
    }
    let groups = (0..<structures).map { _ in Group(count: count) }
    benchmark.startMeasurement()
    for group in groups {
        for i in 0..<count {
            if i.isMultiple(of: 2) {
                _ = group.singles[i / 2].promise.cancellize(cancelContext: group.shared)
            } else {
                _ = group.sharedMember.cancellize(cancelContext: group.freshContexts[i / 2])
            }
        }
    }
    benchmark.stopMeasurement()
    for group in groups {
        group.shared.cancel()
        precondition(group.sharedMember.promise.isRejected)
        precondition(group.singles.allSatisfy { $0.promise.isCancelled && $0.promise.promise.isRejected })
        precondition(group.fresh.allSatisfy { $0.head.promise.isRejected && $0.tail.promise.isRejected })
    }
    blackHole(groups)
}

/// `structures` times: one chain whose `then` bodies returned the promises of `count` other
/// chains, each with two pending promises, so the chain waits on all of them (a link each); then
/// `cancel()` on each, which follows every link. Measures the cancels; the chains are made
/// before.
func cancelFollowingLinks(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    var resolvers: [Resolver<Int>] = []
    var linked: [CancellablePromise<Int>] = []
    var waiting: [CancellablePromise<Int>] = []
    resolvers.reserveCapacity(count * structures)
    linked.reserveCapacity(count * structures)
    waiting.reserveCapacity(count * structures)
    let heads = (0..<structures).map { _ in
        let head = CancellablePromise.value(0)
        for _ in 0..<count {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let tail = promise.map(on: nil) { $0 }
            resolvers.append(resolver)
            linked.append(tail)
            waiting.append(head.then(on: nil) { _ in tail })
        }
        return head
    }
    benchmark.startMeasurement()
    for head in heads { head.cancel() }
    benchmark.stopMeasurement()
    precondition(linked.allSatisfy { $0.isCancelled && $0.promise.isRejected }, "a linked chain was not cancelled")
    precondition(waiting.allSatisfy { $0.promise.isRejected })
    blackHole(resolvers)
}

/// `structures` long-lived tokens, each with `count` promises made with
/// `Promise(cancellationToken:)`, then settled oldest first (or newest first), token after
/// token: each promise leaves its token as it settles. Measures the settling; the promises are
/// made before.
func settleTokenPromises(_ count: Int, structures: Int, newestFirst: Bool, _ benchmark: Benchmark) {
    let requests = (0..<structures).map { _ in CancellationRequest() }
    var resolvers: [[Resolver<Int>]] = []
    var promises: [Promise<Int>] = []
    promises.reserveCapacity(count * structures)
    for request in requests {
        var ownResolvers: [Resolver<Int>] = []
        ownResolvers.reserveCapacity(count)
        for _ in 0..<count {
            promises.append(
                Promise<Int>(cancellationToken: request.token) { resolver in
                    ownResolvers.append(resolver)
                    return {}
                })
        }
        resolvers.append(ownResolvers)
    }
    benchmark.startMeasurement()
    for ownResolvers in resolvers {
        if newestFirst {
            for index in ownResolvers.indices.reversed() { ownResolvers[index].fulfill(index) }
        } else {
            for index in ownResolvers.indices { ownResolvers[index].fulfill(index) }
        }
    }
    benchmark.stopMeasurement()
    precondition(promises.allSatisfy(\.isFulfilled), "a token promise did not settle")
    blackHole(requests)
}

/// `structures` long-lived tokens, each with `count` tokens derived from it (`map`), then
/// dropped oldest first: each leaves its operand's list as it is freed. Measures the drops; the
/// tokens are made before.
func dropDerivedTokensOldestFirst(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    let requests = (0..<structures).map { _ in CancellationRequest() }
    var derived: [CancellationToken?] = []
    derived.reserveCapacity(count * structures)
    for request in requests {
        for _ in 0..<count { derived.append(request.token.map { true }) }
    }
    benchmark.startMeasurement()
    for index in derived.indices { derived[index] = nil }
    benchmark.stopMeasurement()
    precondition(requests.allSatisfy { !$0.token.isCompleted })
    blackHole(derived)
}

/// Work finishing oldest first while new work arrives: makes `count` pending items with `make`
/// (which returns each one's resolver, appended to `resolvers`), half of them first, then one
/// made and the oldest pending one fulfilled per step, then the rest fulfilled oldest first.
func addWhileSettlingOldestFirst(
    _ count: Int, resolvers: inout [Resolver<Int>], _ make: () -> Resolver<Int>
) {
    let first = resolvers.count
    var oldest = first
    for index in 0..<count {
        resolvers.append(make())
        if index >= count / 2 {
            resolvers[oldest].fulfill(oldest)
            oldest += 1
        }
    }
    while oldest < first + count {
        resolvers[oldest].fulfill(oldest)
        oldest += 1
    }
}

/// `structures` long-lived `CancelBag`s, one after the other, into each of which `count`
/// pending chains are stored while the oldest ones settle: half of them first, then one stored
/// and the oldest pending one settled per step, then the rest settled oldest first and the bag
/// counted (each chain leaves it as it settles). Measures it all; the bags and what they held are kept until the
/// end.
func settleBagEntriesOldestFirst(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    var bags: [CancelBag] = []
    var resolvers: [Resolver<Int>] = []
    resolvers.reserveCapacity(count * structures)
    benchmark.startMeasurement()
    for _ in 0..<structures {
        let bag = CancelBag()
        addWhileSettlingOldestFirst(count, resolvers: &resolvers) {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            promise.store(in: bag)
            return resolver
        }
        precondition(bag.count == 0, "a settled chain stayed in the bag")
        bags.append(bag)
    }
    benchmark.stopMeasurement()
    blackHole((bags, resolvers))
}

/// `structures` long-lived `CancelBag`s side by side, into each of which `count` pending chains
/// are stored (every bag filled before any chain settles), then every chain settled newest
/// first: the last bag's newest chain first, the first bag's oldest last, each leaving its bag
/// as it settles. The same chains in the same order whatever `count`; only the bags' sizes
/// differ. Measures it all; the bags are kept until the end.
func settleBagEntriesNewestFirst(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    var bags: [CancelBag] = []
    var resolvers: [Resolver<Int>] = []
    resolvers.reserveCapacity(count * structures)
    benchmark.startMeasurement()
    for _ in 0..<structures {
        let bag = CancelBag()
        for _ in 0..<count {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            promise.store(in: bag)
            resolvers.append(resolver)
        }
        bags.append(bag)
    }
    while let resolver = resolvers.popLast() { resolver.fulfill(0) }
    benchmark.stopMeasurement()
    precondition(bags.allSatisfy { $0.count == 0 }, "a settled chain stayed in its bag")
    blackHole(bags)
}

/// `when(_:while:)` over `count` pending promises and one long-lived `cancelPromise`, the
/// promises settling oldest first while new ones are watched (as in
/// `settleBagEntriesOldestFirst`): each output leaves the condition's registrations as it
/// settles. `structures` times, one `cancelPromise` after the other. Measures it all; the
/// outputs are kept until the end.
func settleWhenWhileOutputsOldestFirst(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    var conditions: [Resolver<Void>] = []
    var resolvers: [Resolver<Int>] = []
    var outputs: [Promise<Int>] = []
    resolvers.reserveCapacity(count * structures)
    outputs.reserveCapacity(count * structures)
    benchmark.startMeasurement()
    for _ in 0..<structures {
        let (condition, conditionResolver) = Promise<Void>.pending()
        conditions.append(conditionResolver)
        addWhileSettlingOldestFirst(count, resolvers: &resolvers) {
            let (promise, resolver) = Promise<Int>.pending()
            outputs.append(when(promise, while: condition))
            return resolver
        }
    }
    benchmark.stopMeasurement()
    precondition(outputs.allSatisfy(\.isFulfilled), "a when(_:while:) output did not settle")
    blackHole(conditions)
}
