import Dispatch
import PromiseCore

// Chain operators of `CancellablePromise`. Each returns a `CancellablePromise` in the same
// `CancelContext`, built on the matching `Promise` operator of the wrapped promise; the new
// promise is a member of the context, so cancelling the chain rejects it, and a step body that
// has not started by then never runs. Queues: as the `Promise` operators (each has a main-actor
// overload, taken when no `on:` is given, and a `@Sendable` one for `on:` a queue or `nil`).

extension CancellablePromise {
    /// Wraps a step of this chain (one made without the storage as its attachment).
    @inlinable
    func chained<U>(_ step: Promise<U>) -> CancellablePromise<U> {
        CancellablePromise<U>(member: step, storage: _chainStorage, newChain: false, upstream: _key, cancel: nil)
    }

    /// Wraps a step whose body must not run once the chain is cancelled and needs its member
    /// (`then`, `recover` of a thenable, `thenMap`: to link what the body returns), or an
    /// observer's (see `observer(_:)`). The member is reserved first (one locked section), so
    /// that `make` receives it: `make` builds the core step, not yet connected to this promise,
    /// with the chain's storage as its attachment and its member's slot as its key from the
    /// start: the step asks the storage before its body starts, so no body starts once the
    /// chain is cancelled — also a step made while `cancel()` runs, or queued before it. The
    /// step is then listed (a second locked section; nothing can settle it meanwhile), and
    /// connected: its body may run from then on.
    @inlinable
    func step<U>(
        isObserver: Bool = false, _ make: (_ChainMember) -> _UnconnectedStep<U>
    ) -> CancellablePromise<U> {
        let storage = _chainStorage
        let key = storage._reserveStep(upstream: _key, isObserver: isObserver)
        let step = make(_ChainMember(storage: storage, key: key))
        storage._listStep(key, target: step.promise)
        let wrapper = CancellablePromise<U>(listedStep: step.promise, storage: storage, key: key)
        promise._connect(step)
        return wrapper
    }

    /// Wraps a step whose body must not run once the chain is cancelled and needs no member of
    /// its own (`map`, `compactMap`, `done`, `get`, `recover` with a body that returns nothing,
    /// and the sequence helpers that map): as `step(isObserver:_:)`, with one locked section
    /// instead of two. `make` builds the core step first, with the chain's storage as its
    /// attachment and `placeholderKey` as its key; then its slot is reserved, set as its key and
    /// listed under one lock (`_addStep`: no other thread can see the step before), and the
    /// step is connected.
    @inlinable
    func plainStep<U>(
        _ make: (_ storage: CancelStorage, _ placeholderKey: UInt32) -> _UnconnectedStep<U>
    ) -> CancellablePromise<U> {
        let storage = _chainStorage
        // The placeholder is never read: `_addStep` sets the real key before the step is connected.
        let step = make(storage, .max)
        let key = storage._addStep(step.promise, upstream: _key)
        let wrapper = CancellablePromise<U>(listedStep: step.promise, storage: storage, key: key)
        promise._connect(step)
        return wrapper
    }

    /// Wraps an observer step (`ensure`, `ensureThen`, `tap`): a cancellation does not reject
    /// it; it runs its body with the cancellation error and passes the cancellation on, so the
    /// steps after it settle in chain order. `make` receives the observer's member.
    @inlinable
    func observer(_ make: (_ChainMember) -> _UnconnectedStep<T>) -> CancellablePromise<T> {
        step(isObserver: true, make)
    }

    /// The step of `map` and `done`, for a body of any type: the public operators pass theirs
    /// (whose type says where it runs), the library its own bodies built around a caller's.
    @inlinable
    func _mapCancellable<U>(
        on: DispatchQueue?, flags: DispatchWorkItemFlags?, _ transform: @escaping (T) throws -> U
    ) -> CancellablePromise<U> {
        plainStep { storage, key in
            promise._makeMap(on: on, flags: flags, attachment: storage, key: key, transform)
        }
    }

    /// The step of `then`, as `_mapCancellable`: it links what the body returns.
    @inlinable
    func _thenCancellable<U: Thenable>(
        on: DispatchQueue?, flags: DispatchWorkItemFlags?, _ body: @escaping (T) throws -> U
    ) -> CancellablePromise<U.T> {
        step { member in
            promise._makeThen(on: on, flags: flags, attachment: member.storage, key: member.key.slot) { value -> U in
                let next = try body(value)
                member.link(next)
                return next
            }
        }
    }

