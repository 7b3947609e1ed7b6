// The benchmarks: same-run baselines, the PromiseCore workloads and memory here, the
// cancellation layer in `Cancellation.swift`, the small/large pairs in `Scaling.swift`, timers
// in `Timers.swift`. Every
// benchmark runs a batch of `n` operations per iteration; the table printed by
// `Benchmarks/run` divides the p50 of each metric by `n` (the batch sizes are listed there).
// All handlers run with `on: nil` unless the name says otherwise, so the numbers are the
// library's own cost.

import Benchmark
import CancellablePromiseKit
import Dispatch
import SharedWorkloads
import Synchronization

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

    @inline(__always) var lockAddress: UnsafeMutablePointer<pthread_mutex_t> { firstMutex(of: self) }
}

/// The address of an object's first stored property, a `pthread_mutex_t` (past the 16-byte
/// object header), as a promise's inline lock word is found.
@inline(__always) func firstMutex(of object: AnyObject) -> UnsafeMutablePointer<pthread_mutex_t> {
    UnsafeMutableRawPointer(Unmanaged.passUnretained(object).toOpaque())
        .advanced(by: 16)
        .assumingMemoryBound(to: pthread_mutex_t.self)
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

/// Counts the closures of a workload that ran (on the thread that runs them all). Atomic
/// (relaxed): a token's handlers are `@Sendable`. `base_locked_closures` counts with it too, so
/// that row and `token_oncancel_cancel` still run the same closures.
final class Counter: Sendable {
    private let count = Atomic<Int>(0)

    @inline(__always) func increment() {
        count.wrappingAdd(1, ordering: .relaxed)
    }

    var value: Int { count.load(ordering: .relaxed) }
}

/// A list of closures behind a mutex: appended one by one, then taken out at once and called
/// outside the lock, as a cancellation token keeps and runs its handlers.
final class LockedClosures {
    var word = pthread_mutex_t()  // must stay the first stored property
    private var closures: [() -> Void] = []

    deinit { pthread_mutex_destroy(firstMutex(of: self)) }

    func append(_ closure: @escaping () -> Void) {
        pthread_mutex_lock(firstMutex(of: self))
        closures.append(closure)
        pthread_mutex_unlock(firstMutex(of: self))
    }

    func takeAll() -> [() -> Void] {
        pthread_mutex_lock(firstMutex(of: self))
        defer { pthread_mutex_unlock(firstMutex(of: self)) }
        let taken = closures
        closures = []
        return taken
    }
}

/// The end of a task the benchmark cannot await directly: `signal()` from the task, `await
/// wait()` from the benchmark, in either order. One waiter.
final class TaskEnd: @unchecked Sendable {
    var word = pthread_mutex_t()  // must stay the first stored property
    private var ended = false
    private var waiter: UnsafeContinuation<Void, Never>?

    deinit { pthread_mutex_destroy(firstMutex(of: self)) }

    func signal() {
        pthread_mutex_lock(firstMutex(of: self))
        ended = true
        let waiter = self.waiter
        self.waiter = nil
        pthread_mutex_unlock(firstMutex(of: self))
        waiter?.resume()
    }

    func wait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            pthread_mutex_lock(firstMutex(of: self))
            if ended {
                pthread_mutex_unlock(firstMutex(of: self))
                continuation.resume()
            } else {
                waiter = continuation
                pthread_mutex_unlock(firstMutex(of: self))
            }
        }
    }
}

// MARK: - Batch sizes (keep in sync with the N column of `Benchmarks/run`)

let batch = 1_000
let chainLength = 1_000
let hopChainLength = 10_000
let taskBatch = 100
let rssChainLength = 100_000
/// Scaling pairs (Scaling.swift): the small size of each pair, and the large ones.
let scalingSmall = 1_000
let aggregateLarge = 16_000
let loopLarge = 64_000
let joinLarge = 64_000
let longLivedLarge = 64_000

/// The serial queue of the queue-hop rows (the default queue of `then`/`map` is the main
/// queue, which nothing drains in the benchmark process).
let hopQueue = DispatchQueue(label: "PromiseBenchmarks.hops")

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

    // 10,000 blocks on one serial queue, each enqueuing the next (the baseline of a hop chain).
    Benchmark("base_queue_hops", configuration: configuration()) { _ in
        let done = DispatchSemaphore(value: 0)
        hop(hopChainLength, on: hopQueue, done: done)
        done.wait()
    }

    // 1,000 closures appended to a list under a mutex, then taken out and called (the baseline
    // of token handlers).
    Benchmark("base_locked_closures", configuration: configuration()) { _ in
        let counter = Counter()
        let list = LockedClosures()
        for _ in 0..<batch { list.append { counter.increment() } }
        for closure in list.takeAll() { closure() }
        precondition(counter.value == batch)
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

    // The operators built on the general step, one of each, on a promise made with a resolver:
    // a typical PromiseKit chain's tail.
    Benchmark("core_general_ops", configuration: configuration()) { _ in
        for i in 0..<batch {
            let promise = Promise<Int> { $0.fulfill(i) }
            let end = promise.get(on: nil) { blackHole($0) }.tap(on: nil) { _ in }.compactMap(on: nil) { $0 }
                .recover(on: nil) { _ in Promise.value(0) }.ensure(on: nil) {}.asVoid().catch(on: nil) { _ in }
            blackHole(end)
        }
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

    // `race` and `when` at the size most code uses them: two inputs, both fulfilled.
    Benchmark("core_race_when_two", configuration: configuration()) { _ in
        for i in 0..<batch { raceAndWhenOverTwo(i) }
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

    // A 10,000-link map chain on one serial queue, as handlers on a default queue hop: every
    // link is one `async` on the queue (baseline: `base_queue_hops`). `map` rather than `then`
    // returning `Promise.value`: one hop and one closure per link, as the baseline has, with no
    // promise made by the body. The chain is built before timing and its links are kept until
    // after it (so they are not freed while it runs); the time is the run, from fulfilling the
    // head to the tail's handler.
    Benchmark("core_hop_serial_map_chain", configuration: configuration(seconds: 2)) { benchmark in
        let chain = SerialHopChain(length: hopChainLength, on: hopQueue)
        benchmark.startMeasurement()
        chain.run()
        benchmark.stopMeasurement()
        precondition(chain.isComplete)
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
    registerScalingBenchmarks()
    registerSharingBenchmarks()
    registerTimerBenchmarks()
}
