/// A `Cancellable` held weakly: what a token handler or a `CancelBag` keeps of an object it
/// must cancel but not keep alive.
final class WeakCancellable: @unchecked Sendable {
    // @unchecked: the reference is written once, in `init`, and only loaded afterwards (the
    // runtime loads weak references atomically); `Cancellable`s are called from any thread by
    // contract.
    private weak var object: (any Cancellable)?

    init(_ object: any Cancellable) {
        self.object = object
    }

    /// `true` once the object is gone.
    var isReleased: Bool { object == nil }

    /// Cancels the object if it is still alive.
    func cancel() { object?.cancel() }
}
