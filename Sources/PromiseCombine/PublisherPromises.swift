// Publishers as cancellable promises: the promise subscribes at once, settles with the first
// value (or with every value once the publisher finishes), and cancelling the promise cancels
// the subscription. The subscriber is a small state machine: events from the publisher and the
// promise's cancel are decided under its lock and return an action, run after unlocking.
#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
import CancellablePromiseKit

/// The error a promise made from a publisher rejects with when the publisher finishes without
/// sending a value.
///
/// `publisher.cancellablePromise()` waits for the first value; a publisher that completes with
/// `.finished` before sending one (`Empty()`, a `filter` that let nothing through) rejects the
/// promise with `finishedWithoutValue`. It is an ordinary error, not a cancellation: the
/// default `catch` sees it and `recover` can replace it.
public enum PublisherPromiseError: Error, Equatable, CustomStringConvertible {
    /// The publisher finished before it sent any value.
    case finishedWithoutValue

    /// A sentence saying what happened.
    public var description: String {
        switch self {
        case .finishedWithoutValue: return "The publisher finished without sending a value."
        }
    }
}

/// What the promise takes from the publisher.
enum PublisherPromiseMode {
    /// The first value; the subscription is cancelled once it arrives.
    case first
    /// Every value, until the publisher finishes.
    case all
}

/// The states of a subscriber that settles a promise.
enum PublisherPromiseState<Input, Value> {
    /// Subscribed, waiting for the publisher's subscription. `cancelled` when the promise was
    /// cancelled meanwhile: the subscription is cancelled as soon as it comes.
    case subscribing(Resolver<Value>, collected: [Input], cancelled: Bool)
    /// The subscription is running.
    case active(Resolver<Value>, any Subscription, collected: [Input])
    /// The promise settled or was cancelled: nothing is held any more.
    case finished

    /// What to do after releasing the lock.
    enum Action {
        case none
        /// Ask the publisher for values.
        case request(any Subscription, Subscribers.Demand)
        /// Cancel the subscription (the promise is settled or cancelled).
        case cancel(any Subscription)
        /// Cancel the subscription, then settle the promise.
        case settle(Resolver<Value>, PromiseCore.Result<Value>, cancelling: (any Subscription)?)
    }

    mutating func received(_ subscription: any Subscription, mode: PublisherPromiseMode) -> Action {
        guard case .subscribing(let resolver, let collected, false) = self else {
            // Cancelled before the subscription came, or a second subscription: refuse it.
            if case .subscribing(_, _, true) = self { self = .finished }
            return .cancel(subscription)
        }
        self = .active(resolver, subscription, collected: collected)
        return .request(subscription, mode == .first ? .max(1) : .unlimited)
    }

    mutating func received(_ input: Input, mode: PublisherPromiseMode, as value: ([Input]) -> Value) -> Action {
        guard case .active(let resolver, let subscription, var collected) = self else { return .none }
        collected.append(input)
        if mode == .all {
            self = .active(resolver, subscription, collected: collected)
            return .none
        }
        self = .finished
        return .settle(resolver, .fulfilled(value(collected)), cancelling: subscription)
    }

    mutating func completed<Failure>(
        _ completion: Subscribers.Completion<Failure>,
        mode: PublisherPromiseMode,
        as value: ([Input]) -> Value
    ) -> Action {
        guard case .active(let resolver, _, let collected) = self else { return .none }
        self = .finished
        switch completion {
        case .failure(let error):
            return .settle(resolver, .rejected(error), cancelling: nil)
        case .finished where mode == .all:
            return .settle(resolver, .fulfilled(value(collected)), cancelling: nil)
        case .finished:
            return .settle(resolver, .rejected(PublisherPromiseError.finishedWithoutValue), cancelling: nil)
        }
    }

