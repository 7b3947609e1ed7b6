import CancellablePromiseKit
import Foundation
import PromiseCore
import XCTest

// A seeded, model-based randomized test of shared work: random operations on one
// `SharedCancellablePromise` (make a follower, cancel one, drop one, settle the source, cancel
// the source from elsewhere), checked after every operation against a small sequential model.
// The model's rule for abandonment: a dropped follower keeps waiting and settles with the
// source, so the source is cancelled only when every follower was cancelled.
// A failure names the seed and the step; to replay one seed, set `firstSeed` and `seeds`.

/// What a model expects of a follower.
private enum Expected: Equatable {
    case waiting
    case value(Int)
    case failed
    case cancelled

    /// What `outcome` shows of its follower.
    init(shownBy outcome: FollowerOutcome) {
        if outcome.isPending {
            self = .waiting
        } else if let value = outcome.value {
            self = .value(value)
        } else if outcome.isCancellation {
            self = .cancelled
        } else {
            self = .failed
        }
    }
}

/// The followers a randomized test made, by the index its model knows them by: whether the test
/// still holds each (`nil` once dropped), and what each settled with.
private struct HeldFollowers {
    private var held: [CancellablePromise<Int>?] = []
    private(set) var outcomes: [FollowerOutcome] = []

    /// Whether the test still holds a follower.
    var anyHeld: Bool { held.contains { $0 != nil } }

    mutating func append(_ follower: CancellablePromise<Int>) {
        held.append(follower)
        outcomes.append(FollowerOutcome(follower))
    }

    /// Cancels a follower still held, picked at random, and passes its index to `cancelled` (to
    /// tell the model); returns the step's name. Only when `anyHeld`.
    mutating func cancelOne(using generator: inout SeededGenerator, _ cancelled: (Int) -> Void) -> String {
        let index = held.indices.filter { held[$0] != nil }.randomElement(using: &generator)!
        held[index]!.cancel()
        cancelled(index)
        return "cancel \(index)"
    }

    /// Drops a follower still held, picked at random (the model: an abandoned follower keeps
    /// waiting), and passes its index to `dropped`; returns the step's name. Only when `anyHeld`.
    mutating func dropOne(using generator: inout SeededGenerator, _ dropped: (Int) -> Void = { _ in }) -> String {
        let index = held.indices.filter { held[$0] != nil }.randomElement(using: &generator)!
        held[index] = nil
        dropped(index)
        return "drop \(index)"
    }

    /// Drops every follower still held.
    mutating func dropAll() { held = held.map { _ in nil } }
}

final class SharedWorkModelTests: XCTestCase {
    private static let firstSeed: UInt64 = 1
    private static let seeds = 2_000
    private static let steps = 40

    /// What the model expects of the source.
    private enum Source: Equatable {
        case pending
        case fulfilled(Int)
        case failed
        /// Cancelled: by its last follower leaving, or from elsewhere.
        case cancelled
    }

    private struct Model {
        var source = Source.pending
        var followers: [Expected] = []
        var cancelClosureCalls = 0

        var waiting: Int { followers.filter { $0 == .waiting }.count }

        /// What a follower made now gets.
        var joining: Expected {
            switch source {
            case .pending: return .waiting
            case .fulfilled(let value): return .value(value)
            case .failed: return .failed
            case .cancelled: return .cancelled
            }
        }

        /// Follower `index` was cancelled: the source is cancelled once none waits any more.
        mutating func cancel(_ index: Int) {
            guard followers[index] == .waiting else { return }
            followers[index] = .cancelled
            if waiting == 0 {
                source = .cancelled
                cancelClosureCalls += 1
            }
        }

        mutating func settle(_ outcome: Source) {
            guard source == .pending else { return }
            source = outcome
            if outcome == .cancelled { cancelClosureCalls += 1 }
            let expected = joining
            followers = followers.map { $0 == .waiting ? expected : $0 }
        }
    }

