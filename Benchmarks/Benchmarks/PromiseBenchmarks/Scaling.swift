// Scaling workloads: the same cancellable workload at a small and a large size. The table
// divides each by its own size and compares the large one with the small one, so a cost that
// grows faster than linearly (a quadratic regression) shows as a ratio well above 1. All
// handlers `on: nil`.

import Benchmark
import CancellablePromiseKit

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

    Benchmark("cancel_join_1k", configuration: configuration()) { benchmark in
        joinContexts(scalingSmall, benchmark)
    }

    Benchmark("cancel_join_64k", configuration: configuration(seconds: 2)) { benchmark in
        joinContexts(joinLarge, benchmark)
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
func pendingStepLoop(steps: Int, _ benchmark: Benchmark) {
    var waiting: [Resolver<Int>] = []
    var bodiesRun = 0
    func step(_ index: Int) -> CancellablePromise<Int> {
        let (promise, resolver) = CancellablePromise<Int>.pending()
        waiting.append(resolver)
        guard index < steps else { return promise }
        return promise.then(on: nil) { _ -> CancellablePromise<Int> in
            bodiesRun += 1
            return step(index + 1)
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
    precondition(bodiesRun == steps && fulfilled == steps + 1, "the loop stopped early")
    precondition(outer.value == steps && !outer.isCancelled, "the loop's value did not reach the outer promise")
}

/// `count` contexts joined into one with `cancellize(cancelContext:)`. A join merges the chain
/// with fewer pending promises into the other (union by size). The shared chain is alternately
/// the receiving and the other side of the join (`a` and `b` of `CancelState.join`): a
/// single-promise chain is joined into the shared context
/// (`single.cancellize(cancelContext: shared)`), then the shared chain's promise is joined into
/// a fresh two-promise chain (`sharedMember.cancellize(cancelContext: fresh)`). The shared chain
/// is merged into the other one only by the first join, while it is not yet the larger;
/// afterwards every other chain is merged into it, from either side. Measures the joins; the
/// chains are made before, and the joined chain is cancelled after, to check that every chain
/// is in it.
func joinContexts(_ count: Int, _ benchmark: Benchmark) {
    let shared = CancelContext()
    let (sharedSource, sharedResolver) = Promise<Int>.pending()
    let sharedMember = CancellablePromise(sharedSource, cancelContext: shared)
    let singles = (0..<(count + 1) / 2).map { _ in CancellablePromise<Int>.pending() }
    let fresh = (0..<count / 2).map { _ in
        let (head, resolver) = CancellablePromise<Int>.pending()
        return (head: head, tail: head.map(on: nil) { $0 &+ 1 }, resolver: resolver)
    }
    benchmark.startMeasurement()
    for i in 0..<count {
        if i.isMultiple(of: 2) {
            _ = singles[i / 2].promise.cancellize(cancelContext: shared)
        } else {
            _ = sharedMember.cancellize(cancelContext: fresh[i / 2].head.cancelContext)
        }
    }
    benchmark.stopMeasurement()
    shared.cancel()
    precondition(sharedMember.promise.isRejected)
    precondition(singles.allSatisfy { $0.promise.isCancelled && $0.promise.promise.isRejected })
    precondition(fresh.allSatisfy { $0.head.promise.isRejected && $0.tail.promise.isRejected })
    blackHole((sharedResolver, singles, fresh))
}
