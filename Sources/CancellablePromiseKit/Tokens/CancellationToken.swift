import Dispatch
import PromiseCore

// A cancellation token is a future of `Bool`: pending, then completed once with `true`
// ("cancelled", by its request's `cancel()`) or `false` ("not cancelled", when the request is
// released without cancelling). Completing decides the outcome under the token's own lock and
// takes the entry list out; the entries run after the lock is released, in registration
// order, so a handler may cancel, register on or inspect the same token without deadlocking.
// Each token has its own lock, and no code holds two token locks at once.
//
// All of a token's mutable state is one `TokenState` (State/TokenState.swift), and every
// state change is one of its events: a `mutating` method called under the lock that returns
// what is left to do once the lock is released (`TokenActions`): entries to run, links to
// remove from operands, and the references to drop. Only the token takes its lock
// (`withState`), and it performs the actions after unlocking. Dropping happens outside the lock
// because a deinitialiser may run user code or take another token's lock.
//
// Derived tokens (`map`, `flatMap`, `&&`, `||`) and the tokens they are derived from:
// - An operand lists a *link* to each token derived from it. The link holds the derived token
//   weakly, so a long-lived operand never keeps a derived token alive.
// - A derived token holds its operands strongly, with the id of its link on each, until the
//   link has run. When the derived token completes, or is freed while pending, it removes its
//   remaining links: an operand lists only derived tokens that are alive and pending.
// - A derived token keeps itself alive (`keptAlive`) while it is pending and has entries of
//   its own (handlers, registered objects): those are what its user expects to run, even when
//   the user dropped the token itself. With no entry of its own it lives only as long as
//   someone holds it (a user, or a token derived from it).
// - A `register(_:)` entry whose object died still counts until it is swept out. Sweeps run
//   when a token's entry list has doubled since the last sweep; they follow the links, so the
//   derived tokens below a growing long-lived token are swept too, and one whose entries all
//   died lets itself go.

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
/// A long-lived token keeps only what is still live: removed handlers, `register(_:)` entries
/// whose object was released, and tokens derived from it (``map(_:)``, ``flatMap(_:)``, `&&`,
/// `||`) that completed or that nothing can observe any more are all released while it lives
/// on. A derived token that its user dropped stays alive, and is completed as documented,
/// exactly as long as it has handlers or registered objects of its own.
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
    // @unchecked: `state` is guarded by the inline lock word below.
    // The lock word must remain the first stored property: an inline lock word, by the rule of
    // PromiseCore's Lock.swift (a `LockStorage` would be one allocation more per token).
    private var lockWord = LockWord()
    /// Guarded by the lock (so no dynamic exclusivity check is needed).
    @exclusivity(unchecked) private var state: TokenState

    init() {
        state = TokenState(phase: .pending, isDerived: false)
    }

    private init(derived: Void) {
        state = TokenState(phase: .pending, isDerived: true)
    }

    private init(completed cancelled: Bool) {
        state = TokenState(phase: .completed(cancelled: cancelled), isDerived: false)
    }

    deinit {
        // A pending request token is released only when nobody can complete it any more: its
        // onComplete handlers learn that it will never be cancelled (so no continuation waits
        // forever). A pending derived token has no entries of its own here (they would keep it
        // alive); it leaves the operands it is still registered on.
        state.tearDown().perform()
        lockWordDestroy(of: self)
    }

    /// A token that is never cancelled: already completed, "not cancelled". `onCancel` handlers
    /// registered on it are dropped at once; `onComplete` handlers run at once with `false`.
    ///
    /// Where the expected type is `CancellationToken?`, write `CancellationToken.none` in full:
    /// a bare `.none` means `nil`.
    public static let none = CancellationToken(completed: false)

    /// A token already cancelled: what ``current`` returns in a body whose step was cancelled.
    static let cancelledAlready = CancellationToken(completed: true)

    // MARK: The lock

    /// Runs `event` on the state with the lock held and returns what it decided. The only code
    /// that takes the token's lock.
    @inline(__always)
    private func withState<R>(_ event: (inout TokenState) -> R) -> R {
        lockWordLock(of: self)
        defer { lockWordUnlock(of: self) }
        return event(&state)
    }

    /// Runs `event` under the lock, then the actions it returned, after unlocking.
    private func handle(_ event: (inout TokenState) -> TokenActions?) {
        withState(event)?.perform()
    }

    // MARK: State

    /// `true` once the token's request has been cancelled. Safe from any thread; tasks may poll
    /// it.
    public var isCancelled: Bool {
        withState { $0.completedValue == true }
    }

    /// `true` once the token has completed, cancelled or not: after that it never changes and
    /// holds no handlers.
    public var isCompleted: Bool {
        withState { $0.completedValue != nil }
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
    /// `body` is released once the token completes or the registration is removed. On a
    /// derived token, the registration keeps the token alive until then, even if nothing else
    /// holds it.
    ///
    /// ```swift
    /// token.onCancel { [weak task] in task?.cancel() }
    /// ```
    @discardableResult
    @preconcurrency public func onCancel(
        on queue: DispatchQueue? = nil, _ body: @escaping @Sendable () -> Void
    ) -> CancellationRegistration {
        add(.onCancel(body), queue: queue)
    }

    /// Runs `body` once when the token completes, with `true` if it was cancelled and `false`
    /// if its request was released without cancelling.
    ///
    /// With `on: nil` (the default) `body` runs synchronously on the thread that completes the
    /// token (the one calling `cancel()`, or releasing the request), or at once on this thread
    /// if the token has completed already. With a queue, it runs asynchronously there. `body`
    /// is released once it has run or the registration is removed. On a derived token, the
    /// registration keeps the token alive until then, even if nothing else holds it.
    @discardableResult
    public func onComplete(
        on queue: DispatchQueue? = nil,
        _ body: @escaping @Sendable (_ cancelled: Bool) -> Void
    ) -> CancellationRegistration {
        add(.onComplete(body), queue: queue)
    }

    /// Calls `cancellable.cancel()` once if the token is cancelled, holding `cancellable`
    /// weakly: the token never keeps it alive, and nothing happens if it is gone by then.
    ///
    /// With `on: nil` (the default) `cancel()` is called synchronously on the cancelling thread
    /// (at once, on this thread, if the token is already cancelled); with a queue, on that queue.
    /// Registrations whose object has been released are swept out as new ones are added to the
    /// token or to the tokens it is derived from. On a derived token, the registration keeps
    /// the token alive while `cancellable` is (until it is swept out once `cancellable` is gone).
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
    /// Handlers run on this thread (or are dispatched to their queues) after the lock is released;
    /// a derived token then leaves the operands it was still registered on.
    @discardableResult
    func complete(cancelled: Bool) -> Bool {
        guard let actions = withState({ $0.complete(cancelled: cancelled) }) else { return false }
        TokenCompletions.perform(actions)
        return true
    }

    // MARK: Registration bookkeeping

    private func add(_ action: TokenAction, queue: DispatchQueue?) -> CancellationRegistration {
        guard let id = addEntry(action, queue: queue) else {
            return CancellationRegistration(token: nil, id: 0)
        }
        return CancellationRegistration(token: self, id: id)
    }

    /// Lists an entry and returns its id, or runs it at once (and returns `nil`) if the token
    /// has completed. Starts a sweep when the list has doubled since the last one.
    private func addEntry(_ action: TokenAction, queue: DispatchQueue?) -> UInt64? {
        switch withState({ $0.add(action, queue: queue, owner: self) }) {
        case .completed(let cancelled):
            TokenEntry(id: 0, queue: queue, action: action).run(cancelled: cancelled)
            return nil
        case .listed(let id, let sweep):
            if sweep { sweepTree() }
            return id
        }
    }

    /// Removes the entry `id` if the token is still pending; returns whether it was removed.
    func remove(id: UInt64) -> Bool {
        let (removed, actions) = withState { $0.remove(id: id) }
        // The handler and what it captured, and the token's reference to itself if that was
        // its last entry of its own, are released outside the lock.
        actions.perform()
        return removed
    }

    // MARK: Sweeping

    /// Sweeps this token and the derived tokens below it.
    private func sweepTree() {
        let pass = sweepPasses.withLock { counter -> UInt64 in
            counter &+= 1
            return counter
        }
        _ = sweep(pass: pass)
    }

    /// Drops `register(_:)` entries whose object is gone and links whose derived token is gone,
    /// then sweeps the derived tokens still linked. A derived token left without entries of its
    /// own lets itself go (it is freed once its caller drops it, and leaves its operands).
    /// Returns the number of entries kept, in this token and below it. Visits each token once
    /// per pass (returning 0 the second time), so shared operands and link cycles are safe.
    ///
    /// A sweep costs the entries it drops (each paid for by its own addition) plus the live
    /// entries it visits; the next one waits for at least as many new entries. So sweeping
    /// costs O(1) per entry, amortised, and a list stays within twice its live entries plus
    /// the live entries below it.
    private func sweep(pass: UInt64) -> Int {
        // Depth first, with an explicit stack rather than recursion: tokens derived from tokens
        // derived from this one can be nested a hundred thousand levels deep.
        struct Visit {
            let token: CancellationToken
            var derived: [CancellationToken]
            var next = 0
            /// Entries kept by the tokens below, visited so far.
            var below = 0
            var actions: TokenActions
        }
        func enter(_ token: CancellationToken) -> Visit? {
            guard let (derived, actions) = token.withState({ $0.sweep(pass: pass) }) else { return nil }
            return Visit(token: token, derived: derived, actions: actions)
        }
        var stack: [Visit] = []
        // (No binding outlives the append: a copy of the visit would keep the tokens below
        // alive past the point where they are meant to be freed.)
        if let visit = enter(self) { stack.append(visit) } else { return 0 }
        while true {
            let top = stack.count - 1
            if stack[top].next < stack[top].derived.count {
                let child = stack[top].derived[stack[top].next]
                stack[top].next += 1
                if let visit = enter(child) { stack.append(visit) }
                continue
            }
            var visit = stack.removeLast()
            // A derived token that let itself go is freed here, and leaves this token's list.
            visit.derived = []
            visit.actions.perform()
            visit.actions = TokenActions()
            let kept = visit.token.withState { $0.sweepFinished(below: visit.below) }
            guard !stack.isEmpty else { return kept }
            stack[stack.count - 1].below += kept
        }
    }

    // MARK: Derived tokens

    /// Lists a link that runs `body` with `target` when this token completes, and records it in
    /// `target`, which removes it when it completes or is freed first.
    private func addLink(to target: CancellationToken, _ body: @escaping (CancellationToken, Bool) -> Void) {
        let link = DerivedLink(target: target, body: body)
        guard let id = addEntry(.derived(link), queue: nil) else { return }  // ran at once
        target.recordLink(link, on: self, id: id)
    }

    /// Keeps `operand` and the id of `link` on it until the link runs or this token completes.
    /// If either happened already, removes the link at once (if still listed).
    private func recordLink(_ link: DerivedLink, on operand: CancellationToken, id: UInt64) {
        let record = OperandLink(token: operand, id: id, link: link)
        guard withState({ $0.recordLink(record) }) else {
            _ = operand.remove(id: id)
            return
        }
    }

    /// The operand of `link` completed and is running it: forget that operand.
    func linkDidRun(_ link: DerivedLink) {
        handle { $0.linkDidRun(link) }
    }

    /// `&&`, `||`: an operand completed without deciding; returns `true` if it was the second.
    private func undecidedOperandCompleted() -> Bool {
        withState { $0.undecidedOperandCompleted() }
    }

    // MARK: Queries

    /// The number of entries stored: handlers, registered objects and links to derived tokens
    /// (for tests that check that a long-lived token stays bounded).
    package var pendingHandlerCount: Int {
        withState { $0.liveEntryCount }
    }

    /// The length of the entry list, tombstones included (for tests of the list's bound).
    package var storedEntryCount: Int {
        withState { $0.storedEntryCount }
    }

    #if DEBUG
    /// How many entries compactions and sweeps copied to a new list, in this process (debug
    /// builds only): tests count the work that removing registrations costs instead of timing it.
    package static let entriesMoved = Locked(0)
    #endif
}

