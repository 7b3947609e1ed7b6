/// The outcome of a settled promise. Named as in PromiseKit 8: inside a module that imports
/// PromiseCore, write `Swift.Result` for the standard library's type.
public enum Result<T> {
    /// The promise was fulfilled with a value.
    case fulfilled(T)
    /// The promise was rejected with an error.
    case rejected(Error)
}

extension Result: Sendable where T: Sendable {}

extension Result {
    /// `true` when fulfilled.
    public var isFulfilled: Bool {
        if case .fulfilled = self { return true }
        return false
    }

    /// Returns the value or throws the error.
    public func get() throws -> T {
        switch self {
        case .fulfilled(let value): return value
        case .rejected(let error): throw error
        }
    }
}
