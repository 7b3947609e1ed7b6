import Dispatch

// Promises from work run on a dispatch queue: `DispatchQueue.async(.promise)`, as in PromiseKit.

extension DispatchQueue {
    /// Runs `body` on this queue and returns a promise of its result; a throw rejects.
    ///
    /// ```swift
    /// DispatchQueue.global().async(.promise) { try decode(data) }.done { … }
    /// ```
    @preconcurrency public func async<T>(
        _: PMKNamespacer,
        group: DispatchGroup? = nil,
        qos: DispatchQoS = .default,
        flags: DispatchWorkItemFlags = [],
        execute body: @escaping @Sendable () throws -> T
    ) -> Promise<T> {
        let promise = Promise<T>(pending: ())
        async(group: group, qos: qos, flags: flags) {
            do {
                promise.resolve(.fulfilled(try body()))
            } catch {
                promise.resolve(.rejected(error))
            }
        }
        return promise
    }

    /// Runs `body` on this queue and returns a guarantee of its result.
    @preconcurrency public func async<T>(
        _: PMKNamespacer,
        group: DispatchGroup? = nil,
        qos: DispatchQoS = .default,
        flags: DispatchWorkItemFlags = [],
        execute body: @escaping @Sendable () -> T
    ) -> Guarantee<T> {
        let promise = Promise<T>(pending: ())
        async(group: group, qos: qos, flags: flags) {
            promise.resolve(.fulfilled(body()))
        }
        return Guarantee(promise: promise)
    }
}
