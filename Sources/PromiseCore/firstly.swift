/// Runs `body` at once and returns the promise it returns; a throw rejects. Lets a chain start
/// with its first asynchronous step indented like the others.
///
/// ```swift
/// firstly { login() }.then { fetch(avatar: $0.user) }.done { … }
/// ```
@inlinable public func firstly<U: Thenable>(execute body: () throws -> U) -> Promise<U.T> {
    do {
        return try body().asPromise()
    } catch {
        return Promise(error: error)
    }
}

/// Runs `body` at once and returns the guarantee it returns.
@inlinable public func firstly<T>(execute body: () -> Guarantee<T>) -> Guarantee<T> {
    body()
}
