import Dispatch
import PromiseCore

// The public handle of a chain's cancellation (see the overview in CancelStorage.swift).

// MARK: - The public handle

/// The cancellation scope of a chain of `CancellablePromise`s.
///
/// Every promise of a chain (`then`, `map`, `done`, `catch`… of a `CancellablePromise`) shares
/// one context; `cancel()` on any of them, or on the context, cancels the whole chain:
/// - every still-pending promise of the chain is rejected (with `CancellablePromiseError
///   .cancelled` unless `cancel(with:)` says otherwise) before `cancel()` returns, except that
///   a promise waiting behind an observer (`ensure`, `ensureThen`, `tap`) that has not run yet
///   settles when that observer passes the cancellation on, so the chain settles in order;
/// - the cancel closure of every pending task is called exactly once, synchronously on the
///   cancelling thread, after those rejections;
/// - the chains that pending steps wait on (promises their `then`/`recover` bodies returned) are
///   cancelled too;
/// - the handlers released by the rejections then run (`on: nil` ones synchronously, others on
///   their queues).
///
/// A context is a *cancel handle*: while it (or any promise of its chain) is alive, the chain
/// can be cancelled and its cancel closures are kept. When the last handle goes away, the cancel
/// closures are released uncalled and the work settles the chain normally; with nothing able to
/// settle it either, the whole chain is freed. Holding only the context (not the promises) lets
/// settled promises be freed.
///
/// Thread-safe; cancelling twice, or cancelling a settled chain, does nothing more.
public final class CancelContext: _CancelHandle, Sendable {
    // nonisolated(unsafe): the storage synchronises itself (its lock), but as a `ManagedBuffer`
    // it cannot be declared `Sendable`.
    @usableFromInline nonisolated(unsafe) let storage: CancelStorage

    /// Creates an empty context. Pass it to `cancellize(cancelContext:)` to start chains that
    /// are cancelled together.
    public init() {
        storage = CancelStorage.make()
        storage.adopt(self)
    }

    /// A context of `storage`, which counted it as a handle already (see `CancelStorage.context`).
    init(counted storage: CancelStorage) {
        self.storage = storage
    }

    @usableFromInline var _handleStorage: CancelStorage { storage }
    @usableFromInline var _handleContext: CancelContext { self }

    deinit {
        storage.releaseHandle()
    }

    /// Cancels every pending promise and task of the chain (see the type's documentation).
    /// `file` and `line` record where the chain was cancelled, for `debugDescription`.
    public func cancel(file: StaticString = #fileID, line: UInt = #line) {
        storage.cancel(with: boxedCancellation, at: CancelSite(file: file, line: line))
    }

    /// Cancels the chain, rejecting its pending promises with `error`. Only the first call has
    /// an effect. `file` and `line` record where the chain was cancelled.
    public func cancel(with error: Error, file: StaticString = #fileID, line: UInt = #line) {
        storage.cancel(with: error, at: CancelSite(file: file, line: line))
    }

    /// ``cancel(with:file:line:)`` without a call site, for code that names the method
    /// exactly (a protocol requirement, a function reference).
    @_disfavoredOverload
    public func cancel(with error: Error) {
        storage.cancel(with: error, at: .library)
    }

    /// ``cancel(file:line:)`` without a call site: the `Cancellable` requirement.
    @_disfavoredOverload
    public func cancel() {
        storage.cancel(with: boxedCancellation, at: .library)
    }

    /// `true` once `cancel()` was called on this context or any promise of its chain. Never
    /// goes back to `false`.
    public var isCancelled: Bool { storage.cancelledError != nil }

    /// The same as `isCancelled` (PromiseKit 7's name).
    public var cancelAttempted: Bool { isCancelled }

    /// The error the chain was cancelled with, or `nil`.
    public var cancelledError: Error? { storage.cancelledError }

    /// Makes this context and `other` one chain: afterwards cancelling either cancels both. If
    /// either was cancelled already, the joined chain is cancelled. Costs O(1) amortised: the
    /// chain with fewer pending promises is merged into the other.
    @usableFromInline func join(_ other: CancelContext) {
        storage.join(other.storage)
    }
}

extension CancelContext: CustomDebugStringConvertible {
    /// The chain's state: `CancelContext(pending: 2)` while it can be cancelled, or
    /// `CancelContext(cancelled at Feed.swift:42 with CancellablePromiseError.cancelled,
    /// pending: 0)` once cancelled, naming where `cancel()` was called.
    public var debugDescription: String {
        "CancelContext(\(CancelSite.describe(storage.debugState)))"
    }
}

/// Where a chain was cancelled: the call site of `cancel()`.
struct CancelSite: Sendable, CustomStringConvertible {
    let file: StaticString
    let line: UInt

    /// A cancellation the library asked for on its own (a link, a join, `autoCancel`, a bag).
    static let library = CancelSite(file: "CancellablePromiseKit", line: 0)

    var description: String { line == 0 ? "\(file)" : "\(file):\(line)" }

    /// `cancelled at <site> with <error>, pending: <n>`, or `pending: <n>`.
    static func describe(_ state: (error: (any Error)?, site: CancelSite?, pending: Int)) -> String {
        guard let error = state.error else { return "pending: \(state.pending)" }
        let site = state.site.map { " at \($0)" } ?? ""
        return "cancelled\(site) with \(type(of: error)).\(error), pending: \(state.pending)"
    }
}

extension CancelContext: Hashable {
    /// Contexts are equal when they are the same object.
    public static func == (lhs: CancelContext, rhs: CancelContext) -> Bool { lhs === rhs }
    /// Hashes the object identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
