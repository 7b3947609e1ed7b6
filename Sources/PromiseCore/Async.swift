// Swift Concurrency bridges.

extension Promise {
    /// Waits for the promise without blocking a thread and returns its value or throws its
    /// error (cancellation errors included).
    ///
    /// Unlike PromiseKit's, it reacts to cancellation of the awaiting `Task`: the wait ends at
    /// once with `CancellationError` (a plain promise cannot be cancelled, so the work behind
    /// it goes on; use `CancellablePromise.async()` to cancel it). The continuation is resumed
    /// exactly once whichever comes first.
    public func async() async throws -> T {
        if let result { return try result.get() }
        let once = ResumeOnce<T>()
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<T, Error>) in
                once.install(continuation)
                pipe { once.resume(with: $0) }
            }
        } onCancel: {
            once.resume(with: .rejected(CancellationError()))
        }
    }

    /// Creates a promise settled by an `async` body run in a new `Task`.
    ///
    /// ```swift
    /// let promise = Promise { try await fetchData() }
    /// ```
    public convenience init(
        priority: TaskPriority? = nil,
        operation: @escaping @Sendable () async throws -> T
    ) where T: Sendable {
        self.init(pending: ())
        let promise = UncheckedSendable(self)
        Task(priority: priority) {
            do {
                promise.value.resolve(.fulfilled(try await operation()))
            } catch {
                promise.value.resolve(.rejected(error))
            }
        }
    }
}

extension Guarantee {
    /// Waits for the guarantee without blocking a thread. (A guarantee cannot fail, so this
    /// does not react to `Task` cancellation; it returns once the guarantee resolves.)
    public func async() async -> T {
        if case .fulfilled(let value)? = result { return value }
        return await withUnsafeContinuation { (continuation: UnsafeContinuation<T, Never>) in
            pipe { result in
                if case .fulfilled(let value) = result {
                    nonisolated(unsafe) let value = value
                    continuation.resume(returning: value)
                }
            }
        }
    }
}

/// Resumes a continuation exactly once, whether the result or a cancellation arrives first
/// (or before the continuation is installed).
final class ResumeOnce<T>: Sendable {
    private enum State {
        case waiting
        case installed(UnsafeContinuation<T, Error>)
        case early(Result<T>)
        case done
    }
    private let state = Locked(State.waiting)

    init() {}

    func install(_ continuation: UnsafeContinuation<T, Error>) {
        let early: Result<T>? = state.withLock { state in
            switch state {
            case .waiting:
                state = .installed(continuation)
                return nil
            case .early(let result):
                state = .done
                return result
            case .installed, .done:
                preconditionFailure("continuation installed twice")
            }
        }
        if let early {
            nonisolated(unsafe) let outcome = early.swiftResult
            continuation.resume(with: outcome)
        }
    }

    func resume(with result: Result<T>) {
        let continuation: UnsafeContinuation<T, Error>? = state.withLock { state in
            switch state {
            case .waiting:
                state = .early(result)
                return nil
            case .installed(let continuation):
                state = .done
                return continuation
            case .early, .done:
                return nil
            }
        }
        nonisolated(unsafe) let outcome = result.swiftResult
        continuation?.resume(with: outcome)
    }
}

extension Result {
    /// The same outcome as a `Swift.Result`.
    var swiftResult: Swift.Result<T, Error> {
        switch self {
        case .fulfilled(let value): return .success(value)
        case .rejected(let error): return .failure(error)
        }
    }
}
