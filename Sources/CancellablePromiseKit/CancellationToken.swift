import Dispatch
import PromiseCore

// A cancellation token is a future of `Bool`: pending, then completed once with `true`
// ("cancelled", by its request's `cancel()`) or `false` ("not cancelled", when the request is
// released without cancelling). Completing decides the outcome under the token's own lock and
// takes the handler list out; the handlers run after the lock is released, in registration
// order, so a handler may cancel, register on or inspect the same token without deadlocking.
// Each token has its own lock: tokens never wait for each other.

/// The task side of a cancellation: the state of a ``CancellationRequest`` and the place where
/// a task registers what cancelling it means.
///
/// A token starts *pending* and completes once: *cancelled* when its request's `cancel()` is
/// called, or *not cancelled* when the request is released without having been cancelled (no
/// cancellation can come any more). On completion every handler runs or is skipped, then all of
/// them are released, together with whatever they captured.
///
/// Handlers registered with `on: nil` (the default) run synchronously on the thread that
/// completes the token, after its lock is released, or at once on the registering thread if the
/// token has already completed; with a queue they run asynchronously on that queue. Each runs at
/// most once. Every registration returns a ``CancellationRegistration`` whose `remove()` drops
/// the handler, so long-lived tokens need not accumulate handlers.
///
/// ```swift
/// func fetch(_ url: URL, cancellationToken: CancellationToken? = nil) -> Promise<Data> {
///     Promise(cancellationToken: cancellationToken) { resolver in
///         let task = session.dataTask(with: url) { data, _, error in resolver.resolve(data, error) }
///         task.resume()
///         return task.cancel
///     }
/// }
///
/// let request = CancellationRequest()
/// fetch(url, cancellationToken: request.token).catch(policy: .allErrors) { print($0.isCancelled) }
/// request.cancel()    // prints "true"
/// ```
///
/// Thread-safe (`Sendable`): query, register and complete from any thread.
public final class CancellationToken: @unchecked Sendable {
    // The lock word must remain the first stored property (see PromiseCore's Lock.swift).
    private var lockWord = makeLockWord()
    private var state: State
    private var entries: [Entry] = []
    private var nextID: UInt64 = 0
    /// Entry count at which dead weak registrations are swept out.
    private var sweepAt = 16

    private enum State {
        case pending
        case completed(cancelled: Bool)
    }

    init() {
        state = .pending
    }

    private init(completed cancelled: Bool) {
        state = .completed(cancelled: cancelled)
    }

    deinit {
        // A pending token is released only when nobody can complete it any more: its onComplete
        // handlers learn that it will never be cancelled (so no continuation waits forever).
        if case .pending = state, !entries.isEmpty {
            let taken = entries
            entries = []
            for entry in taken { entry.run(cancelled: false) }
        }
        lockWordDestroy(lockWordPointer(self))
    }

    /// A token that is never cancelled: already completed, "not cancelled". `onCancel` handlers
    /// registered on it are dropped at once; `onComplete` handlers run at once with `false`.
    ///
    /// Where the expected type is `CancellationToken?`, write `CancellationToken.none` in full:
    /// a bare `.none` means `nil`.
    public static let none = CancellationToken(completed: false)

    // MARK: State

    /// `true` once the token's request has been cancelled. Safe from any thread; tasks may poll
    /// it.
    public var isCancelled: Bool {
        lock()
        defer { unlock() }
        if case .completed(cancelled: true) = state { return true }
        return false
    }

    /// `true` once the token has completed, cancelled or not: after that it never changes and
    /// holds no handlers.
    public var isCompleted: Bool {
        lock()
        defer { unlock() }
        if case .completed = state { return true }
        return false
    }

    /// Throws `CancellablePromiseError.cancelled` if the token is cancelled (for polling in a
    /// loop, as `Task.checkCancellation()`).
    public func checkCancellation() throws {
        if isCancelled { throw CancellablePromiseError.cancelled }
    }

    // MARK: Handlers

    /// Runs `body` once if the token is cancelled; never if it completes "not cancelled".
    ///
    /// With `on: nil` (the default) `body` runs synchronously on the thread that calls
    /// `cancel()` on the request, after the token's lock is released, or at once on this
    /// thread if the token is already cancelled. With a queue, it runs asynchronously there.
    /// `body` is released once the token completes or the registration is removed.
    ///
    /// ```swift
    /// token.onCancel { [weak task] in task?.cancel() }
    /// ```
    @discardableResult
    public func onCancel(on queue: DispatchQueue? = nil, _ body: @escaping () -> Void) -> CancellationRegistration {
        add(.onCancel(body), queue: queue)
    }

