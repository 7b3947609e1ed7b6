import Dispatch
import PromiseCore

// Owner-bound cancellation: a bag of cancellable work that an owner (a view model, a screen, a
// service) keeps as a stored property. When the owner goes away, the bag is released and
// cancels everything still running in it.
//
// The bag is a state machine behind one lock: open (holding entries) or cancelled. Storing decides
// under the lock whether to keep the entry or cancel it at once; `cancelAll()` takes the table
// out under the lock and cancels its entries after releasing it. The state is an object of its
// own (`BagState`, with its lock word inline), apart from the bag.
//
// Entries live in a slot table with a free list (`SlotTable`), so an entry leaves in O(1) in
// any order, and `count` is the table's count. Work that can tell when it is over leaves the
// bag as it ends, through a handler that knows its entry's key: a chain when its promise
// settles (the bag's state is a settle listener of the promise, told once with the entry's key:
// one allocation, see PromiseCore's SettleListener.swift; the listener holds the state, not the
// bag, so a pending chain keeps no bag alive, and a bag that goes cancels its chains, which lets
// the state go), a request when its token completes (`onComplete`, holding the bag weakly), a
// task when it finishes (the task that awaits it). A `Cancellable`
// held weakly cannot tell when it goes away: those entries are checked as they accumulate and
// when the bag is counted, and only those.

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
///   stays cancellable while the bag lives), until the stored promise settles: it leaves the
///   bag then, on the settling thread, and the bag no longer holds anything of it;
/// - a ``CancelContext``: until the bag is cancelled;
/// - a ``CancellationRequest``: until its token completes (it is cancelled, by the bag or
///   anyone else, or released);
/// - a Swift `Task`: until it finishes (it leaves the bag shortly after, asynchronously);
/// - any other ``Cancellable`` (a `URLSessionTask`, a `DispatchWorkItem`, a `Process`…): weakly,
///   so the bag never keeps finished work alive; its entry is dropped once the object is gone,
///   found as such entries accumulate (when they are twice as many as after the previous check,
///   and at least 1,024) and whenever ``count`` is read.
///
/// Leaving costs O(1) whatever the order work ends in (oldest first, newest first, at random),
/// so a long-lived bag holds about what is still running, and a settled item is never
/// cancelled. The bag's table keeps the size it grew to until it is empty again.
///
/// `cancelAll()` and the bag's `deinit` cancel every entry still held, synchronously on the
/// calling thread (cancelled chains run their `on: nil` handlers there), outside the bag's lock.
/// Storing into a bag that was cancelled cancels the item at once. Thread-safe: store and
/// cancel from any thread.
public final class CancelBag: Sendable {
    fileprivate enum Item {
        /// A chain's handle, until `promise` settles.
        case chain(any _CancelHandle, until: any CancelTarget)
        /// A chain's handle, until the promise listed as `key` in it settles.
        case member(any _CancelHandle, SlotKey)
        case context(CancelContext)
        case request(CancellationRequest)
        case task(@Sendable () -> Void)
        case weak(WeakCancellable)

        /// Cancels the work if it is still running.
        func cancel() {
            switch self {
            case .chain(let handle, let promise):
                handle._handleStorage.cancel(ifPending: promise)
            case .member(let handle, let key): handle._handleStorage.cancel(ifListed: key)
            case .context(let context): context.cancel()
            case .request(let request): request.cancel()
            case .task(let cancel): cancel()
            case .weak(let box): box.cancel()
            }
        }

        /// Whether a weakly held object is gone, so the bag can drop the entry.
        var isReleasedObject: Bool {
            if case .weak(let box) = self { return box.isReleased }
            return false
        }
    }

    fileprivate struct State {
        var isCancelled = false
        var table = SlotTable<Item?>()
        /// The keys of the weakly held objects' entries, which nothing removes when the object
        /// goes away: checked when there are `checkWeakAt` of them, and by `count`.
        var weakKeys: [BagKey] = []
        /// Twice the number of weak entries left by the last check (at least
        /// `minimumWeakCheck`), so checking costs O(1) amortised per weak entry.
        var checkWeakAt = State.minimumWeakCheck
        static let minimumWeakCheck = 1_024

        /// Stores `item` and returns its key; `nil` if the bag was cancelled (the caller
        /// cancels the item after the lock). `dropped` receives entries dropped meanwhile, to
        /// release after the lock.
        mutating func insert(_ item: Item, dropped: inout [Item]) -> BagKey? {
            guard !isCancelled else { return nil }
            let key = table.add(item)
            if case .weak = item {
                if weakKeys.count >= checkWeakAt { dropReleasedObjects(into: &dropped) }
                weakKeys.append(key)
            }
            return key
        }

        /// Drops the entries of weakly held objects that are gone.
        mutating func dropReleasedObjects(into dropped: inout [Item]) {
            var kept: [BagKey] = []
            for key in weakKeys {
                if table.element(key)?.isReleasedObject == true {
                    if let item = table.remove(key) { dropped.append(item) }
                } else if table.element(key) != nil {
                    kept.append(key)
                }
            }
            weakKeys = kept
            checkWeakAt = max(State.minimumWeakCheck, kept.count * 2)
        }

        /// Marks the bag cancelled and takes its table, with every entry (a cancelled bag
        /// stores nothing more: the table goes).
        mutating func cancel() -> SlotTable<Item?> {
            isCancelled = true
            weakKeys = []
            var taken = SlotTable<Item?>()
            swap(&taken, &table)
            return taken
        }
    }

    /// The state, behind its lock; the settle listener of the stored chains' promises.
    private let state = BagState()

