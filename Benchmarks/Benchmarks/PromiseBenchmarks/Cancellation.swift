// Cancellation workloads (CancellablePromiseKit), and the memory of a pending cancellable
// promise. All handlers `on: nil`.

import Benchmark
import CancellablePromiseKit

func registerCancellationBenchmarks() {
    // A task wrapped with its cancel closure, then cancelled: the closure rejects the task's own
    // promise, as a real task would once stopped.
    Benchmark("cancel_create_cancel", configuration: configuration()) { _ in
        for _ in 0..<batch {
            let (task, resolver) = Promise<Int>.pending()
            let promise = CancellablePromise(using: task) { resolver.reject(CancellablePromiseError.cancelled) }
            promise.cancel()
            precondition(promise.promise.isRejected)
        }
    }

    Benchmark("cancel_chain_tail", configuration: configuration()) { _ in
        let (head, resolver) = CancellablePromise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.map(on: nil) { $0 &+ 1 } }
        tail.cancel()
        precondition(head.promise.isRejected && tail.promise.isRejected)
        blackHole(resolver)
    }

    Benchmark("cancel_chain_head", configuration: configuration()) { _ in
        let (head, resolver) = CancellablePromise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.map(on: nil) { $0 &+ 1 } }
        head.cancel()
        precondition(head.promise.isRejected && tail.promise.isRejected)
        blackHole(resolver)
    }

    // race(autoCancel: true) over pending inputs, one fulfilled: every loser must be rejected
    // (cancelled) when `fulfill` returns.
    Benchmark("cancel_race_autocancel", configuration: configuration()) { benchmark in
        let inputs = (0..<batch).map { _ in CancellablePromise<Int>.pending() }
        let promises = inputs.map(\.promise)
        let winnerIndex = batch / 2
        benchmark.startMeasurement()
        let winner = race(promises, autoCancel: true)
        inputs[winnerIndex].resolver.fulfill(7)
        benchmark.stopMeasurement()
        precondition(winner.value == 7)
        for (i, input) in promises.enumerated() where i != winnerIndex {
            precondition(input.promise.isRejected && input.isCancelled, "a race loser is still pending")
        }
    }

    // when(fulfilled:autoCancel: true) over pending inputs, one rejected: the others are cancelled.
    Benchmark("cancel_when_autocancel", configuration: configuration()) { benchmark in
        let inputs = (0..<batch).map { _ in CancellablePromise<Int>.pending() }
        let promises = inputs.map(\.promise)
        let failing = batch / 2
        benchmark.startMeasurement()
        let all = when(fulfilled: promises, autoCancel: true)
        inputs[failing].resolver.reject(BenchmarkError.failed)
        benchmark.stopMeasurement()
        precondition(all.promise.isRejected)
        for (i, input) in promises.enumerated() where i != failing {
            precondition(input.promise.isRejected && input.isCancelled, "a when input is still pending")
        }
    }

    // Owner-bound cancellation: 1,000 pending tasks cancelled one by one (the baseline of the
    // next row), then the same stored in a `CancelBag` and cancelled with `cancelAll()`.
    Benchmark("cancel_one_by_one", configuration: configuration()) { benchmark in
        let chains = (0..<batch).map { _ in CancellablePromise<Int> { _ in {} } }
        benchmark.startMeasurement()
        for chain in chains { chain.cancel() }
        benchmark.stopMeasurement()
        precondition(chains.allSatisfy { $0.promise.isRejected })
    }

    Benchmark("cancel_bag_store_cancel", configuration: configuration()) { benchmark in
        let chains = (0..<batch).map { _ in CancellablePromise<Int> { _ in {} } }
        benchmark.startMeasurement()
        let bag = CancelBag()
        for chain in chains { chain.store(in: bag) }
        bag.cancelAll()
        benchmark.stopMeasurement()
        precondition(chains.allSatisfy { $0.promise.isRejected })
    }

    // A pending cancellable promise as its producer holds it: the promise and its resolver.
    Benchmark("mem_pending_cancellable", configuration: configuration()) { benchmark in
        var kept: [(promise: CancellablePromise<Int>, resolver: Resolver<Int>)] = []
        kept.reserveCapacity(batch)
        benchmark.startMeasurement()
        for _ in 0..<batch { kept.append(CancellablePromise<Int>.pending()) }
        benchmark.stopMeasurement()
        blackHole(kept)
    }

    Benchmark("mem_pending_cancellable_link", configuration: configuration()) { _ in
        let (head, resolver) = CancellablePromise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.map(on: nil) { $0 &+ 1 } }
        blackHole(tail)
        blackHole(resolver)
    }
}

enum BenchmarkError: Error {
    case failed
}
