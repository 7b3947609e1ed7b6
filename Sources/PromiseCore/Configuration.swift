import Dispatch
import Foundation

/// Events PromiseCore reports through `conf.logHandler`.
public enum LogEvent: Sendable {
    /// `wait()` was called on the main thread.
    case waitOnMainThread
    /// A `Resolver` was released while its promise was pending: the promise can never settle.
    case pendingPromiseDeallocated
    /// A guarantee's resolve function was released while the guarantee was pending.
    case pendingGuaranteeDeallocated
    /// `cauterize()` swallowed this error.
    case cauterized(Error)
}

/// The library's configuration: default queues, default catch policy and log handler.
public struct PMKConfiguration: Sendable {
    /// Default delivery queues, as in PromiseKit: `map` and `return`; `nil` means "deliver
    /// synchronously".
    ///
    /// Bodies given to operators no longer follow it. A body given no `on:` is a main-actor body
    /// and always runs on the main queue; a body given `on:` runs where `on:` says. (A body typed
    /// `@MainActor` cannot be run on another queue, so a setting here could only break that type's
    /// promise.) It stays the default of what runs none of your code: `Q.map` is where
    /// `sortedValues()` sorts and `when(_:while:isEnsured:)` delivers an ensured value, `Q.return`
    /// where `future()` delivers to its subscribers. See "Swift 6 and data races".
    public var Q: (map: DispatchQueue?, return: DispatchQueue?) = (map: DispatchQueue.main, return: DispatchQueue.main)

    /// The default policy of `catch` and `recover`.
    public var catchPolicy = CatchPolicy.allErrorsExceptCancellation

    /// Receives the library's diagnostics; by default writes them to standard error.
    /// Called on whatever thread the event happens.
    public var logHandler: @Sendable (LogEvent) -> Void = PMKConfiguration.defaultLogHandler

    /// The defaults: main queues, `.allErrorsExceptCancellation`, log to standard error.
    public init() {}

    /// Writes a one-line description of `event` to standard error.
    public static let defaultLogHandler: @Sendable (LogEvent) -> Void = { event in
        let message: String
        switch event {
        case .waitOnMainThread:
            message = "PromiseCore: warning: `wait()` called on main thread!"
        case .pendingPromiseDeallocated:
            message = "PromiseCore: warning: pending promise deallocated"
        case .pendingGuaranteeDeallocated:
            message = "PromiseCore: warning: pending guarantee deallocated"
        case .cauterized(let error):
            message = "PromiseCore: warning: cauterized error: \(error)"
        }
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}

private let configurationStore = Locked(PMKConfiguration())

/// The library's configuration. Unlike PromiseKit's, it is safe to read and set from any
/// thread; a change affects handlers added afterwards.
///
/// ```swift
/// conf.catchPolicy = .allErrors   // `catch` and `recover` see cancellations by default
/// ```
public var conf: PMKConfiguration {
    get { configurationStore.withLock { $0 } }
    set { configurationStore.withLock { $0 = newValue } }
}

/// Namespaces PromiseKit-style overloads, as in `DispatchQueue.global().async(.promise) { … }`.
public enum PMKNamespacer: Sendable {
    case promise
}
