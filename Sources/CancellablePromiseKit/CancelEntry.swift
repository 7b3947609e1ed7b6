import PromiseCore

// A member of a chain: one pending promise, its cancel closure and its links (see the overview
// in CancelStorage.swift).

// MARK: - Entries

/// One pending promise of a chain. Created before its promise is listed (a `then` body may link
/// a returned promise to it as soon as it runs); its mutable fields are guarded by the lock of
/// the root storage of `home`.
@usableFromInline
final class CancelEntry: PromiseAttachment, @unchecked Sendable {
    // @unchecked: every mutable field is guarded by the lock of `home`'s root storage.

    /// Not listed yet.
    static let unlisted = -1
    /// Settled, cancelled or abandoned: never listed again.
    static let done = -2

    /// The storage of the chain the entry was created in (it may forward to another).
    let home: CancelStorage
    /// Observers (`ensure`, `ensureThen`, `tap`) are not rejected by a cancellation: they pass it
    /// on when their body has run, so the chain settles in order.
    let isObserver: Bool

    /// Index in the listing storage's members, or one of the markers above.
    @exclusivity(unchecked) var index = CancelEntry.unlisted
    /// The promise to reject when the chain is cancelled.
    @exclusivity(unchecked) var target: (any CancelTarget)?
    /// Stops the promise's task; called at most once, only while the promise is pending.
    @exclusivity(unchecked) var cancelBody: (() -> Void)?
    /// Chains this step waits on: cancelled with it.
    @exclusivity(unchecked) var link: CancelLink?
    /// The entry of the step this one follows in the chain, to tell whether it waits behind an
    /// observer that has not run yet.
    @exclusivity(unchecked) var upstream: CancelEntry?
    /// Another attachment of the same promise, told when it settles.
    @exclusivity(unchecked) var earlier: (any PromiseAttachment)?
    /// Set when the entry is cancelled on its own (an `autoCancel` loser).
    @exclusivity(unchecked) var cancelledAlone = false
    /// Scratch for `CancelState.cancel`: whether the entry waits behind an observer.
    @exclusivity(unchecked) var waitsBehindObserver: Bool?

    /// Set as its promise's attachment when the promise was made (a chain step), so listing it
    /// needs no attachment swap.
    @usableFromInline let isAttachedAtCreation: Bool

    @usableFromInline
    init(
        home: CancelStorage, upstream: CancelEntry?, isObserver: Bool, cancel: (() -> Void)?,
        attachedAtCreation: Bool = false
    ) {
        self.home = home
        self.upstream = upstream
        self.isObserver = isObserver
        self.cancelBody = cancel
        self.isAttachedAtCreation = attachedAtCreation
    }

    /// The promise settled: leave the chain, releasing the cancel closure.
    @usableFromInline package func promiseDidSettle() {
        home.remove(self)
    }

    /// Links the chain of `next`, a promise a step body returned, to this step (see
    /// `CancelStorage.link`): a settled promise links nothing. Inlinable, so that the casts
    /// below are decided in the caller's specialization (no run-time metadata lookups for
    /// `CancellablePromise<U.T>` and `Guarantee<U.T>`); the rest is not generic.
    @inlinable
    func link<U: Thenable>(_ next: U) {
        if let cancellable = next as? CancellablePromise<U.T> {
            link(chainOf: cancellable.promise, cancellable.cancelContext)
        } else if !(next is Guarantee<U.T>) {
            link(taskOf: next.asPromise())
        }
    }

    /// `link(_:)` for a returned `CancellablePromise`: its chain, held through `context`.
    @usableFromInline
    func link(chainOf promise: any CancelTarget, _ context: CancelContext) {
        // A promise of this very chain links nothing: the chain cancels it anyway, and a link to
        // its own handle would keep the chain cancellable for ever.
        guard promise.isPendingLocked, !context.storage.isSameChain(as: home) else { return }
        home.link(self, .chain(context))
    }

    /// `link(_:)` for another returned promise: the task its producer attached, if any.
    @usableFromInline
    func link(taskOf promise: any CancelTarget) {
        if let task = promise.attachedCancellation {
            home.link(self, .task(task.cancel))
        }
    }

    /// `result`, or the chain's cancellation if the chain was cancelled: what an observer passes
    /// on once its body has run.
    @usableFromInline
    func passOn<T>(_ result: Result<T>) -> Result<T> {
        if let error = home.cancelledError { return .rejected(error) }
        return result
    }

    /// A step body must not start once the chain was cancelled, or this step cancelled alone.
    @usableFromInline package func errorBeforeBody() -> (any Error)? {
        home.errorBeforeBody(of: self)
    }
}

extension CancelEntry {
    /// Empties the entry (under its storage's lock); the result is released after the lock.
    func takeAll() -> Released {
        let released = Released(cancelBody: cancelBody, link: link, target: target)
        cancelBody = nil
        link = nil
        target = nil
        upstream = nil
        return released
    }

    /// What an entry held, released outside the lock (closures may own objects whose `deinit`
    /// runs user code).
    struct Released {
        var cancelBody: (() -> Void)?
        var link: CancelLink?
        var target: (any CancelTarget)?
    }
}
