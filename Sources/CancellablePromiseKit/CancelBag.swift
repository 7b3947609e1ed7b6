import Dispatch
import PromiseCore

// Owner-bound cancellation: a bag of cancellable work that an owner (a view model, a screen, a
// service) keeps as a stored property. When the owner goes away, the bag is released and
// cancels everything still running in it.
//
// The bag is a state machine behind one lock: `open(entries)` or `cancelled`. Storing decides
// under the lock whether to keep the item or cancel it at once; `cancelAll()` takes the entries
// out under the lock and cancels them after releasing it. Entries leave the bag as their work
// settles, so a long-lived bag holds what is still running, not everything it ever held.

/// A bag of cancellable work tied to an owner's lifetime: everything stored in it is cancelled
/// when the bag is deallocated or when ``cancelAll()`` is called.
///
/// Keep the bag as a stored property of the owner and store work in it with `store(in:)`:
///
/// ```swift
/// final class ProfileViewModel {
///     private let bag = CancelBag()
///
///     func load() {
///         fetchUser().done { user in self.show(user) }.catch { self.show($0) }.store(in: bag)
///     }
/// }   // the view model goes away: the request is cancelled
/// ```
///
/// What a bag holds, and until when:
/// - a ``CancellablePromise``, ``CancellableFinalizer`` or ``CancelContext``: its chain's
///   context (so the chain stays cancellable while the bag lives), until the stored promise
///   settles;
/// - a ``CancellationRequest``: until its token completes (it is cancelled, by the bag or
///   anyone else);
/// - a Swift `Task`: until it finishes;
/// - any other ``Cancellable`` (a `URLSessionTask`, a `DispatchWorkItem`, a `Process`…): weakly,
///   so the bag never keeps finished work alive; released entries are swept out as new ones are
///   stored.
///
/// `cancelAll()` and the bag's `deinit` cancel every entry still held, synchronously on the
/// calling thread (cancelled chains run their `on: nil` handlers there), outside the bag's lock.
/// Storing into a bag that was cancelled cancels the item at once. Thread-safe: store and
/// cancel from any thread.
public final class CancelBag: Sendable {
    private enum Item {
        case chain(CancelContext)
        case request(CancellationRequest)
        case task(@Sendable () -> Void)
        case weak(WeakCancellable)

        /// Cancels the work; for a weak item, only if it is still alive.
        func cancel() {
            switch self {
            case .chain(let context): context.cancel()
            case .request(let request): request.cancel()
            case .task(let cancel): cancel()
            case .weak(let box): box.value?.cancel()
            }
        }

        var isReleased: Bool {
            if case .weak(let box) = self { return box.value == nil }
            return false
        }
    }

    private struct State {
        var isCancelled = false
        var items: [UInt64: Item] = [:]
        var nextID: UInt64 = 0
        /// Item count at which released weak items are swept out.
        var sweepAt = 16

        /// Stores `item`; returns its id, or `nil` if the bag was cancelled (the caller cancels
        /// the item after the lock).
        mutating func insert(_ item: Item) -> (id: UInt64?, swept: [Item]) {
            guard !isCancelled else { return (nil, []) }
            var swept: [Item] = []
            if items.count >= sweepAt {
                let released = items.filter { $0.value.isReleased }
                for (id, item) in released {
                    items[id] = nil
                    swept.append(item)
                }
                sweepAt = max(16, items.count * 2)
            }
            let id = nextID
            nextID += 1
            items[id] = item
            return (id, swept)
        }

        /// Drops the item `id` (its work settled); returns it to release after the lock.
        mutating func remove(_ id: UInt64) -> Item? {
            guard let item = items.removeValue(forKey: id) else { return nil }
            if items.isEmpty {
                items = [:]
            } else if items.capacity > 64, items.count * 4 < items.capacity {
                items = Dictionary(uniqueKeysWithValues: items.map { ($0.key, $0.value) })
            }
            return item
        }

        /// Marks the bag cancelled and takes every item.
        mutating func cancel() -> [Item] {
            isCancelled = true
            defer { items = [:] }
            return Array(items.values)
        }
    }

