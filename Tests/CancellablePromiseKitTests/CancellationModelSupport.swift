import CancellablePromiseKit
import Foundation
import PromiseCore

// Small pieces the model-based cancellation test is built from: a seeded generator, the run
// settings read from the environment, the outcome of a promise as plain data, the errors the
// generated tasks and steps fail with, and the objects whose release the test observes.

// MARK: - Run settings

/// The seed and rounds of a model-based run.
///
/// `CPK_MODEL_SEED` fixes the seed (a random one is drawn otherwise), `CPK_MODEL_ROUNDS` the number
/// of rounds and `CPK_MODEL_FIRST_ROUND` the first round. Every round draws from its own seed,
/// derived from the run's seed and its number, so one failing round can be replayed on its own.
struct ModelRunSettings {
    let seed: UInt64
    let firstRound: Int
    let rounds: Int

    static func fromEnvironment(defaultRounds: Int) -> ModelRunSettings {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["CPK_MODEL_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        let rounds = environment["CPK_MODEL_ROUNDS"].flatMap { Int($0) } ?? defaultRounds
        let firstRound = environment["CPK_MODEL_FIRST_ROUND"].flatMap { Int($0) } ?? 0
        return ModelRunSettings(seed: seed, firstRound: firstRound, rounds: rounds)
    }

    var roundRange: Range<Int> { firstRound..<(firstRound + rounds) }

    func generator(forRound round: Int) -> SeededGenerator {
        var mixer = SeededGenerator(seed: seed ^ (UInt64(truncatingIfNeeded: round) &* 0xD1B5_4A32_D192_ED03))
        return SeededGenerator(seed: mixer.next())
    }

    /// The environment that replays `round` alone.
    func replay(round: Int) -> String {
        "CPK_MODEL_SEED=\(seed) CPK_MODEL_FIRST_ROUND=\(round) CPK_MODEL_ROUNDS=1"
    }
}

// MARK: - Outcomes

/// What a promise settled with, as plain data the model can predict.
enum Outcome: Hashable, CustomStringConvertible {
    case fulfilled(Int)
    case rejected(ErrorKind)

    init(_ result: PromiseCore.Result<Int>) {
        switch result {
        case .fulfilled(let value): self = .fulfilled(value)
        case .rejected(let error): self = .rejected(ErrorKind(error))
        }
    }

    init(_ result: PromiseCore.Result<Void>) {
        switch result {
        case .fulfilled: self = .fulfilled(0)
        case .rejected(let error): self = .rejected(ErrorKind(error))
        }
    }

    var isRejected: Bool {
        if case .rejected = self { return true }
        return false
    }

    var description: String {
        switch self {
        case .fulfilled(let value): return "fulfilled(\(value))"
        case .rejected(let error): return "rejected(\(error))"
        }
    }
}

/// The errors a round can produce, told apart.
enum ErrorKind: Hashable, CustomStringConvertible {
    /// `CancellablePromiseError.cancelled`.
    case cancelled
    /// The error of `cancel(with:)` on the chain with this number.
    case chainCancel(Int)
    /// The task with this number failed.
    case task(Int)
    /// The step with this number threw.
    case step(Int)
    /// `race(fulfilled:)` without a fulfilled input.
    case noWinner
    /// `PromiseTimeoutError`.
    case timeout
    case unexpected(String)

    init(_ error: Error) {
        switch error {
        case CancellablePromiseError.cancelled: self = .cancelled
        case let failure as TaskFailure: self = .task(failure.task)
        case let failure as StepFailure: self = .step(failure.node)
        case let cancel as ChainCancel: self = .chainCancel(cancel.chain)
        case is PromiseTimeoutError: self = .timeout
        case PMKError.noWinner: self = .noWinner
        default: self = .unexpected(String(describing: error))
        }
    }

    /// A number standing for the error, for folding the results of `when(resolved:)`.
    var code: Int {
        switch self {
        case .cancelled: return -1
        case .noWinner: return -2
        case .timeout: return -3
        case .unexpected: return -4
        case .chainCancel(let chain): return -1_000 - chain
        case .task(let task): return -2_000 - task
        case .step(let node): return -3_000 - node
        }
    }

    var description: String {
        switch self {
        case .cancelled: return "cancelled"
        case .chainCancel(let chain): return "cancel(with:) of c\(chain)"
        case .task(let task): return "failure of t\(task)"
        case .step(let node): return "throw in n\(node)"
        case .noWinner: return "noWinner"
        case .timeout: return "timeout"
        case .unexpected(let text): return "unexpected \(text)"
        }
    }
}

/// A generated task failing on its own.
struct TaskFailure: Error {
    let task: Int
}

/// A generated step body throwing.
struct StepFailure: Error {
    let node: Int
}

/// The error of `cancel(with:)`; not a cancellation error (`isCancelled` is `false`), so only the
/// chain's own rules keep `recover` from running for it.
struct ChainCancel: Error {
    let chain: Int
}

// MARK: - Observed objects

/// An object whose only job is to be released: task cancel closures and step bodies capture one,
/// and a weak reference to it tells whether the closure was released.
final class Tracked: @unchecked Sendable {}

/// A weak reference that can live in an array.
struct WeakRef {
    weak var object: AnyObject?
}

/// What the test can cancel a chain through: a `CancellablePromise`, a `CancellableFinalizer` or
/// a `CancelContext`.
protocol CancelHandle: AnyObject {
    func cancel()
    func cancel(with error: Error)
    var isCancelled: Bool { get }
}

extension CancellablePromise: CancelHandle {}
extension CancellableFinalizer: CancelHandle {}
extension CancelContext: CancelHandle {}
