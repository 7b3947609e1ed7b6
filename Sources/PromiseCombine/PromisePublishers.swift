// Promises as publishers: each publisher emits its promise's value and finishes, or fails with
// its error. The promise is already running, so subscribing starts nothing; a subscriber that
// comes after the promise settled gets the result.
#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
import CancellablePromiseKit

/// A publisher of a `Promise`'s result: its value, then `.finished`; or its error.
///
/// Make one with `promise.publisher()`. Each subscriber gets the result once it has asked for
/// a value: synchronously on the thread that settles the promise, or on the thread that calls
/// `request(_:)` if the promise had settled before (a failure is sent without waiting for
/// demand). Use `receive(on:)` to move delivery to a queue or a run loop.
///
/// Cancelling a subscription stops its delivery and releases its subscriber; the promise is
/// not affected (a plain promise cannot be cancelled). Subscriptions are independent of each
/// other and of the promise's other handlers.
public struct PromisePublisher<Output>: Publisher {
    /// Any error the promise rejects with, cancellation errors included.
    public typealias Failure = Error

    /// The promise whose result this publisher emits.
    public let promise: Promise<Output>

    /// A publisher of `promise`'s result; the same as `promise.publisher()`.
    public init(_ promise: Promise<Output>) {
        self.promise = promise
    }

    /// Attaches `subscriber`: it receives its subscription at once, on this thread, then the
    /// promise's result when it has demand.
    public func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Failure {
        let subscription = PromiseSubscription(subscriber, interest: nil)
        subscriber.receive(subscription: subscription)
        promise.pipe(to: subscription.settled)
    }
}

/// A publisher of a `Guarantee`'s value: the value, then `.finished`. It never fails.
///
/// Make one with `guarantee.publisher()`. Each subscriber gets the value once it has asked for
/// one: synchronously on the thread that resolves the guarantee, or on the thread that calls
/// `request(_:)` if the guarantee had resolved before. Use `receive(on:)` to move delivery to a
/// queue or a run loop. Cancelling a subscription stops its delivery and releases its
/// subscriber; the guarantee is not affected.
public struct GuaranteePublisher<Output>: Publisher {
    /// A guarantee cannot fail.
    public typealias Failure = Never

    /// The guarantee whose value this publisher emits.
    public let guarantee: Guarantee<Output>

    /// A publisher of `guarantee`'s value; the same as `guarantee.publisher()`.
    public init(_ guarantee: Guarantee<Output>) {
        self.guarantee = guarantee
    }

    /// Attaches `subscriber`: it receives its subscription at once, on this thread, then the
    /// guarantee's value when it has demand.
    public func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Failure {
        let subscription = PromiseSubscription(subscriber, interest: nil)
        subscriber.receive(subscription: subscription)
        guarantee.pipe(to: subscription.settled)
    }
}

/// A publisher of a `CancellablePromise`'s result whose subscriptions share its work: the
/// promise is cancelled when every subscription made to this publisher has been cancelled.
///
/// Make one with `cancellablePromise.publisher()`, or `shared.publisher()` to count the
/// subscriptions together with a `SharedCancellablePromise`'s other followers. Each
/// subscription is an interest in the work, as a follower of shared work is:
/// - cancelling a subscription (its `AnyCancellable` cancelled or released) withdraws its
///   interest and releases its subscriber, which receives nothing more;
/// - once every subscription made so far has been cancelled, the promise's chain is cancelled,
///   as `cancel()` would, synchronously on the thread whose cancel withdrew the last interest;
/// - a subscription still waiting, or one that received the result, keeps the work: the
///   promise is never cancelled while a subscriber waits for it, and the publisher itself is
///   not an interest (a publisher nobody subscribed to cancels nothing).
///
/// A subscription made after the promise settled gets its result; one made after the work was
/// cancelled (by its subscriptions or by anyone cancelling the promise) fails with
/// `CancellablePromiseError.cancelled`. Copies of the publisher share the count; two calls of
/// `publisher()` make two publishers, each cancelling the promise once its own subscriptions all
/// were cancelled.
///
/// Each subscriber gets the result once it has asked for a value: synchronously on the thread
/// that settles the promise, or on the thread that calls `request(_:)` if it had settled before
/// (a failure is sent without waiting for demand). Use `receive(on:)` to move delivery.
public struct CancellablePromisePublisher<Output>: Publisher {
    /// The promise's error: its own, or `CancellablePromiseError.cancelled` once it was cancelled.
    public typealias Failure = Error

