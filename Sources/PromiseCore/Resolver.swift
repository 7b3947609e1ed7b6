/// Settles the promise it was created with. Thread-safe; only the first resolution counts,
/// later ones are ignored.
///
/// Handlers added with `on: nil` run synchronously inside `fulfill`/`reject`, on the calling
/// thread, after the promise's lock has been released.
public final class Resolver<T>: Sendable {
    @usableFromInline let promise: Promise<T>

    @usableFromInline init(_ promise: Promise<T>) {
        self.promise = promise
    }

    deinit {
        // `isPendingLocked` reads a flag; `isPending` would copy the result (generic metadata
        // lookups on every deallocation).
        if promise.isPendingLocked {
            conf.logHandler(.pendingPromiseDeallocated)
        }
    }

    /// Fulfils the promise with `value`.
    @inlinable public func fulfill(_ value: T) {
        promise._fulfillAndDrain(value)
    }

    /// Rejects the promise with `error`.
    @inlinable public func reject(_ error: Error) {
        promise._rejectAndDrain(error)
    }

    /// Settles the promise with `result`.
    public func resolve(_ result: Result<T>) {
        promise.resolve(result)
    }

    /// Completion-handler convention: rejects with `error` if not nil, else fulfils with `obj`;
    /// both nil rejects with `PMKError.invalidCallingConvention`.
    public func resolve(_ obj: T?, _ error: Error?) {
        if let error {
            reject(error)
        } else if let obj {
            fulfill(obj)
        } else {
            reject(PMKError.invalidCallingConvention)
        }
    }

    /// Completion-handler convention: rejects with `error` if not nil, else fulfils with `obj`.
    public func resolve(_ obj: T, _ error: Error?) {
        if let error {
            reject(error)
        } else {
            fulfill(obj)
        }
    }

    /// Completion-handler convention with the error first.
    public func resolve(_ error: Error?, _ obj: T?) {
        resolve(obj, error)
    }

    /// Settles the promise with a `Swift.Result`.
    public func resolve<E: Error>(_ result: Swift.Result<T, E>) {
        switch result {
        case .success(let value): fulfill(value)
        case .failure(let error): reject(error)
        }
    }
}

extension Resolver where T == Void {
    /// Rejects with `error` if not nil, else fulfils.
    public func resolve(_ error: Error?) {
        if let error {
            reject(error)
        } else {
            fulfill(())
        }
    }

    /// Fulfils with `()`. (`fulfill()` without an argument is not offered, as in PromiseKit.)
    public func fulfill_() {
        fulfill(())
    }
}

extension Resolver: CustomStringConvertible {
    /// Describes the promise this resolver settles.
    public var description: String { "Resolver(\(promise))" }
}
