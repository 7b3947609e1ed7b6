// Cancellation workloads (CancellablePromiseKit), and the memory of a pending cancellable
// promise. All handlers `on: nil`.

import Benchmark
import CancellablePromiseKit
import SharedWorkloads

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

    // The same with the task made by `CancellablePromise(resolver:)`.
    Benchmark("cancel_resolver_cancel", configuration: configuration()) { _ in
        for _ in 0..<batch {
            let promise = CancellablePromise<Int> { resolver in { resolver.reject(CancellablePromiseError.cancelled) } }
            promise.cancel()
            precondition(promise.promise.isRejected)
        }
    }

    // A fulfilled cancellable promise, `CancellablePromise.value(x)`: what a `then` body returns
    // when it has its value at hand.
    Benchmark("cancel_value", configuration: configuration()) { _ in
        for i in 0..<batch {
            let promise = CancellablePromise.value(i)
            precondition(promise.promise.isFulfilled)
        }
    }

    // A 1,000-link cancellable `then` chain, each body returning a cancellable promise (linked
    // to the chain while it waits on it), resolved.
    Benchmark("cancel_then_chain", configuration: configuration()) { _ in
        let (head, resolver) = CancellablePromise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.then(on: nil) { CancellablePromise.value($0 &+ 1) } }
        resolver.fulfill(0)
        precondition(tail.value == chainLength)
    }

    // A 1,000-link cancellable `map` chain, resolved: every body runs (marked as its step's
    // running body); then the same chain whose bodies read `CancellationToken.current` once
    // (its token made) or three times (the same token read again): per link, what a first
    // read and later reads cost.
    Benchmark("cancel_map_run", configuration: configuration()) { _ in
        runCancellableMapChain(length: chainLength, reads: .none)
    }

    Benchmark("current_first_read", configuration: configuration()) { _ in
        runCancellableMapChain(length: chainLength, reads: .once)
    }

    Benchmark("current_read_three", configuration: configuration()) { _ in
        runCancellableMapChain(length: chainLength, reads: .thrice)
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

    // Cancellable `race` and `when` over two inputs, both fulfilled; then with `autoCancel`,
    // where the race cancels the loser and its cancellation rejects the `when`.
    Benchmark("cancel_race_when_two", configuration: configuration()) { _ in
        for i in 0..<batch { cancellableRaceAndWhenOverTwo(i) }
    }

    Benchmark("cancel_race_when_two_autocancel", configuration: configuration()) { _ in
        for i in 0..<batch { cancellableRaceAndWhenOverTwoAutoCancel(i) }
    }

    // race(autoCancel: true) and when(fulfilled:autoCancel: true) over 1,000 pending inputs
    // (the small size of the scaling rows; see Scaling.swift).
    Benchmark("cancel_race_autocancel", configuration: configuration()) { benchmark in
        raceAutoCancel(over: scalingSmall, benchmark)
    }

    Benchmark("cancel_when_autocancel", configuration: configuration()) { benchmark in
        whenAutoCancel(over: scalingSmall, benchmark)
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

    // A cancellation token with 1,000 `onCancel` handlers, then cancelled: every handler runs
    // (baseline: the same closures appended to a locked list, then taken out and called).
    Benchmark("token_oncancel_cancel", configuration: configuration()) { _ in
        let counter = Counter()
        let request = CancellationRequest()
        for _ in 0..<batch { request.token.onCancel { counter.increment() } }
        request.cancel()
        precondition(counter.value == batch && request.token.isCancelled, "a cancel handler did not run")
    }

    // The async bridge: `CancellablePromise { try await … }` made, cancelled, its rejection
    // observed, and its `Task` awaited to its end, as `base_task_cancel` awaits its task. The
    // bridge does not hand out its `Task`, so the operation reports its end on a `TaskEnd`.
    Benchmark("cancel_async_bridge", configuration: configuration()) { _ async in
        for _ in 0..<taskBatch {
            let end = TaskEnd()
            let promise = CancellablePromise<Void> {
                defer { end.signal() }
                try await Task.sleep(nanoseconds: 60_000_000_000)
            }
            promise.cancel()
            do {
                try await promise.async()
                preconditionFailure("a cancelled bridge promise fulfilled")
            } catch {
                precondition(error.isCancelled)
            }
            await end.wait()
        }
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
