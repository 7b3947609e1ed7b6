import CancellablePromiseKit
import Foundation

// `Progress` and cancellable promises: a progress object is what a progress indicator with a
// "Cancel" button is bound to, so cancelling the progress should stop the work, and stopping the
// work should show as a cancelled progress.

/// `cancel()` is `Progress.cancel()`: it marks the progress (and its children) cancelled and
/// calls its `cancellationHandler`; `isCancelled` is the progress's own flag.
///
/// So a `CancellationToken` can cancel a progress (`token.register(progress)`), and a
/// `CancelBag` can hold one, weakly: `progress.store(in: bag)` cancels the progress when the
/// bag is cancelled or deallocated.
///
/// On Linux, swift-corelibs-foundation's `Progress` is not internally synchronised: its
/// `cancel()` and `isCancelled` are safe only where the rest of your code touching that progress
/// object is (one queue, or your own lock). On Apple platforms `Progress` is thread-safe.
extension Progress: Cancellable {}

extension CancellablePromise {
    /// Ties this promise's chain and `progress` together, both ways, until this promise settles:
    /// `progress.cancel()` (what a "Cancel" button bound to the progress calls) cancels the
    /// chain, and cancelling the chain cancels the progress. Returns `self`, to keep chaining.
    ///
    /// ```swift
    /// let progress = Progress(totalUnitCount: 100)
    /// progressView.observedProgress = progress          // its Cancel button calls progress.cancel()
    /// download(url, reportingTo: progress)
    ///     .bind(to: progress)
    ///     .done { file in open(file) }
    ///     .catch { error in show(error) }               // a cancellation is skipped
    /// ```
    ///
    /// **Progress → chain.** A handler is added to `progress.cancellationHandler` (the handler
    /// that was there keeps running first). `Progress` calls it on a queue of its choosing, not
    /// necessarily the thread that called `cancel()`, so the chain is cancelled there, shortly
    /// after — with `CancellablePromiseError.cancelled`, as `cancel()` does. If `progress` is
    /// already cancelled, the chain is cancelled at once, on this thread. Until this promise
    /// settles, the progress holds the chain's `CancelContext` and so keeps the chain
    /// cancellable; after that the handler holds nothing and does nothing.
    ///
    /// **Chain → progress.** When this promise is rejected because its chain was cancelled
    /// (by `cancel()` on any of its promises, a bag, a token, an `autoCancel` combinator, or a
    /// timeout), `progress.cancel()` is called synchronously on the thread that cancelled the
    /// chain. A promise that fulfils, or fails with an error that is not a cancellation, leaves
    /// the progress alone: updating its unit counts stays your code's job. The chain holds the
    /// progress weakly.
    ///
    /// The progress's `isCancellable` is set to `true`.
    @discardableResult
    public func bind(to progress: Progress) -> CancellablePromise<T> {
        guard promise.isPending else { return self }
        if progress.isCancelled {
            cancel()
            return self
        }
        let binding = ProgressBinding(cancelContext)
        let previous = progress.cancellationHandler
        progress.isCancellable = true
        progress.cancellationHandler = {
            previous?()
            binding.progressCancelled()
        }
        // Everything weak: the promise must not hold its own chain's handle (a cycle that would
        // keep abandoned work alive), nor the progress.
        promise.pipe { [weak binding, weak progress, weak context = cancelContext] result in
            binding?.end()
            guard case .rejected(let error) = result else { return }
            guard error.isCancelled || context?.isCancelled == true, let progress, !progress.isCancelled else {
                return
            }
            progress.cancel()
        }
        return self
    }
}

/// What a progress's cancellation handler holds: the chain's handle until the chain settles.
private final class ProgressBinding: Sendable {
    private let context: Locked<CancelContext?>

    init(_ context: CancelContext) {
        self.context = Locked(context)
    }

    /// The progress was cancelled: cancel the chain, if still bound.
    func progressCancelled() {
        context.withLock { $0.take() }?.cancel()
    }

    /// The promise settled: let the context go (outside the lock).
    func end() {
        let released = context.withLock { $0.take() }
        _ = released
    }
}
