// Shared work (SharedCancellablePromise, InFlightCoalescer): a follower made and cancelled, a
// coalescer hit made and cancelled, each against `cancel_resolver_cancel` (the plain
// `CancellablePromise(resolver:)` + cancel that every follower is built on); and many followers
// of one source, at a small and a large size. All handlers `on: nil`.

import Benchmark
import CancellablePromiseKit

func registerSharingBenchmarks() {
    // A follower of a running source made and cancelled; another follower keeps the source
    // running, so each cancel withdraws one interest and cancels nothing else.
    Benchmark("share_follower_cancel", configuration: configuration()) { benchmark in
        let (source, resolver) = CancellablePromise<Int>.pending()
        let shared = source.shared()
        let keep = shared.follower()
        benchmark.startMeasurement()
        for _ in 0..<batch {
            let follower = shared.follower()
            follower.cancel()
            precondition(follower.promise.isRejected)
        }
        benchmark.stopMeasurement()
        precondition(shared.followerCount == 1 && !source.isCancelled)
        resolver.fulfill(1)
        precondition(keep.value == 1)
    }

    // A request for a key with work in flight (a hit: `start` is not called), then cancelled.
    Benchmark("coalesce_hit_cancel", configuration: configuration()) { benchmark in
        let coalescer = InFlightCoalescer<Int, Int>()
        let (source, resolver) = CancellablePromise<Int>.pending()
        let keep = coalescer.promise(for: 0) { source }
        benchmark.startMeasurement()
        for _ in 0..<batch {
            let follower = coalescer.promise(for: 0) { () -> CancellablePromise<Int> in
                preconditionFailure("a hit starts nothing")
            }
            follower.cancel()
            precondition(follower.promise.isRejected)
        }
        benchmark.stopMeasurement()
        precondition(coalescer.followerCount(for: 0) == 1)
        resolver.fulfill(1)
        precondition(keep.value == 1)
    }

    // Many followers of one source (adding and removing one costs O(1) amortised): `structures` sources of `count` followers side
    // by side (the small row: 64 x 1,000; the large row: 1 x 64,000, the same 64,000 followers).
    for (suffix, count) in [("1k", scalingSmall), ("64k", longLivedLarge)] {
        let structures = longLivedLarge / count
        Benchmark("share_followers_\(suffix)", configuration: configuration(seconds: 2)) { benchmark in
            followersOfOneSource(count, structures: structures, benchmark)
        }
    }
}

/// `structures` shared sources, each given `count` followers; every other follower is cancelled,
/// oldest first, then the source is fulfilled and settles the rest. Measures all three.
func followersOfOneSource(_ count: Int, structures: Int, _ benchmark: Benchmark) {
    let sources = (0..<structures).map { _ in CancellablePromise<Int>.pending() }
    let shared = sources.map { $0.promise.shared() }
    var followers: [CancellablePromise<Int>] = []
    followers.reserveCapacity(count * structures)
    benchmark.startMeasurement()
    for handle in shared {
        for _ in 0..<count { followers.append(handle.follower()) }
    }
    for index in stride(from: 0, to: followers.count, by: 2) { followers[index].cancel() }
    for source in sources { source.resolver.fulfill(1) }
    benchmark.stopMeasurement()
    precondition(followers[1].value == 1 && followers[0].promise.isRejected, "followers did not settle")
    precondition(shared.allSatisfy { $0.followerCount == 0 && !$0.isCancelled })
}
