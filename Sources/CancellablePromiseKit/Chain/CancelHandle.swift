import PromiseCore

// Handles: what keeps a chain cancellable, and how they are counted (see the overview in
// CancelStorage.swift). Liveness is decided by the count: while a chain has a handle it can be
// cancelled, and its members keep their cancel closures and links; when the last handle goes
// away the chain is abandoned (`ChainState.handlesGone`), and nothing but its work keeps
// its promises alive.

/// What keeps a chain cancellable while it lives: a `CancellablePromise` of the chain (each one
/// counts itself in its storage, so a chain needs no handle object of its own) or a
/// `CancelContext`. Held by whatever must be able to cancel a chain it does not own: links,
/// `autoCancel` inputs, bags.
@usableFromInline
protocol _CancelHandle: AnyObject, Sendable {
    /// The storage the handle counts in (made on first use for a promise made settled).
    var _handleStorage: CancelStorage { get }
    /// The chain's public context (made on first use).
    var _handleContext: CancelContext { get }
}

// MARK: - Counting handles

extension CancelStorage {
    /// Counts a new handle of this storage, made from an existing one (so the count is not zero:
    /// a chain whose last handle went away never gets one again).
    @inline(__always)
    func addHandle() {
        let count = atomicAdd(&own.pointee.handles, 1)
        precondition(count > 1, "CancelStorage.addHandle: the chain has no handle left to make one from")
    }

    /// Makes `context`, this new storage's creator, the context its promises return.
    func adopt(_ context: CancelContext) {
        withOwnFields { publicContext = context }
    }

    /// The chain's public context: the one handed out before if it is still alive, so that
    /// every promise of the chain returns the same, or a new one (a new handle).
    func context() -> CancelContext {
        withOwnFields {
            if let context = publicContext { return context }
            addHandle()
            let context = CancelContext(counted: self)
            publicContext = context
            return context
        }
    }

    /// A handle of this storage went away: one atomic decrement. The last handle of a root
    /// abandons its chain (`ChainState.handlesGone`); the last handle of an absorbed storage
    /// ends its count as a handle of its root (`ChainOutcome.releaseHold`), which may be that
    /// root's last, released the same way.
    @usableFromInline @inline(never) func releaseHandle() {
        // Not the last handle (the common case): no reference to this storage is taken.
        if dropHandle() == 0 { lastHandleGone() }
    }

    /// This storage's last handle went away (see `ChainState.handlesGone`).
    @inline(never)
    private func lastHandleGone() {
        perform(withRoot { root, home in root.chain.handlesGone(of: home) })
    }

    /// Counts one handle less; returns how many are left.
    @inline(__always)
    private func dropHandle() -> Int {
        let remaining = atomicAdd(&own.pointee.handles, -1)
        precondition(remaining >= 0, "CancelStorage.releaseHandle: a handle was released twice")
        return remaining
    }

    /// The storage this absorbed storage counted as a handle of, no longer held (see
    /// `ChainState.handlesGone`).
    func takeHolding() -> CancelStorage? {
        withOwnFields {
            guard case .forwarded(let next, let holding) = forwarding else { return nil }
            forwarding = .forwarded(next: next, holding: nil)
            return holding
        }
    }
}
