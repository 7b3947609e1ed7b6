// Benchmarks of issue 7: same-run baselines, the PromiseCore workloads, the cancellation
// layer and memory. Every benchmark runs a batch of `n` operations per iteration; the table
// printed by `Benchmarks/run` divides the p50 of each metric by `n` (see `Workloads.swift`'s
// names and the batch sizes in `Benchmarks/run`). All handlers run with `on: nil` unless the
// name says otherwise, so the numbers are the library's own cost.

import Benchmark
import CancellablePromiseKit
import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `BENCH_SMOKE=1` (set by `Benchmarks/run --smoke`): one iteration of everything, no warmup.
let smoke = getenv("BENCH_SMOKE") != nil

let timeAndAllocs: [BenchmarkMetric] = [.wallClock, .mallocCountTotal, .mallocBytesCount]

func configuration(_ metrics: [BenchmarkMetric] = timeAndAllocs, seconds: Int = 1) -> Benchmark.Configuration {
    .init(
        metrics: metrics,
        timeUnits: .nanoseconds,
        // Raw counts (no K/M rounding): `Benchmarks/run` divides by the batch size itself.
        units: Dictionary(uniqueKeysWithValues: metrics.map { ($0, BenchmarkUnits.count) }),
        warmupIterations: smoke ? 0 : 3,
        maxDuration: smoke ? .milliseconds(1) : .seconds(seconds),
        maxIterations: smoke ? 1 : 100_000
    )
}

// MARK: - Baselines

/// A small class with an inline mutex, like a promise's lock word: the physical floor of
/// "one allocation plus one uncontended lock".
final class LockedBox {
    var word = pthread_mutex_t()  // must stay the first stored property
    var value = 0

    deinit { pthread_mutex_destroy(lockAddress) }

    @inline(__always) var lockAddress: UnsafeMutablePointer<pthread_mutex_t> {
        UnsafeMutableRawPointer(Unmanaged.passUnretained(self).toOpaque())
            .advanced(by: 16)
            .assumingMemoryBound(to: pthread_mutex_t.self)
    }
}

@inline(never) func allocLockFree(_ i: Int) -> Int {
    let box = LockedBox()
    pthread_mutex_lock(box.lockAddress)
    box.value = i
    pthread_mutex_unlock(box.lockAddress)
    blackHole(box)
    return box.value
}

/// Builds a chain of `count` closures, each calling the previous one, and calls it.
@inline(never) func closureChain(_ count: Int) -> Int {
    var f: (Int) -> Int = { $0 }
    for i in 0..<count {
        let g = f
        f = { g($0) &+ i }
    }
    return f(0)
}

// MARK: - Batch sizes (keep in sync with the N column of `Benchmarks/run`)

let batch = 1_000
let chainLength = 1_000
let hopChainLength = 10_000
let taskBatch = 100
let rssChainLength = 100_000

let benchmarks: @Sendable () -> Void = {
    conf.logHandler = { _ in }  // races leave pending losers behind on purpose

    // MARK: Baselines

    Benchmark("base_alloc_lock", configuration: configuration()) { _ in
        for i in 0..<batch { blackHole(allocLockFree(i)) }
    }

    Benchmark("base_closure_chain", configuration: configuration()) { _ in
        blackHole(closureChain(chainLength))
    }

    Benchmark("base_task_await", configuration: configuration()) { _ async in
        for i in 0..<taskBatch {
            let task = Task { i &+ 1 }
            blackHole(await task.value)
        }
    }

    Benchmark("base_task_cancel", configuration: configuration()) { _ async in
        for _ in 0..<taskBatch {
            let task = Task { try await Task.sleep(nanoseconds: 60_000_000_000) }
            task.cancel()
            let result = await task.result
            precondition((try? result.get()) == nil)
        }
    }

    // MARK: Core

    Benchmark("core_pending_fulfil", configuration: configuration()) { _ in
        for i in 0..<batch {
            let (promise, resolver) = Promise<Int>.pending()
            resolver.fulfill(i)
            blackHole(promise)
        }
    }

    Benchmark("core_pending_done_fulfil", configuration: configuration()) { _ in
        for i in 0..<batch {
            let (promise, resolver) = Promise<Int>.pending()
            let done = promise.done(on: nil) { blackHole($0) }
            resolver.fulfill(i)
            blackHole(done)
        }
    }

    Benchmark("core_map_chain", configuration: configuration()) { _ in
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.map(on: nil) { $0 &+ 1 } }
        resolver.fulfill(0)
        precondition(tail.value == chainLength)
    }

    Benchmark("core_then_chain", configuration: configuration()) { _ in
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.then(on: nil) { Promise.value($0 &+ 1) } }
        resolver.fulfill(0)
        precondition(tail.value == chainLength)
    }

    Benchmark("core_when_resolved", configuration: configuration()) { benchmark in
        let inputs = (0..<batch).map { Promise.value($0) }
        benchmark.startMeasurement()
        let all = when(fulfilled: inputs)
        precondition(all.value?.count == batch)
        benchmark.stopMeasurement()
    }

    Benchmark("core_when_pending", configuration: configuration()) { benchmark in
        let inputs = (0..<batch).map { _ in Promise<Int>.pending() }
        let promises = inputs.map(\.promise)
        benchmark.startMeasurement()
        let all = when(fulfilled: promises)
        for (i, input) in inputs.enumerated() { input.resolver.fulfill(i) }
        precondition(all.value?.count == batch)
        benchmark.stopMeasurement()
    }

    Benchmark("core_race_pending", configuration: configuration()) { benchmark in
        let inputs = (0..<batch).map { _ in Promise<Int>.pending() }
        let promises = inputs.map(\.promise)
        benchmark.startMeasurement()
        let winner = race(promises)
        inputs[batch / 2].resolver.fulfill(7)
        precondition(winner.value == 7)
        benchmark.stopMeasurement()
    }

    Benchmark("core_hop_global_chain", configuration: configuration(seconds: 2)) { _ in
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        let queue = DispatchQueue.global()
        for _ in 0..<hopChainLength { tail = tail.map(on: queue) { $0 &+ 1 } }
        let finished = DispatchSemaphore(value: 0)
        tail.pipe { _ in finished.signal() }
        resolver.fulfill(0)
        finished.wait()
        precondition(tail.value == hopChainLength)
    }

    // MARK: Memory (allocated bytes of objects kept pending; the table reports bytes/op)

    // A pending promise as its producer holds it: the promise and its resolver.
    Benchmark("mem_pending_promise", configuration: configuration()) { benchmark in
        var kept: [(promise: Promise<Int>, resolver: Resolver<Int>)] = []
        kept.reserveCapacity(batch)
        benchmark.startMeasurement()
        for _ in 0..<batch { kept.append(Promise<Int>.pending()) }
        benchmark.stopMeasurement()
        blackHole(kept)
    }

    Benchmark("mem_pending_map_link", configuration: configuration()) { _ in
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<chainLength { tail = tail.map(on: nil) { $0 &+ 1 } }
        blackHole(tail)
        blackHole(resolver)
    }

    Benchmark(
        "mem_rss_100k_chain",
        configuration: configuration(
            [.wallClock, .mallocCountTotal, .mallocBytesCount, .peakMemoryResident, .peakMemoryResidentDelta],
            seconds: 3)
    ) { _ in
        let (head, resolver) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<rssChainLength { tail = tail.map(on: nil) { $0 &+ 1 } }
        blackHole(tail)
        blackHole(resolver)
    }

    registerCancellationBenchmarks()
}
