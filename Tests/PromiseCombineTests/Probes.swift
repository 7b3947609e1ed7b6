// Test subscribers and publishers that record what they see.
import Foundation
import PromiseCombine

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)

/// A subscriber that asks for `initialDemand` when subscribed and records every event.
final class ProbeSubscriber<Input, Failure: Error>: Subscriber, @unchecked Sendable {
    // @unchecked: every stored property is guarded by `lock`.
    private let lock = NSLock()
    private let initialDemand: Subscribers.Demand
    private let cancelsOnSubscribe: Bool
    private var subscriptionStore: (any Subscription)?
    private var valuesStore: [Input] = []
    private var completionStore: Subscribers.Completion<Failure>?

    /// With `cancelsOnSubscribe`, it cancels its subscription inside `receive(subscription:)`.
    init(demand: Subscribers.Demand = .unlimited, cancelsOnSubscribe: Bool = false) {
        initialDemand = demand
        self.cancelsOnSubscribe = cancelsOnSubscribe
    }

    var values: [Input] { lock.withLock { valuesStore } }
    var completion: Subscribers.Completion<Failure>? { lock.withLock { completionStore } }
    var isFinished: Bool {
        if case .finished = completion { return true }
        return false
    }
    var failure: Failure? {
        if case .failure(let error) = completion { return error }
        return nil
    }

    func receive(subscription: any Subscription) {
        if cancelsOnSubscribe { return subscription.cancel() }
        lock.withLock { subscriptionStore = subscription }
        if initialDemand > .none { subscription.request(initialDemand) }
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        lock.withLock { valuesStore.append(input) }
        return .none
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        lock.withLock {
            completionStore = completion
            subscriptionStore = nil
        }
    }

    func request(_ demand: Subscribers.Demand) {
        lock.withLock { subscriptionStore }?.request(demand)
    }

    /// Cancels the subscription and lets it go.
    func cancel() {
        let subscription = lock.withLock {
            defer { subscriptionStore = nil }
            return subscriptionStore
        }
        subscription?.cancel()
    }
}

/// A publisher whose subscriptions are recorded (weakly) and report requests and cancels.
final class ProbePublisher<Output>: Publisher, @unchecked Sendable {
    // @unchecked: every stored property is guarded by `lock`.
    typealias Failure = Error

    final class Probe: Subscription, @unchecked Sendable {
        // @unchecked: every stored property is guarded by `lock`.
        private let lock = NSLock()
        private var sendValue: ((Output) -> Subscribers.Demand)?
        private var sendCompletion: ((Subscribers.Completion<Error>) -> Void)?
        private var demandStore = Subscribers.Demand.none
        private var cancelledStore = false

        init<S: Subscriber>(_ subscriber: S) where S.Input == Output, S.Failure == Error {
            sendValue = { subscriber.receive($0) }
            sendCompletion = { subscriber.receive(completion: $0) }
        }

        var demand: Subscribers.Demand { lock.withLock { demandStore } }
        var isCancelled: Bool { lock.withLock { cancelledStore } }

        func request(_ demand: Subscribers.Demand) { lock.withLock { demandStore += demand } }

        func cancel() {
            lock.withLock {
                cancelledStore = true
                sendValue = nil
                sendCompletion = nil
            }
        }

        func send(_ value: Output) {
            guard let send = lock.withLock({ sendValue }) else { return }
            _ = send(value)
        }

        func send(completion: Subscribers.Completion<Error>) {
            let send = lock.withLock {
                defer {
                    sendValue = nil
                    sendCompletion = nil
                }
                return sendCompletion
            }
            send?(completion)
        }
    }

    private let lock = NSLock()
    private var probes: [Probe] = []

    /// The subscriptions made so far (held until `forget()`).
    var subscriptions: [Probe] { lock.withLock { probes } }

    /// Lets the publisher's own references to its subscriptions go.
    func forget() { lock.withLock { probes = [] } }

    func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Error {
        let probe = Probe(subscriber)
        lock.withLock { probes.append(probe) }
        subscriber.receive(subscription: probe)
    }
}

struct TestError: Error, Equatable {
    var code = 1
}

#endif