    /// The shared work the subscriptions follow.
    public let shared: SharedCancellablePromise<Output>

    /// A publisher whose subscriptions are followers of `shared` (see
    /// `SharedCancellablePromise.follower()`); the same as `shared.publisher()`.
    public init(_ shared: SharedCancellablePromise<Output>) {
        self.shared = shared
    }

    /// A publisher of `promise`'s result; the same as `promise.publisher()`. The publisher takes
    /// over cancelling `promise` once its subscriptions were all cancelled.
    public init(_ promise: CancellablePromise<Output>) {
        self.init(promise.shared())
    }

    /// Attaches `subscriber`: it joins the work as a follower, receives its subscription at
    /// once, on this thread, then the result when it has demand.
    public func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Failure {
        // The follower joins before the subscriber sees its subscription, so a subscriber that
        // cancels at once has withdrawn an interest it held.
        let follower = shared.follower()
        let subscription = PromiseSubscription(subscriber, interest: follower)
        subscriber.receive(subscription: subscription)
        follower.pipe(to: subscription.settled)
    }
}

extension Promise {
    /// A Combine publisher of this promise's result: its value then `.finished`, or its error.
    ///
    /// Subscribing starts nothing (the promise is already running) and a late subscriber gets
    /// the result; values are delivered synchronously on the settling thread (see
    /// ``PromisePublisher``). Cancelling a subscription stops only its delivery.
    ///
    /// ```swift
    /// fetchUser().publisher()
    ///     .receive(on: DispatchQueue.main)
    ///     .sink(receiveCompletion: { _ in }, receiveValue: { self.user = $0 })
    ///     .store(in: &subscriptions)
    /// ```
    public func publisher() -> PromisePublisher<T> {
        PromisePublisher(self)
    }
}

extension Guarantee {
    /// A Combine publisher of this guarantee's value, then `.finished`; it never fails.
    ///
    /// Subscribing starts nothing and a late subscriber gets the value; it is delivered
    /// synchronously on the resolving thread (see ``GuaranteePublisher``).
    public func publisher() -> GuaranteePublisher<T> {
        GuaranteePublisher(self)
    }
}

extension CancellablePromise {
    /// A Combine publisher of this promise's result whose subscriptions share the work: the
    /// chain is cancelled once every subscription made to the publisher has been cancelled.
    ///
    /// Subscribing starts nothing and a late subscriber gets the result; values are delivered
    /// synchronously on the settling thread. A subscription that is waiting or was served keeps
    /// the work going (see ``CancellablePromisePublisher``). Make the publisher once and
    /// subscribe to it as often as needed: each call makes a publisher with a count of its own.
    ///
    /// `future()` (CancellablePromiseKit, PromiseKit 8's name) is the other bridge: a Combine
    /// `Future` of the same result, delivered on `conf.Q.return`, which holds no interest in the
    /// work, so cancelling or dropping it cancels nothing. Use the publisher when the
    /// subscriptions should own the work, the future where PromiseKit code expects one.
    ///
    /// ```swift
    /// let image = download(url).publisher()
    /// image.sink(…).store(in: &header)     // header closes: the download goes on
    /// image.sink(…).store(in: &detail)     // detail closes too: the download is cancelled
    /// ```
    public func publisher() -> CancellablePromisePublisher<T> {
        CancellablePromisePublisher(self)
    }
}

extension SharedCancellablePromise {
    /// A Combine publisher whose every subscription is a follower of this shared work: the
    /// source is cancelled once every follower, subscriptions included, has been cancelled.
    /// See ``CancellablePromisePublisher``. (`shared.future()`, by contrast, waits as a follower
    /// that can never be withdrawn.)
    public func publisher() -> CancellablePromisePublisher<T> {
        CancellablePromisePublisher(self)
    }
}

#endif
