// PromiseKit 8's bridge to Combine: `future()` on promises and guarantees, `promise()` and
// `guarantee()` on `Future`. Compiled where Combine exists (Apple platforms); the package's
// Linux check (CombineCheck/) compiles this same file against OpenCombine, which has the same
// names. Elsewhere the file is empty.
#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)

@available(iOS 13.0, macOS 10.15, tvOS 13.0, watchOS 6.0, *)
extension Guarantee {
    /// A Combine `Future` that succeeds with this guarantee's value.
    ///
    /// The future's subscribers receive the value on `conf.Q.return` (the main queue unless
    /// configured otherwise), as PromiseKit's `future()` delivers it. The guarantee is already
    /// running: subscribing starts nothing, and a subscriber that comes late gets the value.
    /// A future cannot be cancelled; cancelling a subscription only stops its delivery.
    public func future() -> Future<T, Never> {
        Future { fulfil in
            _ = self._mapGuarantee(on: conf.Q.return, flags: nil) { value in fulfil(.success(value)) }
        }
    }
}

@available(iOS 13.0, macOS 10.15, tvOS 13.0, watchOS 6.0, *)
extension Promise {
    /// A Combine `Future` that succeeds with this promise's value or fails with its error.
    ///
    /// The future's subscribers receive the value or the error on `conf.Q.return` (the main
    /// queue unless configured otherwise), as PromiseKit's `future()` delivers them. Every
    /// error reaches the future, cancellation errors included (PromiseKit's bridge drops
    /// those, leaving the future unfinished). The promise is already running: subscribing starts
    /// nothing, and a subscriber that comes late gets the result. A future cannot be cancelled;
    /// cancelling a subscription only stops its delivery.
    public func future() -> Future<T, Error> {
        Future { complete in
            _ = self._generalStep(on: conf.Q.return, flags: nil, hop: .always, isObserver: true) {
                result -> StepOutcome<Void> in
                switch result {
                case .fulfilled(let value): complete(.success(value))
                case .rejected(let error): complete(.failure(error))
                }
                return .result(.fulfilled(()))
            }
        }
    }
}

@available(iOS 13.0, macOS 10.15, tvOS 13.0, watchOS 6.0, *)
extension Future {
    /// A promise of this future's value: fulfilled with it, or rejected with the future's
    /// failure.
    ///
    /// The promise subscribes at once and settles synchronously on the thread where the future
    /// completes (at once, on this thread, if it has completed already); its handlers run where
    /// their `on:` says. The subscription is released when the future completes.
    public func promise() -> PromiseCore.Promise<Output> {
        PromiseCore.Promise<Output> { resolver in
            // `subscribe` (not `sink`) keeps no cancellable: the future holds the subscriber
            // until it completes, then lets it go.
            subscribe(
                Subscribers.Sink(
                    receiveCompletion: { completion in
                        if case .failure(let error) = completion { resolver.reject(error) }
                    },
                    receiveValue: { value in resolver.fulfill(value) }
                )
            )
        }
    }
}

@available(iOS 13.0, macOS 10.15, tvOS 13.0, watchOS 6.0, *)
extension Future where Failure == Never {
    /// A guarantee of this future's value.
    ///
    /// The guarantee subscribes at once and is resolved synchronously on the thread where the
    /// future completes (at once, on this thread, if it has completed already); its handlers run
    /// where their `on:` says. The subscription is released when the future completes.
    public func guarantee() -> Guarantee<Output> {
        Guarantee<Output> { resolve in
            subscribe(Subscribers.Sink(receiveCompletion: { _ in }, receiveValue: { value in resolve(value) }))
        }
    }
}

#endif
