import CancellablePromiseKit
import Foundation
import PromiseCore
import XCTest

// How `RetryDelay`'s jitter and cap combine, and `retry(…using:…)`, which pins the waits with a
// generator of the test's own (`SeededGenerator`).

final class RetryJitterTests: XCTestCase {
    private struct Flaky: Error {}

    private let capped = RetryDelay.exponential(initial: 1, multiplier: 2, maximum: 3, jitter: 0.5)

    /// "The growing wait is multiplied by a random factor … first, and the product is then
    /// capped": each wait is `min(initial × multiplier^(n-1) × (1 + jitter × r), maximum)` for
    /// the one number `r` it draws.
    func testEachWaitIsTheJitteredUncappedWaitThenCapped() {
        for seed in 0..<200 as Range<UInt64> {
            var draws = SeededGenerator(seed: seed)
            var waits = SeededGenerator(seed: seed)
            for attempt in 1...5 {
                let factor = 1 + 0.5 * Double.random(in: -1...1, using: &draws)
                let uncapped = pow(2, Double(attempt - 1))
                XCTAssertEqual(capped.seconds(after: attempt, using: &waits), min(uncapped * factor, 3))
            }
        }
    }

    /// With `initial: 1, multiplier: 2, maximum: 3, jitter: 0.5` the third wait is 2–3 s (4 s
    /// jittered to 2–6 s, capped), not 1.5–3 s, and often exactly the cap.
    func testThirdWaitIsBetweenTwoAndThreeSeconds() {
        var generator = SeededGenerator(seed: 1)
        let thirds = (0..<10_000).map { _ in capped.seconds(after: 3, using: &generator) }
        XCTAssertGreaterThanOrEqual(thirds.min()!, 2)
        XCTAssertLessThan(thirds.min()!, 2.05, "the low end is reached")
        XCTAssertEqual(thirds.max(), 3)
        XCTAssertGreaterThan(thirds.filter { $0 == 3 }.count, 4_000, "a jittered 4 s is above the cap half the time")
        let fourths = (0..<1_000).map { _ in capped.seconds(after: 4, using: &generator) }
        XCTAssertEqual(Set(fourths), [3], "8 s jittered down to 4 s is still above the cap")
    }

    /// "With the same generator state, the same wait comes out", and a policy without jitter
    /// draws nothing.
    func testSameGeneratorStateGivesTheSameWaits() {
        var first = SeededGenerator(seed: 5)
        var second = SeededGenerator(seed: 5)
        for attempt in 1...6 {
            XCTAssertEqual(
                capped.seconds(after: attempt, using: &first), capped.seconds(after: attempt, using: &second))
        }
        var untouched = SeededGenerator(seed: 5)
        var reference = SeededGenerator(seed: 5)
        _ = RetryDelay.exponential(initial: 1, maximum: 3).seconds(after: 2, using: &untouched)
        _ = RetryDelay.fixed(1).seconds(after: 2, using: &untouched)
        XCTAssertEqual(untouched.next(), reference.next(), "no jitter, no draw")
    }

    /// `retry(…using:…)` waits exactly `delay.seconds(after: n, using: &copy)` after attempt
    /// `n`, drawn in attempt order from its own copy of the generator: each attempt starts at
    /// the sum of the computed waits (to the nanosecond).
    func testRetryUsingAGeneratorWaitsExactlyAsComputed() {
        let scheduler = TestScheduler()
        let starts = Recorder<TimeInterval>()
        let result = retry(maxAttempts: 4, delay: capped, scheduler: scheduler, using: SeededGenerator(seed: 9)) {
            _ -> Promise<Int> in
            starts.append(scheduler.now)
            return Promise(error: Flaky())
        }
        scheduler.run()
        XCTAssertTrue(result.error is Flaky)

        var expected = SeededGenerator(seed: 9)
        var nanoseconds: Int64 = 0
        var expectedStarts: [TimeInterval] = [0]
        for attempt in 1...3 {
            nanoseconds += Int64((capped.seconds(after: attempt, using: &expected) * 1e9).rounded())
            expectedStarts.append(Double(nanoseconds) / 1e9)
        }
        XCTAssertEqual(starts.all, expectedStarts)
    }

    /// Two retries given the same generator value draw the same waits: each uses its own copy.
    func testEachRetryUsesItsOwnCopyOfTheGenerator() {
        let generator = SeededGenerator(seed: 3)
        var dueTimes: [TimeInterval?] = []
        for _ in 0..<2 {
            let scheduler = TestScheduler()
            let result = retry(maxAttempts: 2, delay: capped, scheduler: scheduler, using: generator) {
                _ -> Promise<Int> in Promise(error: Flaky())
            }
            dueTimes.append(scheduler.nextDueTime)
            result.cancel()
        }
        XCTAssertEqual(dueTimes[0], dueTimes[1])
        XCTAssertNotNil(dueTimes[0])
    }
}