    func testRandomOperationsFollowTheSequentialModel() {
        for seed in Self.firstSeed..<(Self.firstSeed + UInt64(Self.seeds)) {
            var generator = SeededGenerator(seed: seed)
            var model = Model()
            let task = SharedSourceTask()
            let shared = task.promise.shared()
            var followers = HeldFollowers()
            var weakFollowers: [SharedCancellablePromiseTests.WeakFollower] = []

            for step in 0..<Self.steps {
                let roll = Int.random(in: 0..<100, using: &generator)
                var operation: String
                switch roll {
                case 0..<40:
                    operation = "follower"
                    let follower = shared.follower()
                    followers.append(follower)
                    weakFollowers.append(.init(follower))
                    model.followers.append(model.joining)
                case 40..<60 where followers.anyHeld:
                    operation = followers.cancelOne(using: &generator) { model.cancel($0) }
                case 60..<80 where followers.anyHeld:
                    operation = followers.dropOne(using: &generator) { index in
                        XCTAssertNil(
                            weakFollowers[index].follower, "seed \(seed) step \(step): a dropped follower is freed")
                    }
                case 80..<88:
                    operation = "fulfil"
                    task.resolver.fulfill(step)
                    model.settle(.fulfilled(step))
                case 88..<94:
                    operation = "reject"
                    task.resolver.reject(SharedTestError())
                    model.settle(.failed)
                case 94..<97:
                    operation = "cancel the source"
                    task.promise.cancel()
                    model.settle(.cancelled)
                default:
                    operation = "nothing"
                }

                let context = "seed \(seed) step \(step) (\(operation))"
                XCTAssertEqual(shared.followerCount, model.waiting, context)
                XCTAssertEqual(task.cancelCount.value, model.cancelClosureCalls, context)
                XCTAssertEqual(shared.isCancelled, model.source == .cancelled, context)
                for (index, outcome) in followers.outcomes.enumerated() {
                    XCTAssertEqual(Expected(shownBy: outcome), model.followers[index], "\(context): follower \(index)")
                }
            }
            // Whatever is left: drop every follower (they keep waiting), then settle the source:
            // every follower settled, and nothing is left alive.
            followers.dropAll()
            for (index, outcome) in followers.outcomes.enumerated() {
                XCTAssertEqual(
                    outcome.isPending, model.followers[index] == .waiting,
                    "seed \(seed): dropped follower \(index) waits until the source settles")
            }
            task.resolver.fulfill(-1)
            model.settle(.fulfilled(-1))
            XCTAssertEqual(weakFollowers.filter { $0.follower != nil }.count, 0, "seed \(seed): followers freed")
            XCTAssertEqual(task.cancelCount.value, model.cancelClosureCalls, "seed \(seed)")
            XCTAssertLessThanOrEqual(task.cancelCount.value, 1, "seed \(seed)")
            XCTAssertTrue(followers.outcomes.allSatisfy { !$0.isPending }, "seed \(seed): a follower left pending")
            XCTAssertEqual(shared.followerCount, 0, "seed \(seed)")
        }
    }
}

// The same for an `InFlightCoalescer` with three keys: requests join the work in flight for their
// key or start it anew; followers are cancelled or dropped; work is fulfilled. The model says
// which work each request must share, and when each piece of work must be cancelled (when every
// follower of it was cancelled: a dropped one keeps waiting).
final class InFlightCoalescerModelTests: XCTestCase {
    private static let seeds = 1_000
    private static let steps = 40
    private static let keys = 3

    private struct Model {
        /// Every piece of work started, in order: its key, whether it is in flight, and whether
        /// it was cancelled.
        var works: [(key: Int, inFlight: Bool, cancelled: Bool)] = []
        /// For each follower: the work it shares and what it must have settled with.
        var followers: [(work: Int, expected: Expected)] = []

        func inFlight(_ key: Int) -> Int? { works.indices.last { works[$0].key == key && works[$0].inFlight } }
        func waiting(on work: Int) -> Int {
            followers.filter { $0.work == work && $0.expected == .waiting }.count
        }