    /// Creates an empty bag.
    public init() {}

    deinit {
        state.withLock { $0.cancel() }.forEachElement { $0.cancel() }
    }

    /// Cancels everything the bag holds that is still running, and everything stored in it
    /// from now on. Any thread; a second call does nothing more.
    public func cancelAll() {
        state.withLock { $0.cancel() }.forEachElement { $0.cancel() }
    }

    /// `true` once ``cancelAll()`` was called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// The number of entries whose work is still running: O(1), plus a check of each weakly
    /// held `Cancellable` (whose entry is dropped if the object is gone).
    public var count: Int {
        var dropped: [Item] = []
        let count = state.withLock { state in
            if !state.weakKeys.isEmpty { state.dropReleasedObjects(into: &dropped) }
            return state.table.count
        }
        _ = dropped  // released outside the lock
        return count
    }

    /// The number of entries held, without checking weakly held objects (for tests).
    var storedCount: Int { state.withLock { $0.table.count } }

    #if DEBUG
    /// How many settles of stored promises the bag heard (for tests: an entry is told once).
    var settlesHeard: Locked<Int> { state.settlesHeard }
    #endif

    /// The state object, which keeps an inline lock word (for the layout test of such words).
    var stateObject: AnyObject { state }

    /// The number of slots of the bag's table, free ones included (for tests).
    var slotCount: Int { state.withLock { $0.table.slotCount } }

    // MARK: Storing

    /// Stores `item`, or cancels it at once if the bag was cancelled. Returns its key.
    private func insert(_ item: Item) -> BagKey? {
        var dropped: [Item] = []
        let key = state.withLock { $0.insert(item, dropped: &dropped) }
        _ = dropped  // released outside the lock
        if key == nil { item.cancel() }
        return key
    }

    /// Drops the entry `key` names, if it is still there, and releases it after the lock.
    private func remove(_ key: BagKey) {
        state.remove(key)
    }

    /// Holds `handle` until `promise` settles.
    func store<T>(_ handle: any _CancelHandle, until promise: Promise<T>) {
        guard let key = insert(.chain(handle, until: promise)) else { return }
        leave(key, when: promise)
    }

    /// Holds `promise`'s chain until `promise` settles (cancelling only while it is listed).
    func store<T>(chain promise: CancellablePromise<T>) {
        guard let key = insert(.member(promise, promise._key)) else { return }
        leave(key, when: promise.promise)
    }

    /// Makes the entry `key` leave the bag when `promise` settles, on the settling thread (at
    /// once if it has settled already). The promise's listener holds the bag's state, not the
    /// bag: a pending chain keeps no bag alive, and a bag that goes cancels its chains first.
    private func leave<T>(_ key: BagKey, when promise: Promise<T>) {
        promise.addSettleListener(state, key: key.packed, holdingStrongly: true)
    }

    func store(_ context: CancelContext) {
        _ = insert(.context(context))
    }

    func store(_ request: CancellationRequest) {
        guard let key = insert(.request(request)) else { return }
        request.token.onComplete { [weak self] _ in self?.remove(key) }
    }

    func store<Success: Sendable, Failure: Error>(_ task: Task<Success, Failure>) {
        guard let key = insert(.task { task.cancel() }) else { return }
        Task { [weak self] in
            _ = await task.result
            self?.remove(key)
        }
    }

    func store(_ cancellable: any Cancellable) {
        _ = insert(.weak(WeakCancellable(cancellable)))
    }

    /// Holds `cancel` until the bag is cancelled or deallocated, then calls it: for the
    /// cancellables of other frameworks (a Combine `AnyCancellable`), which the bag owns as a
    /// `Set<AnyCancellable>` would, and which cannot say when their work ends.
    package func store(cancellingWith cancel: @escaping @Sendable () -> Void) {
        _ = insert(.task(cancel))
    }
}

// MARK: - The table

/// A bag's state behind its lock, in one object: its lock word inline, by the rule of
/// PromiseCore's Lock.swift (one allocation less than a `Locked`, and calls specialized here).
/// It is the settle listener of the stored chains' promises, which hold it (not the bag) until
/// they settle.
private final class BagState: PromiseAttachment, @unchecked Sendable {
    // @unchecked: `state` is only reached under the lock word.
    private var lockWord = LockWord()  // must stay the first stored property
    /// Guarded by the lock (so no dynamic exclusivity check is needed).
    @exclusivity(unchecked) private var state = CancelBag.State()

    #if DEBUG
    /// How many settles of stored promises the bag heard (for tests: an entry is told once).
    let settlesHeard = Locked(0)
    #endif

    deinit {
        lockWordDestroy(of: self)
    }

    /// Runs `body` on the state with the lock held; `body` calls no user code.
    @inline(__always)
    func withLock<R>(_ body: (inout CancelBag.State) -> R) -> R {
        lockWordLock(of: self)
        defer { lockWordUnlock(of: self) }
        return body(&state)
    }

    /// Drops the entry `key` names, if it is still there, and releases it after the lock.
    func remove(_ key: BagKey) {
        let item = withLock { $0.table.remove(key) }
        _ = item  // released outside the lock
    }

    /// A stored chain's promise settled: its entry leaves.
    func promiseDidSettle(key: UInt64) {
        #if DEBUG
        settlesHeard.withLock { $0 += 1 }
        #endif
        remove(BagKey(packed: key))
    }

    /// The bag governs no step.
    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

/// An entry's place in the bag's table.
private typealias BagKey = SlotKey

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
        bag.store(chain: self)
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
        bag.store(end, until: end.promise)
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
