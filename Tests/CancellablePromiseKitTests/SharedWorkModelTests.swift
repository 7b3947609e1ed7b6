import CancellablePromiseKit
import Foundation
import PromiseCore
import XCTest

// A seeded, model-based randomized test of shared work: random operations on one
// `SharedCancellablePromise` (make a follower, cancel one, drop one, settle the source, cancel
// the source from elsewhere), checked after every operation against a small sequential model.
// A failure names the seed and the step; to replay one seed, set `firstSeed` and `seeds`.

final class SharedWorkModelTests: XCTestCase {
    private static let firstSeed: UInt64 = 1
    private static let seeds = 2_000
    private static let steps = 40

    /// What the model expects of a follower.
    private enum Expected: Equatable {
        case waiting
        case value(Int)
        case failed
        case cancelled
    }

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

        /// Follower `index` was cancelled or abandoned.
        mutating func leave(_ index: Int) {
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
            var held: [CancellablePromise<Int>?] = []
            var outcomes: [FollowerOutcome] = []
            var weakFollowers: [SharedCancellablePromiseTests.WeakFollower] = []

            for step in 0..<Self.steps {
                let roll = Int.random(in: 0..<100, using: &generator)
                let heldIndices = held.indices.filter { held[$0] != nil }
                var operation: String
                switch roll {
                case 0..<40:
                    operation = "follower"
                    let follower = shared.follower()
                    held.append(follower)
                    outcomes.append(FollowerOutcome(follower))
                    weakFollowers.append(.init(follower))
                    model.followers.append(model.joining)
                case 40..<60 where !heldIndices.isEmpty:
                    let index = heldIndices.randomElement(using: &generator)!
                    operation = "cancel \(index)"
                    held[index]!.cancel()
                    model.leave(index)
                case 60..<80 where !heldIndices.isEmpty:
                    let index = heldIndices.randomElement(using: &generator)!
                    operation = "drop \(index)"
                    held[index] = nil
                    model.leave(index)
                    XCTAssertNil(
                        weakFollowers[index].follower, "seed \(seed) step \(step): a dropped follower is freed")
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
                for (index, outcome) in outcomes.enumerated() {
                    let actual: Expected
                    if outcome.isPending {
                        actual = .waiting
                    } else if let value = outcome.value {
                        actual = .value(value)
                    } else if outcome.isCancellation {
                        actual = .cancelled
                    } else {
                        actual = .failed
                    }
                    XCTAssertEqual(actual, model.followers[index], "\(context): follower \(index)")
                }
            }
            // Whatever is left: settle or drop, then nothing is left alive.
            if generator.chance(0.5) {
                task.resolver.fulfill(-1)
            }
            held = []
            XCTAssertEqual(weakFollowers.filter { $0.follower != nil }.count, 0, "seed \(seed): followers freed")
            XCTAssertLessThanOrEqual(task.cancelCount.value, 1, "seed \(seed)")
            XCTAssertTrue(outcomes.allSatisfy { !$0.isPending }, "seed \(seed): a follower left pending")
        }
    }
}