    private let state = Locked(State())

    /// Creates an empty bag.
    public init() {}

    deinit {
        for item in state.withLock({ $0.cancel() }) { item.cancel() }
    }

    /// Cancels everything the bag holds, and everything stored in it from now on. Any thread;
    /// a second call does nothing more.
    public func cancelAll() {
        for item in state.withLock({ $0.cancel() }) { item.cancel() }
    }

    /// `true` once ``cancelAll()`` was called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// The number of entries held: work still running (and weakly held items not swept yet).
    public var count: Int { state.withLock { $0.items.count } }

    // MARK: Storing

    /// Stores `item`; returns its id, or cancels it at once if the bag was cancelled.
    private func insert(_ item: Item) -> UInt64? {
        let (id, swept) = state.withLock { $0.insert(item) }
        _ = swept  // released outside the lock
        if id == nil { item.cancel() }
        return id
    }

    private func remove(_ id: UInt64) {
        let item = state.withLock { $0.remove(id) }
        _ = item  // released outside the lock
    }

    /// Holds `context` until `promise` settles.
    func store<T>(_ context: CancelContext, until promise: Promise<T>) {
        guard promise.isPendingLocked else { return }
        guard let id = insert(.chain(context)) else { return }
        promise.pipe { [weak self] _ in self?.remove(id) }
    }

    func store(_ context: CancelContext) {
        _ = insert(.chain(context))
    }

    func store(_ request: CancellationRequest) {
        guard let id = insert(.request(request)) else { return }
        request.token.onComplete { [weak self] _ in self?.remove(id) }
    }

    func store<Success: Sendable, Failure: Error>(_ task: Task<Success, Failure>) {
        guard let id = insert(.task({ task.cancel() })) else { return }
        Task { [weak self] in
            _ = await task.result
            self?.remove(id)
        }
    }

    func store(_ cancellable: any Cancellable) {
        _ = insert(.weak(WeakCancellable(cancellable)))
    }
}

/// A `Cancellable` held weakly.
private final class WeakCancellable: @unchecked Sendable {
    // `@unchecked`: the reference is written once, in `init`; `Cancellable`s are called from any
    // thread by contract.
    weak var value: (any Cancellable)?

    init(_ value: any Cancellable) {
        self.value = value
    }
}

// MARK: - store(in:)

extension CancellablePromise {
    /// Stores this promise's chain in `bag`: cancelled when the bag is cancelled or deallocated,
    /// dropped from the bag once this promise settles. The bag keeps the chain cancellable
    /// while it waits (see ``CancelBag``).
    ///
    /// ```swift
    /// download(url).done { data in self.show(data) }.store(in: bag)
    /// ```
    public func store(in bag: CancelBag) {
        bag.store(cancelContext, until: promise)
    }
}

extension CancellableFinalizer {
    /// Stores the chain this finalizer ends in `bag`, until the chain (its `catch` included) is
    /// done; see ``CancelBag``.
    ///
    /// ```swift
    /// fetchUser().done { self.show($0) }.catch { self.show($0) }.store(in: bag)
    /// ```
    public func store(in bag: CancelBag) {
        bag.store(cancelContext, until: promise)
    }
}

extension CancelContext {
    /// Stores this context in `bag` until `bag` is cancelled or deallocated: everything in the
    /// context's chain is cancelled then.
    public func store(in bag: CancelBag) {
        bag.store(self)
    }
}

extension CancellationRequest {
    /// Stores this request in `bag` until its token completes; cancelling the bag cancels it.
    public func store(in bag: CancelBag) {
        bag.store(self)
    }
}

extension Task {
    /// Stores this task in `bag` until it finishes; cancelling the bag cancels it (as
    /// `cancel()`, synchronously on the cancelling thread).
    public func store(in bag: CancelBag) {
        bag.store(self)
    }
}

extension Cancellable {
    /// Stores this object in `bag`, weakly: cancelling the bag calls `cancel()` on it if it is
    /// still alive; the bag never keeps it alive.
    public func store(in bag: CancelBag) {
        bag.store(self)
    }
}
