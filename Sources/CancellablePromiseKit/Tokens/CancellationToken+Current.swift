import PromiseCore

extension CancellationToken {
    /// The token of the step whose body runs on this thread: what `Task.isCancelled` and
    /// `Task.checkCancellation()` are to a task, for the bodies of a cancellable chain.
    ///
    /// Inside a body that a `CancellablePromise` runs — the body of every operator (`then`,
    /// `map`, `compactMap`, `done`, `get`, `tap`, `recover`, `ensure`, `ensureThen`, `catch`,
    /// the finalizer's `finally`, the sequence operators…) and the body of ``CancellablePromise/init(resolver:)`` or
    /// `init(cancellable:resolver:)` — it is the token of that body's step:
    /// - it is cancelled when the chain is cancelled while the step is pending (its body running,
    ///   or the step waiting on the promise its body returned), or when the step alone is
    ///   cancelled (a loser of `race(autoCancel:)`). Its `onCancel` handlers (`on: nil`) then run
    ///   once, synchronously on the thread calling `cancel()`, before `cancel()` returns, right
    ///   after the chain's cancel closures;
    /// - it completes "not cancelled" once the step settled on its own, releasing its handlers;
    ///   a later cancel of the chain does not reach it. It completes "not cancelled" too when
    ///   nothing can cancel the chain any more (its last `CancellablePromise` went away);
    /// - read again in the same step, it is the same token; read after the step was cancelled,
    ///   a token already cancelled.
    ///
    /// Outside such a body it is ``none``: on a thread that runs no body, in the body of a plain
    /// `Promise` run from a queue, and in the body of `CancellablePromise { () async … }` (there,
    /// use `Task.isCancelled`: cancelling the promise cancels its task). A plain promise's body
    /// run synchronously (`on: nil`) inside a cancellable body is part of that body and sees its
    /// token. A cancellable body that runs another chain's body synchronously sees the inner
    /// step's token there, and its own again afterwards.
    ///
    /// The token is made when a body first reads it: a chain whose bodies never read it pays
    /// nothing for it. A running body's result is still discarded once its chain is cancelled;
    /// reading the token lets it stop early.
    ///
    /// ```swift
    /// let chain = download(url).map(on: .global()) { data -> Thumbnail in
    ///     var thumbnail = Thumbnail()
    ///     for row in rows(of: data) {
    ///         try CancellationToken.current.checkCancellation()   // stop once cancelled
    ///         thumbnail.add(row)
    ///     }
    ///     return thumbnail
    /// }.then { thumbnail in
    ///     upload(thumbnail, cancellationToken: .current)      // a token-taking API
    /// }
    /// chain.cancel()
    /// ```
    ///
    /// Readable from any thread; each thread sees the body it runs.
    public static var current: CancellationToken {
        // Kept with the body after the first read, so that later reads in it are quick (the
        // same token: the one its step has for as long as its body runs).
        let kept = _keptByRunningBody { owner, key, step -> AnyObject in
            guard let storage = owner as? CancelStorage else { return CancellationToken.none }
            return storage.runningBodyToken(slot: key, step: step)
        }
        guard let kept else { return .none }
        return unsafeDowncast(kept, to: CancellationToken.self)
    }
}