/// Numbers the sweep passes.
private let sweepPasses = Locked<UInt64>(0)

// MARK: - Combinators

extension CancellationToken {
    /// A token completed from this one: when this token is cancelled, `transform` runs (on the
    /// cancelling thread) and its result completes the new token (`true` = cancelled); when this
    /// token completes "not cancelled", so does the new one, without calling `transform`.
    ///
    /// This token holds the new one only weakly: if nothing holds the new token and nothing is
    /// registered on it, it is freed together with `transform`, and this token forgets it.
    /// Handlers and objects registered on the new token keep it alive until it completes (or
    /// they are removed), so they run even if the new token itself was not kept.
    ///
    /// ```swift
    /// let onlyIfStillVisible = token.map { view.isVisible }
    /// ```
    @preconcurrency public func map(_ transform: @escaping @Sendable () -> Bool) -> CancellationToken {
        let result = CancellationToken(derived: ())
        addLink(to: result) { result, cancelled in
            result.complete(cancelled: cancelled && transform())
        }
        return result
    }

    /// A token completed from this one: when this token is cancelled, `transform` runs (on the
    /// cancelling thread) and the new token completes as the token it returns does; when this
    /// token completes "not cancelled", so does the new one, without calling `transform`.
    ///
    /// The new token is held by this token, then by the returned one, only weakly, as with
    /// ``map(_:)``: if nothing holds it and nothing is registered on it, it is freed and
    /// forgotten; what is registered on it keeps it alive until it completes.
    ///
    /// ```swift
    /// func && (left: CancellationToken, right: CancellationToken) -> CancellationToken {
    ///     left.flatMap { right.map { true } }
    /// }
    /// ```
    @preconcurrency public func flatMap(_ transform: @escaping @Sendable () -> CancellationToken) -> CancellationToken {
        let result = CancellationToken(derived: ())
        addLink(to: result) { result, cancelled in
            guard cancelled else {
                result.complete(cancelled: false)
                return
            }
            transform().addLink(to: result) { result, cancelled in
                result.complete(cancelled: cancelled)
            }
        }
        return result
    }

