import PromiseCore

// A member of a chain, as everything outside the chain's lock names it: an immutable key (its
// `SlotKey` in its home storage's `MemberTable`: the slot and the generation of the
// reservation, so that a key kept after the member left is recognised as stale once the slot
// is reused; the member's promise itself carries only the slot, as its attachment key: a slot
// is freed only once its promise will never report to it again, so that key cannot go stale),
// and, for a step's body, the key with the storage it is listed in (see the overview in CancelStorage.swift). Values, captured by whoever needs
// them: no object per member.

/// A member of a chain: its home storage and its key there. Captured by step bodies to link the
/// promises they return, and by observers to pass the chain's cancellation on.
@usableFromInline
struct _ChainMember {
    /// The storage of the chain the member was made in (it may forward to another).
    @usableFromInline let storage: CancelStorage
    @usableFromInline let key: SlotKey

    @inlinable init(storage: CancelStorage, key: SlotKey) {
        self.storage = storage
        self.key = key
    }

    /// Links the chain of `next`, a promise the member's step body returned, to this member
    /// (see `ChainState.link`). `whileBodyRuns` is `false` for a link made after the member was
    /// listed (a wrapper's returned promise, a timeout's source). Inlinable, so that the casts below are decided in the caller's specialization
    /// (no run-time metadata lookups for `CancellablePromise<U.T>` and `Guarantee<U.T>`); the
    /// rest is not generic.
    @inlinable
    func link<U: Thenable>(_ next: U, whileBodyRuns: Bool = true) {
        if let cancellable = next as? CancellablePromise<U.T> {
            link(chainOf: cancellable.promise, cancellable, whileBodyRuns: whileBodyRuns)
        } else if !(next is Guarantee<U.T>) {
            link(taskOf: next.asPromise(), whileBodyRuns: whileBodyRuns)
        }
    }

    /// `link(_:)` for a returned `CancellablePromise`, `handle`: its chain, held through it, if
    /// its promise is pending (a settled `.value(x)` is in no chain). Checked here, before the
    /// chain's lock: a link the machine declined would be made and then released through
    /// `LinkRelease` (5,026 → 8,444 instructions a `then` link returning a settled promise,
    /// measured with callgrind). The machine decides the rest: a promise of this very chain
    /// links nothing (the chain cancels it anyway, and a link to its own handle would keep the
    /// chain cancellable for ever).
    @usableFromInline
    func link(chainOf promise: any CancelTarget, _ handle: any _CancelHandle, whileBodyRuns: Bool) {
        guard promise.isPending else { return }
        storage.link(
            key, .chain(handle), whileBodyRuns: whileBodyRuns, reaching: ObjectIdentifier(handle._handleStorage))
    }

    /// `link(_:)` for another returned promise: the task its producer attached, if any.
    @usableFromInline
    func link(taskOf promise: any CancelTarget, whileBodyRuns: Bool) {
        if let cancel = promise._attachedCancellation {
            storage.link(key, .task(cancel), whileBodyRuns: whileBodyRuns)
        }
    }

    /// `result`, or the chain's cancellation if the chain was cancelled: what an observer passes
    /// on once its body has run.
    @usableFromInline
    func passOn<T>(_ result: Result<T>) -> Result<T> {
        if let error = storage.errorPassedOnByObservers { return .rejected(error) }
        return result
    }
}
