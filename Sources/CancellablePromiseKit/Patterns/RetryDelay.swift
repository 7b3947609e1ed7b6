import Foundation

// What `retry` is configured with: the delay policy between attempts, and the error for
// arguments it cannot run with.

// MARK: - Delay policy

/// How long ``retry(maxAttempts:delay:on:scheduler:if:_:)`` waits after a failed attempt before it starts
/// the next one.
///
/// ```swift
/// .immediately                                  // no wait
/// .fixed(0.5)                                   // 0.5 s before every retry
/// .exponential(initial: 0.1, multiplier: 2, maximum: 5, jitter: 0.1)
///                                               // about 0.1, 0.2, 0.4 … s, never above 5 s
/// ```
///
/// The jitter is random: `retry` draws it from the system's generator, or from the one given
/// as `retry(…using:…)`, and ``seconds(after:using:)`` computes a wait from a generator of the
/// caller's, so a test can pin every wait.
///
/// A policy with a negative, NaN or otherwise impossible parameter is not rejected when it is
/// made but by `retry`, which then fails with ``RetryConfigurationError/invalidDelay(_:)``
/// without running any attempt. ``isValid`` tells in advance. (A NaN wait counts as an infinite
/// one, as everywhere in the package, and a retry cannot wait forever.)
public struct RetryDelay: Sendable, Equatable, CustomStringConvertible {
    enum Policy: Sendable, Equatable {
        case immediately
        case fixed(TimeInterval)
        case exponential(initial: TimeInterval, multiplier: Double, maximum: TimeInterval, jitter: Double)
    }

    let policy: Policy

    /// The next attempt starts as soon as the previous one has failed.
    public static let immediately = RetryDelay(policy: .immediately)

    /// The same wait, `seconds`, before every retry. `seconds` must be finite and not negative.
    public static func fixed(_ seconds: TimeInterval) -> RetryDelay {
        RetryDelay(policy: .fixed(seconds))
    }

    /// A wait that grows after each failed attempt: `initial` seconds after the first,
    /// `initial × multiplier` after the second, `initial × multiplier²` after the third…, never
    /// more than `maximum`.
    ///
    /// `jitter` spreads retries of many clients apart: the growing wait is multiplied by a
    /// random factor between `1 - jitter` and `1 + jitter` first, and the product is then
    /// capped at `maximum`. The wait after attempt `n` is exactly
    ///
    ///     min(initial × multiplier^(n-1) × factor, maximum)
    ///
    /// so with `jitter: 0.1` a wait of 0.4 s becomes anything from 0.36 s to 0.44 s, and with
    /// `.exponential(initial: 1, multiplier: 2, maximum: 3, jitter: 0.5)` the waits are 0.5–1.5 s,
    /// 1–3 s, then 2–3 s (4 s jittered to 2–6 s, capped), then 3 s. Once the uncapped wait times
    /// `1 - jitter` reaches `maximum`, every wait is `maximum`: choose `maximum` above the
    /// waits you want spread. Each wait with a `jitter` above 0 draws one number from the
    /// generator (see ``seconds(after:using:)``).
    ///
    /// - Parameters:
    ///   - initial: the first wait, in seconds: finite, not negative.
    ///   - multiplier: how much each wait grows: finite, at least 1.
    ///   - maximum: the cap on every wait, in seconds: not negative (`.infinity` for none).
    ///   - jitter: the random spread, from 0 (none) to 1.
    public static func exponential(
        initial: TimeInterval, multiplier: Double = 2, maximum: TimeInterval = .infinity, jitter: Double = 0
    ) -> RetryDelay {
        RetryDelay(policy: .exponential(initial: initial, multiplier: multiplier, maximum: maximum, jitter: jitter))
    }

    /// `true` if `retry` accepts this policy: no negative, NaN or infinite wait, a multiplier of
    /// at least 1 and a jitter between 0 and 1.
    public var isValid: Bool {
        switch policy {
        case .immediately:
            return true
        case .fixed(let seconds):
            return seconds.isFinite && seconds >= 0
        case .exponential(let initial, let multiplier, let maximum, let jitter):
            return initial.isFinite && initial >= 0 && multiplier.isFinite && multiplier >= 1
                && !maximum.isNaN && maximum >= 0 && jitter.isFinite && (0...1).contains(jitter)
        }
    }

    /// The wait, in seconds, after attempt number `attempt` (1 for the first) has failed, with
    /// the system's random number generator for the jitter. Never negative; `0` for an invalid
    /// policy.
    public func seconds(after attempt: Int) -> TimeInterval {
        var generator = SystemRandomNumberGenerator()
        return seconds(after: attempt, using: &generator)
    }

    /// The wait, in seconds, after attempt number `attempt` (1 for the first) has failed, drawing
    /// the jitter from `generator`. Never negative; `0` for an invalid policy.
    ///
    /// An exponential policy with a `jitter` above 0 draws exactly one number per call,
    /// `Double.random(in: -1...1, using: &generator)`, and the factor is `1 + jitter × number`;
    /// the other policies draw none. With the same generator state, the same wait comes out.
    public func seconds<G: RandomNumberGenerator>(after attempt: Int, using generator: inout G) -> TimeInterval {
        guard isValid else { return 0 }
        switch policy {
        case .immediately:
            return 0
        case .fixed(let seconds):
            return seconds
        case .exponential(let initial, let multiplier, let maximum, let jitter):
            let factor = jitter > 0 ? 1 + jitter * Double.random(in: -1...1, using: &generator) : 1
            // Zero stays zero however much it grows (0 × infinity would be NaN).
            guard initial > 0 else { return 0 }
            let uncapped = initial * pow(multiplier, Double(max(0, attempt - 1)))
            // An overflowed wait is the cap whatever the factor (infinity × 0 would be NaN).
            guard uncapped.isFinite else { return maximum }
            return min(uncapped * factor, maximum)
        }
    }

    /// `immediately`, `fixed(0.5)`, `exponential(initial: 0.1, multiplier: 2.0, maximum: 5.0, jitter: 0.1)`.
    public var description: String {
        switch policy {
        case .immediately:
            return "immediately"
        case .fixed(let seconds):
            return "fixed(\(seconds))"
        case .exponential(let initial, let multiplier, let maximum, let jitter):
            return "exponential(initial: \(initial), multiplier: \(multiplier), maximum: \(maximum), jitter: \(jitter))"
        }
    }
}

// MARK: - Bad input

/// The error ``retry(maxAttempts:delay:on:scheduler:if:_:)`` fails with when it is given arguments it
/// cannot run with. No attempt runs then; the returned promise is already rejected.
public enum RetryConfigurationError: Error, Sendable, Equatable, CustomStringConvertible, LocalizedError {
    /// `maxAttempts` was less than 1 (the associated value is what was passed).
    case invalidMaxAttempts(Int)
    /// The delay policy has a negative, NaN or infinite wait, a multiplier below 1 or a jitter
    /// outside 0…1 (see ``RetryDelay/isValid``).
    case invalidDelay(RetryDelay)

    /// What was wrong, in one sentence.
    public var description: String {
        switch self {
        case .invalidMaxAttempts(let count):
            return "retry needs maxAttempts of at least 1, got \(count)"
        case .invalidDelay(let delay):
            return "retry cannot use the delay \(delay): waits must be finite and not negative, "
                + "the multiplier at least 1 and the jitter within 0...1"
        }
    }

    /// The same as `description`.
    public var errorDescription: String? { description }
}
