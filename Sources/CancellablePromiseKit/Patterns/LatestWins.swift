import Dispatch
import PromiseCore

// Latest wins: each new run cancels the one before it, so at most one run — the latest — can
// still deliver a result. The promise-world counterpart of Combine's `switchToLatest` and
// RxSwift's `flatMapLatest`.
//
// The state is a generation counter and the handle (`CancelContext`) of the latest run, behind
// one lock. `run` takes a generation and the previous run's handle under the lock, cancels that
// run after releasing it, starts the new one, then stores its handle only if no newer run has
// started meanwhile; otherwise the new run is itself stale and is cancelled at once. The handle
// of a settled chain holds nothing, so keeping the latest run's handle until the next run keeps
// only that run's pending promises.

/// Runs one task at a time, the latest: starting a run cancels the previous run's whole chain
/// first, so a stale run can never deliver its result — search-as-you-type, "refresh" tapped
/// twice, a detail view that follows the selection.
///
/// ```swift
/// final class SearchController {
///     private let searches = LatestWins()
///
///     func textDidChange(_ text: String) {
///         searches.run {
///             api.search(text)                  // a CancellablePromise or a Promise
///         }.done { results in
///             self.show(results)                // only ever for the latest text
///         }.catch { error in
///             self.show(error)                  // a cancelled search is skipped
///         }
///     }
/// }
/// ```
///
/// It is what Combine's `switchToLatest` and RxSwift's `flatMapLatest` do for streams, for
/// promises:
/// - ``run(_:)`` cancels the previous run's chain — its task, its pending steps, the steps
///   chained to it after `run` returned (the `done` above) — *before* it calls the new body, on
///   the calling thread, as `cancel()` would;
/// - when runs are started from several threads at once, the one that starts last (in the
///   order `run` takes its lock) is the latest; every other run is cancelled, by the run after
///   it or, if it lost the race to a newer run, by itself as soon as its body has returned;
/// - ``cancel()`` cancels the latest run (the search field was cleared); the next `run` works
///   as usual;
/// - when the `LatestWins` is deallocated (its owner went away), the latest run is cancelled.
///
/// It holds only the latest run's ``CancelContext``, which holds nothing once that run's chain
/// has settled. Thread-safe: call `run` and `cancel` from any thread.
public final class LatestWins: Sendable {
    private struct State {
        /// Incremented by every run; the run holding the current value is the latest.
        var generation: UInt64 = 0
        /// The latest run's chain, once its body has returned.
        var latest: CancelContext?

        /// A run starts: it becomes the latest; returns its generation and the run to cancel.
        mutating func begin() -> (generation: UInt64, previous: CancelContext?) {
            generation &+= 1
            defer { latest = nil }
            return (generation, latest)
        }

        /// The run `generation`'s body returned the chain `context`: kept if that run is still
        /// the latest; otherwise returned, to be cancelled (a newer run started meanwhile).
        mutating func started(_ generation: UInt64, _ context: CancelContext) -> CancelContext? {
            guard generation == self.generation else { return context }
            latest = context
            return nil
        }

        /// `cancel()`: takes the latest run, to cancel.
        mutating func take() -> CancelContext? {
            defer { latest = nil }
            return latest
        }
    }

    private let state = Locked(State())

    /// Creates an instance with no run.
    public init() {}

    deinit {
        state.withLock { $0.take() }?.cancel()
    }

    /// Cancels the previous run's chain, then calls `body` and returns its promise as the latest
    /// run.
    ///
    /// Everything happens synchronously on the calling thread: the previous run is cancelled
    /// (its pending promises rejected with `CancellablePromiseError.cancelled`, its cancel
    /// closures called once, its `ensure`/`catch(policy: .allErrors)` handlers released to
    /// their queues), then `body` runs. Handlers chained to the returned promise run where their
    /// `on:` says; they belong to this run, and the next run cancels them too if they have not
    /// run yet.
    ///
    /// `body` may return a ``CancellablePromise``, or a `Promise`/`Guarantee` which is made
    /// cancellable with `cancellize()` (an attached task, such as a PromiseFoundation request,
    /// is stopped when the run is cancelled). If `body` throws, the run is a promise rejected
    /// with that error. If a newer run started on another thread while `body` ran, the returned
    /// promise is cancelled before `run` returns.
    @discardableResult
    public func run<R: Thenable>(_ body: () throws -> R) -> CancellablePromise<R.T> {
        let (generation, previous) = state.withLock { $0.begin() }
        previous?.cancel()
        let promise: CancellablePromise<R.T>
        do {
            promise = try body().cancellize()
        } catch {
            promise = CancellablePromise(error: error)
        }
        if let stale = state.withLock({ $0.started(generation, promise.cancelContext) }) {
            stale.cancel()
        }
        return promise
    }

    /// Cancels the latest run's chain, if it has not settled; later runs are not affected.
    /// Synchronous on the calling thread, like `CancellablePromise.cancel()`.
    public func cancel() {
        state.withLock { $0.take() }?.cancel()
    }
}