    /// Runs `body` once when the token completes, with `true` if it was cancelled and `false`
    /// if its request was released without cancelling.
    ///
    /// With `on: nil` (the default) `body` runs synchronously on the thread that completes the
    /// token (the one calling `cancel()`, or releasing the request), or at once on this thread
    /// if the token has completed already. With a queue, it runs asynchronously there.
    @discardableResult
    public func onComplete(
        on queue: DispatchQueue? = nil,
        _ body: @escaping (_ cancelled: Bool) -> Void
    ) -> CancellationRegistration {
        add(.onComplete(body), queue: queue)
    }

    /// Calls `cancellable.cancel()` once if the token is cancelled, holding `cancellable`
    /// weakly: the token never keeps it alive, and nothing happens if it is gone by then.
    ///
    /// With `on: nil` (the default) `cancel()` is called synchronously on the cancelling thread
    /// (at once, on this thread, if the token is already cancelled); with a queue, on that queue.
    /// Registrations whose object has been released are swept out as new ones are added.
    ///
    /// ```swift
    /// let task = session.dataTask(with: url) { data, response, error in … }
    /// cancellationToken.register(task)
    /// task.resume()
    /// ```
    @discardableResult
    public func register(_ cancellable: any Cancellable, on queue: DispatchQueue? = nil) -> CancellationRegistration {
        add(.cancel(WeakCancellable(cancellable)), queue: queue)
    }

    // MARK: Completing (by the request and by combinators)

    /// Completes the token once; later calls do nothing. Returns whether this call completed it.
    /// Handlers run on this thread (or are dispatched to their queues) after the lock is released.
    @discardableResult
    func complete(cancelled: Bool) -> Bool {
        lock()
        guard case .pending = state else {
            unlock()
            return false
        }
        state = .completed(cancelled: cancelled)
        let taken = entries
        entries = []
        unlock()
        for entry in taken { entry.run(cancelled: cancelled) }
        return true
    }

    // MARK: Registration bookkeeping

    private func add(_ action: Action, queue: DispatchQueue?) -> CancellationRegistration {
        lock()
        guard case .pending = state else {
            let cancelled = completedValue
            unlock()
            Entry(id: 0, queue: queue, action: action).run(cancelled: cancelled)
            return CancellationRegistration(token: nil, id: 0)
        }
        let id = nextID
        nextID &+= 1
        entries.append(Entry(id: id, queue: queue, action: action))
        var swept: [Entry] = []
        if entries.count >= sweepAt {
            swept = sweepReleasedCancellables()
        }
        unlock()
        _ = swept  // released here, outside the lock
        return CancellationRegistration(token: self, id: id)
    }

    /// Removes the entry `id` if the token is still pending; returns whether it was removed.
    fileprivate func remove(id: UInt64) -> Bool {
        lock()
        guard case .pending = state, let index = index(of: id) else {
            unlock()
            return false
        }
        let removed = entries.remove(at: index)
        unlock()
        _ = removed  // the handler and what it captured are released outside the lock
        return true
    }

    /// Binary search: entries are kept in increasing id order.
    private func index(of id: UInt64) -> Int? {
        var low = 0, high = entries.count
        while low < high {
            let mid = (low + high) / 2
            if entries[mid].id < id {
                low = mid + 1
            } else {
                high = mid
            }
        }
        return low < entries.count && entries[low].id == id ? low : nil
    }

    /// Drops `register(_:)` entries whose object is gone (under the lock; returns them so that
    /// they are released after it).
    private func sweepReleasedCancellables() -> [Entry] {
        var kept: [Entry] = []
        var dropped: [Entry] = []
        kept.reserveCapacity(entries.count)
        for entry in entries {
            if case .cancel(let weak) = entry.action, weak.isReleased {
                dropped.append(entry)
            } else {
                kept.append(entry)
            }
        }
        entries = kept
        sweepAt = max(16, 2 * kept.count)
        return dropped
    }

    /// The completed value; only under the lock, once completed.
    private var completedValue: Bool {
        if case .completed(let cancelled) = state { return cancelled }
        return false
    }

    /// The number of handlers waiting (for tests of registration removal).
    package var pendingHandlerCount: Int {
        lock()
        defer { unlock() }
        return entries.count
    }

    @inline(__always) private func lock() { lockWordLock(lockWordPointer(self)) }
    @inline(__always) private func unlock() { lockWordUnlock(lockWordPointer(self)) }
}

// MARK: - Combinators

extension CancellationToken {
    /// A token completed from this one: when this token is cancelled, `transform` runs (on the
    /// cancelling thread) and its result completes the new token (`true` = cancelled); when this
    /// token completes "not cancelled", so does the new one, without calling `transform`.
    ///
    /// ```swift
    /// let onlyIfStillVisible = token.map { view.isVisible }
    /// ```
    public func map(_ transform: @escaping () -> Bool) -> CancellationToken {
        let result = CancellationToken()
        onComplete { cancelled in
            result.complete(cancelled: cancelled ? transform() : false)
        }
        return result
    }