    /// The promise was cancelled (its chain, a bag, a token, a lost race…).
    mutating func cancel() -> Action {
        switch self {
        case .subscribing(let resolver, let collected, _):
            self = .subscribing(resolver, collected: collected, cancelled: true)
            return .none
        case .active(_, let subscription, _):
            self = .finished
            return .cancel(subscription)
        case .finished:
            return .none
        }
    }
}

/// The subscriber behind `cancellablePromise()` and `cancellablePromiseOfAllValues()`.
final class PublisherPromiseSubscriber<Input, Failure: Error, Value>: Subscriber, Sendable {
    private let state: Locked<PublisherPromiseState<Input, Value>>
    private let mode: PublisherPromiseMode
    private let value: @Sendable ([Input]) -> Value

    init(_ resolver: Resolver<Value>, mode: PublisherPromiseMode, value: @escaping @Sendable ([Input]) -> Value) {
        state = Locked(.subscribing(resolver, collected: [], cancelled: false))
        self.mode = mode
        self.value = value
    }

    func receive(subscription: any Subscription) {
        perform(state.withLock { $0.received(subscription, mode: mode) })
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        perform(state.withLock { $0.received(input, mode: mode, as: value) })
        return .none
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        perform(state.withLock { $0.completed(completion, mode: mode, as: value) })
    }

    /// The promise's cancel closure: cancels the subscription.
    func cancel() {
        perform(state.withLock { $0.cancel() })
    }

    private func perform(_ action: PublisherPromiseState<Input, Value>.Action) {
        switch action {
        case .none:
            break
        case .request(let subscription, let demand):
            subscription.request(demand)
        case .cancel(let subscription):
            subscription.cancel()
        case .settle(let resolver, let result, let subscription):
            subscription?.cancel()
            resolver.resolve(result)
        }
    }
}

extension Publisher {
    /// A `CancellablePromise` of this publisher's first value.
    ///
    /// The promise subscribes at once, on this thread, and asks for one value. It is fulfilled
    /// with the first value, after the subscription is cancelled; rejected with the publisher's
    /// failure; or rejected with ``PublisherPromiseError/finishedWithoutValue`` if the publisher
    /// finishes without a value. It settles synchronously on the thread where the publisher
    /// sends; its handlers run where their `on:` says.
    ///
    /// Cancelling the promise — or its chain, a `CancelBag` or `CancellationToken` holding
    /// it, a `race(autoCancel:)` it lost — cancels the subscription at once, on the cancelling
    /// thread, and rejects the promise with `CancellablePromiseError.cancelled`. The
    /// subscription is released as soon as the promise settles.
    ///
    /// ```swift
    /// let query = searchField.textPublisher.debounce(for: .milliseconds(300), scheduler: RunLoop.main)
    /// race(query.cancellablePromise().map { _ in nil }, search(text).map { $0 }, autoCancel: true)
    /// ```
    public func cancellablePromise() -> CancellablePromise<Output> {
        makePromise(mode: .first) { $0[0] }
    }

    /// A `CancellablePromise` of every value this publisher sends until it finishes (`[]` if
    /// it sends none).
    ///
    /// The promise subscribes at once, on this thread, with unlimited demand. It is fulfilled
    /// when the publisher finishes, rejected with its failure, and settles synchronously on the
    /// thread where the publisher completes. Cancelling the promise (or its chain, bag, token,
    /// or a race it lost) cancels the subscription at once and drops the values collected; the
    /// subscription is released as soon as the promise settles.
    public func cancellablePromiseOfAllValues() -> CancellablePromise<[Output]> {
        makePromise(mode: .all) { $0 }
    }

    private func makePromise<Value>(
        mode: PublisherPromiseMode,
        value: @escaping @Sendable ([Output]) -> Value
    ) -> CancellablePromise<Value> {
        CancellablePromise<Value> { resolver in
            let subscriber = PublisherPromiseSubscriber<Output, Failure, Value>(resolver, mode: mode, value: value)
            subscribe(subscriber)
            return { subscriber.cancel() }
        }
    }
}

#endif