    /// Runs `body` with the value, on `on`, and follows the thenable it returns. Cancelling the
    /// chain rejects the result at once.
    ///
    /// A returned `CancellablePromise`: while this chain waits on it, cancelling this chain
    /// cancels that promise's chain too; once it has settled, the two chains are independent
    /// again (a promise returned by several chains is cancelled only through a chain that waits
    /// on it at that moment). Another thenable: its work is cancelled too if its producer
    /// attached its task (as PromiseFoundation's do) and the chain still waits on it, otherwise
    /// it goes on. Its rejection, cancellation included, flows down this chain as a rejection.
    ///
    /// ```swift
    /// let chain = login().then { creds in fetch(avatar: creds.user) }   // both cancellable
    /// chain.cancel()   // cancels login or fetch, whichever is running
    /// ```
    // One `then` for every thenable a body returns (a `CancellablePromise` is told apart when
    // linked): with a second overload for `CancellablePromise` bodies, both fitted every such
    // step and the type checker's work doubled with each `then` of a chain (8 steps: ~70 s).
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func then<U: Thenable>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> U
    ) -> CancellablePromise<U.T> {
        then(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the value, on `on`, and follows the thenable it returns. Cancelling the
    /// chain rejects the result at once.
    ///
    /// A returned `CancellablePromise`: while this chain waits on it, cancelling this chain
    /// cancels that promise's chain too; once it has settled, the two chains are independent
    /// again (a promise returned by several chains is cancelled only through a chain that waits
    /// on it at that moment). Another thenable: its work is cancelled too if its producer
    /// attached its task (as PromiseFoundation's do) and the chain still waits on it, otherwise
    /// it goes on. Its rejection, cancellation included, flows down this chain as a rejection.
    ///
    /// ```swift
    /// let chain = login().then { creds in fetch(avatar: creds.user) }   // both cancellable
    /// chain.cancel()   // cancels login or fetch, whichever is running
    /// ```
    // One `then` for every thenable a body returns (a `CancellablePromise` is told apart when
    // linked): with a second overload for `CancellablePromise` bodies, both fitted every such
    // step and the type checker's work doubled with each `then` of a chain (8 steps: ~70 s).
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func then<U: Thenable>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> U
    ) -> CancellablePromise<U.T> {
        _thenCancellable(on: on, flags: flags, body)
    }

    /// Transforms the value on `on`; not run once the chain is cancelled.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    // `map` and `done` are inlinable: specialized in the caller's module, the closure reaches
    // the core step without a reabstraction thunk (an allocation per link).
    @preconcurrency
    @inlinable public func map<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T) throws -> U
    ) -> CancellablePromise<U> {
        map(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Transforms the value on `on`; not run once the chain is cancelled.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func map<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T) throws -> U
    ) -> CancellablePromise<U> {
        _mapCancellable(on: on, flags: flags, transform)
    }

    /// Like `map`; `nil` rejects with `PMKError.compactMap`.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func compactMap<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @MainActor @Sendable (T) throws -> U?
    ) -> CancellablePromise<U> {
        compactMap(on: on.queue, flags: flags, _mainActorBody(transform))
    }

    /// Like `map`; `nil` rejects with `PMKError.compactMap`.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func compactMap<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ transform: @escaping @Sendable (T) throws -> U?
    ) -> CancellablePromise<U> {
        plainStep { storage, key in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .fulfilled, attachment: storage, key: key
            ) { result in
                switch result {
                case .rejected(let error): return .result(.rejected(error))
                case .fulfilled(let value):
                    guard let mapped = try transform(value) else { throw PMKError.compactMap(value, U.self) }
                    return .result(.fulfilled(mapped))
                }
            }
        }
    }

    /// Runs `body` with the value on `on`; not run once cancelled.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func done(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> Void
    ) -> CancellablePromise<Void> {
        done(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the value on `on`; not run once cancelled.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func done(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> Void
    ) -> CancellablePromise<Void> {
        _mapCancellable(on: on, flags: flags, body)
    }

    /// Runs `body` with the value on `on` and passes it on; not run once cancelled.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func get(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> Void
    ) -> CancellablePromise<T> {
        get(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the value on `on` and passes it on; not run once cancelled.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func get(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> Void
    ) -> CancellablePromise<T> {
        plainStep { storage, key in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .fulfilled, attachment: storage, key: key
            ) { result in
                if case .fulfilled(let value) = result { try body(value) }
                return .result(result)
            }
        }
    }

    /// Runs `body` with the result on `on`, whatever it is, cancellation included. If the chain
    /// is cancelled before `body` has run, `body` receives the cancellation and the steps after
    /// it settle only once it has run.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func tap(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (Result<T>) -> Void
    ) -> CancellablePromise<T> {
        tap(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Runs `body` with the result on `on`, whatever it is, cancellation included. If the chain
    /// is cancelled before `body` has run, `body` receives the cancellation and the steps after
    /// it settle only once it has run.
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func tap(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (Result<T>) -> Void
    ) -> CancellablePromise<T> {
        observer { member in
            promise._makeGeneralStep(
                on: on, flags: flags, hop: .always, isObserver: true, attachment: member.storage, key: member.key.slot
            ) { result in
                body(result)
                return .result(member.passOn(result))
            }
        }
    }

    /// Discards the value.
    @inlinable public func asVoid() -> CancellablePromise<Void> {
        chained(promise.asVoid())
    }
}

// `then` with a body returning a `CancellablePromise`, on the plain thenables: on `Promise` and
// `Guarantee`, not on every `Thenable`, so that a `CancellablePromise`'s own `then` is the only
// one that fits each step of a cancellable chain (see `CancellablePromise.then`).

extension Promise {
    /// Continues a plain chain with a cancellable step (PromiseKit 7's "convert a standard chain
    /// to a cancellable chain"): the result is a `CancellablePromise`, so the chain is
    /// cancellable from here on. `body` runs on `on` with the value and its promise's chain joins
    /// the result's. Cancelling rejects the result at once and cancels the promise `body`
    /// returned; if `body` has not started it never runs, and this thenable's own work goes on.
    ///
    /// ```swift
    /// let finalizer = firstly { login() }.then { creds in
    ///     fetch(avatar: creds.user).cancellize()
    /// }.done { image in … }.catch(policy: .allErrors) { … }
    /// finalizer.cancel()
    /// ```
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func then<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> CancellablePromise<U>
    ) -> CancellablePromise<U> {
        then(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Continues a plain chain with a cancellable step (PromiseKit 7's "convert a standard chain
    /// to a cancellable chain"): the result is a `CancellablePromise`, so the chain is
    /// cancellable from here on. `body` runs on `on` with the value and its promise's chain joins
    /// the result's. Cancelling rejects the result at once and cancels the promise `body`
    /// returned; if `body` has not started it never runs, and this thenable's own work goes on.
    ///
    /// ```swift
    /// let finalizer = firstly { login() }.then { creds in
    ///     fetch(avatar: creds.user).cancellize()
    /// }.done { image in … }.catch(policy: .allErrors) { … }
    /// finalizer.cancel()
    /// ```
    ///
    /// The body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func then<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> CancellablePromise<U>
    ) -> CancellablePromise<U> {
        // Not `cancellize()`: cancelling the cancellable part leaves this thenable's task alone.
        CancellablePromise<T>(newChain: asPromise()._mirror(), cancel: nil)
            .then(on: on, flags: flags, body)
    }
}

extension Guarantee {
    /// Continues a plain chain with a cancellable step, as `Promise.then(on:flags:_:)` with a
    /// body returning a `CancellablePromise` does: the result is cancellable from here on;
    /// cancelling rejects it at once and cancels the promise `body` returned, and if `body` has
    /// not started it never runs, while this guarantee's own work goes on.
    ///
    /// Without `on:`, or with `on: .main`, the body is a main-actor body: it runs on the main
    /// queue and may touch main-actor state. Give a queue, or `nil`, for a `@Sendable` body run there.
    @preconcurrency
    @inlinable public func then<U>(
        on: MainActorQueue = .main,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @MainActor @Sendable (T) throws -> CancellablePromise<U>
    ) -> CancellablePromise<U> {
        then(on: on.queue, flags: flags, _mainActorBody(body))
    }

    /// Continues a plain chain with a cancellable step (see the main-actor overload above). The
    /// body is `@Sendable`: it runs on `on`, or synchronously on the settling thread for
    /// `on: nil`.
    @preconcurrency @_disfavoredOverload
    @inlinable public func then<U>(
        on: DispatchQueue?,
        flags: DispatchWorkItemFlags? = nil,
        _ body: @escaping @Sendable (T) throws -> CancellablePromise<U>
    ) -> CancellablePromise<U> {
        asPromise().then(on: on, flags: flags, body)
    }
}