    /// A token cancelled once both tokens are cancelled. It completes "not cancelled" as soon as
    /// either token does (both can then no longer be cancelled). Completion happens on the thread
    /// that completes the deciding operand; once completed, the new token leaves the other one.
    ///
    /// The operands hold the new token only weakly: if nothing holds it and nothing is
    /// registered on it, it is freed and forgotten; what is registered on it keeps it alive
    /// until it completes.
    public static func && (left: CancellationToken, right: CancellationToken) -> CancellationToken {
        combine(left, right, decidedBy: false)
    }

    /// A token cancelled as soon as either token is cancelled. It completes "not cancelled" once
    /// both tokens have (then it can never be cancelled). Completion happens on the thread that
    /// completes the deciding operand; once completed, the new token leaves the other one.
    ///
    /// The operands hold the new token only weakly: if nothing holds it and nothing is
    /// registered on it, it is freed and forgotten; what is registered on it keeps it alive
    /// until it completes.
    public static func || (left: CancellationToken, right: CancellationToken) -> CancellationToken {
        combine(left, right, decidedBy: true)
    }

    /// `&&` and `||`: the result completes with `decisive` as soon as either operand does, and
    /// with the other outcome once both operands have completed with it.
    private static func combine(
        _ left: CancellationToken, _ right: CancellationToken, decidedBy decisive: Bool
    ) -> CancellationToken {
        let result = CancellationToken(derived: ())
        let observe: (CancellationToken, Bool) -> Void = { result, cancelled in
            if cancelled == decisive || result.undecidedOperandCompleted() {
                result.complete(cancelled: cancelled)
            }
        }
        left.addLink(to: result, observe)
        right.addLink(to: result, observe)
        return result
    }
}

extension CancellationToken: CustomStringConvertible {
    /// `CancellationToken(pending)`, `CancellationToken(cancelled)` or
    /// `CancellationToken(not cancelled)`.
    public var description: String {
        switch withState({ $0.completedValue }) {
        case nil: return "CancellationToken(pending)"
        case true?: return "CancellationToken(cancelled)"
        case false?: return "CancellationToken(not cancelled)"
        }
    }
}

// MARK: - Registrations

/// A handler registered on a ``CancellationToken``; `remove()` unregisters it.
///
/// Keeping the registration is optional (the handler stays registered until the token completes
/// either way). It holds its token weakly; removing the last handler of a derived token that
/// nothing else holds frees that token.
public final class CancellationRegistration: Sendable {
    private weak let token: CancellationToken?
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

/// A registration bound to a promise (`CancellablePromise.cancel(on:)`) is the promise's settle
/// listener: it leaves its token when the promise settles.
extension CancellationRegistration: PromiseAttachment {
    @usableFromInline package func promiseDidSettle(key: UInt64) { remove() }

    @usableFromInline package func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}
