import Dispatch
import PromiseCore

// Owner-bound cancellation: a bag of cancellable work that an owner (a view model, a screen, a
// service) keeps as a stored property. When the owner goes away, the bag is released and
// cancels everything still running in it.
//
// The bag is a state machine behind one lock: open (holding items) or cancelled. Storing decides
// under the lock whether to keep the item or cancel it at once; `cancelAll()` takes the items
// out under the lock and cancels them after releasing it. Items whose work is over are swept
// out as the bag grows (and when it is counted), so a long-lived bag holds about what is still
// running, not everything it ever held — without an observer per item, which would cost more
// than the cancellation it stands for.

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
/// - a ``CancellablePromise`` or ``CancellableFinalizer``: its chain's context (so the chain
///   stays cancellable while the bag lives), until the stored promise settles;
/// - a ``CancelContext``: until the bag is cancelled;
/// - a ``CancellationRequest``: until its token completes (it is cancelled, by the bag or
///   anyone else);
/// - a Swift `Task`: until it finishes;
/// - any other ``Cancellable`` (a `URLSessionTask`, a `DispatchWorkItem`, a `Process`…): weakly,
///   so the bag never keeps finished work alive.
///
/// Items whose work is over are dropped as the bag grows (when it holds twice as many items as
/// after the previous sweep, and at least 1,024) and whenever ``count`` is read, so a long-lived
/// bag stays about as large as what is still running; a settled item is never cancelled.
///
/// `cancelAll()` and the bag's `deinit` cancel every entry still held, synchronously on the
/// calling thread (cancelled chains run their `on: nil` handlers there), outside the bag's lock.
/// Storing into a bag that was cancelled cancels the item at once. Thread-safe: store and
/// cancel from any thread.
public final class CancelBag: Sendable {
    private enum Item {
        /// A chain's handle, until `promise` settles.
        case chain(any _CancelHandle, until: any CancelTarget)
        /// A chain's handle, until the promise listed as `key` in it settles.
        case member(any _CancelHandle, _CancelKey)
        case context(CancelContext)
        case request(CancellationRequest)
        case task(TaskEntry)
        case weak(WeakCancellable)

        /// Cancels the work if it is still running.
        func cancel() {
            switch self {
            case .chain(let handle, let promise):
                if promise.isPending { handle._handleStorage.cancel(with: boxedCancellation, at: .library) }
            case .member(let handle, let key): handle._handleStorage.cancel(ifListed: key)
            case .context(let context): context.cancel()
            case .request(let request): request.cancel()
            case .task(let entry): entry.cancel()
            case .weak(let box): box.cancel()
            }
        }

        /// Whether the work is over (or gone), so the bag can drop the item.
        var isDone: Bool {
            switch self {
            case .chain(_, let promise): return !promise.isPending
            case .member(let handle, let key): return !handle._handleStorage.isListed(key)
            case .context: return false
            case .request(let request): return request.token.isCompleted
            case .task(let entry): return entry.isFinished
            case .weak(let box): return box.isReleased
            }
        }
    }

    private struct State {
        var isCancelled = false
        var items: [Item] = []
        /// Item count at which finished items are swept out: twice the count left by the last
        /// sweep (at least `minimumSweep`), so sweeping costs O(1) amortised per item and the
        /// bag holds at most about twice what is still running, or `minimumSweep` items.
        var sweepAt = State.minimumSweep
        /// Below this many items a bag never sweeps while storing: a sweep checks every item.
        static let minimumSweep = 1_024

        /// Stores `item`; `false` if the bag was cancelled (the caller cancels the item after
        /// the lock). Returns what a sweep dropped, to release after the lock.
        mutating func insert(_ item: Item) -> (stored: Bool, swept: [Item]) {
            guard !isCancelled else { return (false, []) }
            let swept = items.count >= sweepAt ? sweep() : []
            items.append(item)
            return (true, swept)
        }

        /// Drops the items whose work is over.
        mutating func sweep() -> [Item] {
            var kept: [Item] = []
            var dropped: [Item] = []
            for item in items {
                if item.isDone { dropped.append(item) } else { kept.append(item) }
            }
            items = kept
            sweepAt = max(State.minimumSweep, kept.count * 2)
            return dropped
        }

        /// Marks the bag cancelled and takes every item.
        mutating func cancel() -> [Item] {
            isCancelled = true
            defer { items = [] }
            return items
        }
    }

    private let state = Locked(State())

    /// Creates an empty bag.
    public init() {}

    deinit {
        for item in state.withLock({ $0.cancel() }) { item.cancel() }
    }

    /// Cancels everything the bag holds that is still running, and everything stored in it
    /// from now on. Any thread; a second call does nothing more.
    public func cancelAll() {
        for item in state.withLock({ $0.cancel() }) { item.cancel() }
    }

    /// `true` once ``cancelAll()`` was called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// The number of entries whose work is still running (finished ones are dropped).
    public var count: Int {
        let (count, swept) = state.withLock { state in
            let swept = state.sweep()
            return (state.items.count, swept)
        }
        _ = swept  // released outside the lock
        return count
    }

    /// The number of items held, finished or not, without sweeping (for tests).
    var storedCount: Int { state.withLock { $0.items.count } }

    // MARK: Storing

    /// Stores `item`, or cancels it at once if the bag was cancelled.
    private func insert(_ item: Item) {
        let (stored, swept) = state.withLock { $0.insert(item) }
        _ = swept  // released outside the lock
        if !stored { item.cancel() }
    }

    /// Holds `context` until `promise` settles.
    func store<T>(_ context: any _CancelHandle, until promise: Promise<T>) {
        // Not checked here whether `promise` has settled: a settled item is swept out later and
        // never cancelled, and storing stays one lock.
        insert(.chain(context, until: promise))
    }

    func store(_ context: CancelContext) {
        insert(.context(context))
    }

    /// Holds `context` until the promise listed as `key` in it settles.
    func store(_ context: any _CancelHandle, until key: _CancelKey) {
        insert(.member(context, key))
    }

    func store(_ request: CancellationRequest) {
        insert(.request(request))
    }

    func store<Success: Sendable, Failure: Error>(_ task: Task<Success, Failure>) {
        let entry = TaskEntry { task.cancel() }
        insert(.task(entry))
        Task {
            _ = await task.result
            entry.finish()
        }
    }

    func store(_ cancellable: any Cancellable) {
        insert(.weak(WeakCancellable(cancellable)))
    }
}

/// A Swift `Task` held by a bag: how to cancel it, and whether it has finished.
private final class TaskEntry: Sendable {
    private let cancelTask: @Sendable () -> Void
    private let finished = Locked(false)

    init(cancel: @escaping @Sendable () -> Void) {
        cancelTask = cancel
    }

    var isFinished: Bool { finished.withLock { $0 } }

    func finish() { finished.withLock { $0 = true } }

    func cancel() { cancelTask() }
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
        bag.store(self, until: _key)
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
        bag.store(chain, until: promise)
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