        mutating func request(_ key: Int) {
            if let work = inFlight(key) {
                followers.append((work, .waiting))
            } else {
                works.append((key, true, false))
                followers.append((works.count - 1, .waiting))
            }
        }

        /// Follower `index` was cancelled. (A dropped follower keeps waiting: nothing changes.)
        mutating func cancel(_ index: Int) {
            guard followers[index].expected == .waiting else { return }
            followers[index].expected = .cancelled
            let work = followers[index].work
            if waiting(on: work) == 0 {
                works[work].inFlight = false
                works[work].cancelled = true
            }
        }

        mutating func fulfil(_ key: Int, _ value: Int) {
            guard let work = inFlight(key) else { return }
            works[work].inFlight = false
            for index in followers.indices where followers[index].work == work && followers[index].expected == .waiting
            {
                followers[index].expected = .value(value)
            }
        }
    }

    func testRandomRequestsFollowTheSequentialModel() {
        for seed in UInt64(1)...UInt64(Self.seeds) {
            var generator = SeededGenerator(seed: seed)
            var model = Model()
            let coalescer = InFlightCoalescer<Int, Int>()
            var tasks: [SharedSourceTask] = []
            var followers = HeldFollowers()

            for step in 0..<Self.steps {
                let roll = Int.random(in: 0..<100, using: &generator)
                let key = Int.random(in: 0..<Self.keys, using: &generator)
                let operation: String
                switch roll {
                case 0..<45:
                    operation = "request \(key)"
                    let follower = coalescer.promise(for: key) { () -> CancellablePromise<Int> in
                        let task = SharedSourceTask()
                        tasks.append(task)
                        return task.promise
                    }
                    followers.append(follower)
                    model.request(key)
                case 45..<65 where followers.anyHeld:
                    operation = followers.cancelOne(using: &generator) { model.cancel($0) }
                case 65..<80 where followers.anyHeld:
                    operation = followers.dropOne(using: &generator)
                case 80..<100:
                    operation = "fulfil \(key)"
                    if let work = model.inFlight(key), work < tasks.count { tasks[work].resolver.fulfill(step) }
                    model.fulfil(key, step)
                default:
                    operation = "nothing"
                }

                let context = "seed \(seed) step \(step) (\(operation))"
                XCTAssertEqual(tasks.count, model.works.count, "\(context): pieces of work started")
                XCTAssertEqual(coalescer.inFlightCount, model.works.filter(\.inFlight).count, context)
                for key in 0..<Self.keys {
                    let waiting = model.inFlight(key).map { model.waiting(on: $0) } ?? 0
                    XCTAssertEqual(coalescer.followerCount(for: key), waiting, "\(context): key \(key)")
                }
                for (index, work) in model.works.enumerated() where index < tasks.count {
                    XCTAssertEqual(tasks[index].cancelCount.value, work.cancelled ? 1 : 0, "\(context): work \(index)")
                }
                for (index, outcome) in followers.outcomes.enumerated() {
                    XCTAssertEqual(
                        Expected(shownBy: outcome), model.followers[index].expected, "\(context): follower \(index)")
                }
            }
            // Dropping every follower ends nothing; settling the work in flight ends it all.
            followers.dropAll()
            XCTAssertEqual(coalescer.inFlightCount, model.works.filter(\.inFlight).count, "seed \(seed)")
            for key in 0..<Self.keys {
                if let work = model.inFlight(key), work < tasks.count { tasks[work].resolver.fulfill(-1) }
                model.fulfil(key, -1)
            }
            XCTAssertEqual(coalescer.inFlightCount, 0, "seed \(seed): settled work leaves the coalescer")
            for (index, outcome) in followers.outcomes.enumerated() {
                XCTAssertEqual(
                    Expected(shownBy: outcome), model.followers[index].expected, "seed \(seed): follower \(index)")
            }
        }
    }
}
