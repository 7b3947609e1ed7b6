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
        lock()
        own.pointee.publicContext = context
        unlock()
    }

    /// The chain's public context: the one handed out before if it is still alive, so that
    /// every promise of the chain returns the same, or a new one (a new handle).
    func context() -> CancelContext {
        lock()
        defer { unlock() }
        if let context = own.pointee.publicContext { return context }
        addHandle()
        let context = CancelContext(counted: self)
        own.pointee.publicContext = context
        return context
    }

    /// A handle of this storage went away: one atomic decrement. The last handle of a root
    /// abandons its chain (`ChainState.handlesGone`); the last handle of an absorbed
    /// storage ends its count as a handle of its root, which may be that root's last.
    @usableFromInline func releaseHandle() {
        var storage: CancelStorage? = self
        while let current = storage {
            storage = nil
            let remaining = atomicAdd(&current.own.pointee.handles, -1)
            precondition(remaining >= 0, "CancelStorage.releaseHandle: a handle was released twice")
            guard remaining == 0 else { return }
            var actions = ChainActions()
            let root = current.lockRoot()
            let releasesHold = root.chain.handlesGone(of: current.home(under: root), into: &actions)
            root.unlock()
            if releasesHold { storage = current.takeHolding() }
            if !actions.isEmpty { actions.run() }
        }
    }

    /// The storage this absorbed storage counted as a handle of, no longer held (see
    /// `ChainState.handlesGone`).
    private func takeHolding() -> CancelStorage? {
        lock()
        defer { unlock() }
        guard case .forwarded(let next, let holding) = forwarding else { return nil }
        forwarding = .forwarded(next: next, holding: nil)
        return holding
    }
}
