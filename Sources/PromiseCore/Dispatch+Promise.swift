import Dispatch

// Promises from work run on a dispatch queue: `DispatchQueue.async(.promise)`, as in PromiseKit.

extension DispatchQueue {
    /// Runs `body` on this queue and returns a promise of its result; a throw rejects.
    ///
    /// ```swift
    /// DispatchQueue.global().async(.promise) { try decode(data) }.done { … }
    /// ```
    public func async<T>(
        _: PMKNamespacer,
        group: DispatchGroup? = nil,
        qos: DispatchQoS = .default,
        flags: DispatchWorkItemFlags = [],
        execute body: @escaping () throws -> T
    ) -> Promise<T> {
        let promise = Promise<T>(pending: ())
        let work = UncheckedSendable(body)
        async(group: group, qos: qos, flags: flags) {
            do {
                promise.resolve(.fulfilled(try work.value()))
            } catch {
                promise.resolve(.rejected(error))
            }
        }
        return promise
    }

    /// Runs `body` on this queue and returns a guarantee of its result.
    public func async<T>(
        _: PMKNamespacer,
        group: DispatchGroup? = nil,
        qos: DispatchQoS = .default,
        flags: DispatchWorkItemFlags = [],
        execute body: @escaping () -> T
    ) -> Guarantee<T> {
        let promise = Promise<T>(pending: ())
        let work = UncheckedSendable(body)
        async(group: group, qos: qos, flags: flags) {
            promise.resolve(.fulfilled(work.value()))
        }
        return Guarantee(promise: promise)
    }
}