    /// A token completed from this one: when this token is cancelled, `transform` runs (on the
    /// cancelling thread) and the new token completes as the token it returns does; when this
    /// token completes "not cancelled", so does the new one, without calling `transform`.
    ///
    /// ```swift
    /// func && (left: CancellationToken, right: CancellationToken) -> CancellationToken {
    ///     left.flatMap { right.map { true } }
    /// }
    /// ```
    public func flatMap(_ transform: @escaping () -> CancellationToken) -> CancellationToken {
        let result = CancellationToken()
        onComplete { cancelled in
            guard cancelled else {
                result.complete(cancelled: false)
                return
            }
            transform().onComplete { result.complete(cancelled: $0) }
        }
        return result
    }

    /// A token cancelled once both tokens are cancelled. It completes "not cancelled" as soon as
    /// either token does (both can then no longer be cancelled). Completion happens on the thread
    /// that completes the deciding operand.
    public static func && (left: CancellationToken, right: CancellationToken) -> CancellationToken {
        combine(left, right, decidedBy: false)
    }

    /// A token cancelled as soon as either token is cancelled. It completes "not cancelled" once
    /// both tokens have (then it can never be cancelled). Completion happens on the thread that
    /// completes the deciding operand.
    public static func || (left: CancellationToken, right: CancellationToken) -> CancellationToken {
        combine(left, right, decidedBy: true)
    }

    /// `&&` and `||`: the result completes with `decisive` as soon as either operand does, and
    /// with the other outcome once both operands have completed with it.
    private static func combine(
        _ left: CancellationToken, _ right: CancellationToken, decidedBy decisive: Bool
    ) -> CancellationToken {
        let result = CancellationToken()
        let undecided = Locked(0)
        let observe: (Bool) -> Void = { cancelled in
            if cancelled == decisive {
                result.complete(cancelled: decisive)
            } else if undecided.withLock({ count -> Bool in
                count += 1
                return count == 2
            }) {
                result.complete(cancelled: !decisive)
            }
        }
        left.onComplete(observe)
        right.onComplete(observe)
        return result
    }
}

extension CancellationToken: CustomStringConvertible {
    /// `CancellationToken(pending)`, `CancellationToken(cancelled)` or
    /// `CancellationToken(not cancelled)`.
    public var description: String {
        lock()
        let state = state
        unlock()
        switch state {
        case .pending: return "CancellationToken(pending)"
        case .completed(cancelled: true): return "CancellationToken(cancelled)"
        case .completed(cancelled: false): return "CancellationToken(not cancelled)"
        }
    }
}

// MARK: - Registrations

/// A handler registered on a ``CancellationToken``; `remove()` unregisters it.
///
/// Keeping the registration is optional (the handler stays registered until the token completes
/// either way). It holds its token weakly.
public final class CancellationRegistration: @unchecked Sendable {
    private weak var token: CancellationToken?
    private let id: UInt64

    init(token: CancellationToken?, id: UInt64) {
        self.token = token
        self.id = id
    }

    /// Unregisters the handler and releases it (and what it captured). Returns `true` if the
    /// handler was still registered: it will then never run. Returns `false` if the token had
    /// already completed (the handler has run, is running, or was skipped) or if it was removed
    /// before. Safe from any thread, including from inside a handler.
    @discardableResult
    public func remove() -> Bool {
        token?.remove(id: id) ?? false
    }
}

// MARK: - Entries

private struct Entry {
    let id: UInt64
    let queue: DispatchQueue?
    let action: Action

    /// Runs (or skips) the handler for a token completed with `cancelled`. Outside every lock.
    func run(cancelled: Bool) {
        switch action {
        case .onCancel(let body):
            guard cancelled else { return }
            perform(body)
        case .onComplete(let body):
            perform { body(cancelled) }
        case .cancel(let weak):
            guard cancelled else { return }
            perform { weak.cancel() }
        }
    }

    private func perform(_ body: @escaping () -> Void) {
        guard let queue else {
            body()
            return
        }
        let boxed = UncheckedSendable(body)
        queue.async { boxed.value() }
    }
}

private enum Action {
    case onCancel(() -> Void)
    case onComplete((Bool) -> Void)
    case cancel(WeakCancellable)
}

/// Holds a `Cancellable` weakly; the weak load happens when the handler runs (on its queue).
private final class WeakCancellable: @unchecked Sendable {
    private weak var object: (any Cancellable)?

    init(_ object: any Cancellable) {
        self.object = object
    }

    var isReleased: Bool { object == nil }

    func cancel() { object?.cancel() }
}
