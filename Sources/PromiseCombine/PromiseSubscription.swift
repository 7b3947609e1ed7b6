// The subscription every promise publisher hands its subscriber. A promise gives one result,
// so the subscription is a small state machine: it waits for demand and for the result, in
// either order, and delivers once both are there; a cancel ends it. Events are decided under
// the lock and return an action, which runs after the lock is released (the subscriber's
// methods and the cancelling of the work are never called with the lock held).
#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
import CancellablePromiseKit

/// The states of one subscription to a promise publisher, and the rules between them.
enum PromiseSubscriptionState<Downstream: Subscriber> {
    /// Waiting for demand, the result or both. `result` is a value kept until demand comes (a
    /// failure needs no demand and is delivered at once). `interest` is the work this
    /// subscription keeps going (a follower of shared work), cancelled if the subscription is.
    case waiting(Downstream, demanded: Bool, result: Downstream.Input?, interest: CancellablePromise<Downstream.Input>?)
    /// Delivered, failed or cancelled: it holds nothing more.
    case finished

    /// What to do after releasing the lock.
    enum Action {
        case none
        /// Send the value, then `.finished`.
        case send(Downstream, Downstream.Input)
        /// Send the failure.
        case fail(Downstream, Downstream.Failure)
        /// Withdraw the interest in the work; the downstream is released with it.
        case withdraw(CancellablePromise<Downstream.Input>?, Downstream)
    }

    /// The subscriber asked for `demand` more values (more than none).
    mutating func request(_ demand: Subscribers.Demand) -> Action {
        guard demand > .none, case .waiting(let downstream, false, let result, let interest) = self else {
            return .none
        }
        if let result {
            self = .finished
            return .send(downstream, result)
        }
        self = .waiting(downstream, demanded: true, result: nil, interest: interest)
        return .none
    }

    /// The promise settled with `result`.
    mutating func settled(_ result: Swift.Result<Downstream.Input, Downstream.Failure>) -> Action {
        guard case .waiting(let downstream, let demanded, nil, let interest) = self else { return .none }
        switch result {
        case .success(let value) where demanded:
            self = .finished
            return .send(downstream, value)
        case .success(let value):
            self = .waiting(downstream, demanded: false, result: value, interest: interest)
            return .none
        case .failure(let error):
            self = .finished
            return .fail(downstream, error)
        }
    }

    /// The subscriber cancelled.
    mutating func cancel() -> Action {
        guard case .waiting(let downstream, _, _, let interest) = self else { return .none }
        self = .finished
        return .withdraw(interest, downstream)
    }
}

/// A subscription to a promise publisher: delivers the promise's one result to `Downstream`
/// once it has demand, and withdraws its interest in the work when cancelled.
final class PromiseSubscription<Downstream: Subscriber>: Subscription, Sendable {
    private let state: Locked<PromiseSubscriptionState<Downstream>>

    /// A subscription for `downstream`; cancelling it cancels `interest` (if any) unless the
    /// result was delivered first.
    init(_ downstream: Downstream, interest: CancellablePromise<Downstream.Input>?) {
        state = Locked(.waiting(downstream, demanded: false, result: nil, interest: interest))
    }

    func request(_ demand: Subscribers.Demand) {
        perform(state.withLock { $0.request(demand) })
    }

    func cancel() {
        perform(state.withLock { $0.cancel() })
    }

    /// The promise settled: delivers the result if there is demand (a failure at once).
    func settled(_ result: Swift.Result<Downstream.Input, Downstream.Failure>) {
        perform(state.withLock { $0.settled(result) })
    }

    /// The promise settled with `result`: the handler a publisher pipes its promise to. (A method
    /// rather than a closure in the publisher's generic `receive(subscriber:)`: a `@Sendable`
    /// closure there would capture the subscriber's type, which need not be `SendableMetatype`.)
    func settled(_ result: PromiseCore.Result<Downstream.Input>) where Downstream.Failure == Error {
        settled(result.swiftResult)
    }

    /// The guarantee resolved with `result`: the handler a publisher pipes its guarantee to.
    func settled(_ result: PromiseCore.Result<Downstream.Input>) where Downstream.Failure == Never {
        if case .fulfilled(let value) = result { settled(.success(value)) }
    }

    private func perform(_ action: PromiseSubscriptionState<Downstream>.Action) {
        switch action {
        case .none:
            break
        case .send(let downstream, let value):
            _ = downstream.receive(value)
            downstream.receive(completion: .finished)
        case .fail(let downstream, let error):
            downstream.receive(completion: .failure(error))
        case .withdraw(let interest, _):
            interest?.cancel()
        }
    }
}

extension PromiseCore.Result {
    /// The same result as a Swift `Result` whose failure is any error.
    var swiftResult: Swift.Result<T, Error> {
        switch self {
        case .fulfilled(let value): return .success(value)
        case .rejected(let error): return .failure(error)
        }
    }
}

#endif
