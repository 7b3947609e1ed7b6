import Dispatch

// Spellings PromiseKit 6 deprecated and still shipped (its CocoaPods and Carthage builds), so
// that older code compiles here with a warning and a fix-it to today's spelling. Each forwards
// to the operation its attribute names: queues and cancellation are that operation's. The
// "PromiseKit compatibility" article lists them.

// MARK: - wrap

/// PromiseKit's older adapter (deprecated in PromiseKit 6) for a completion handler that passes an optional value and an
/// optional error: `wrap { fetch(completion: $0) }`. Today's spelling is
/// `Promise { seal in fetch(completion: seal.resolve) }`.
///
/// `body` runs at once, on the calling thread, with a completion function that may be called
/// from any thread: an error rejects, else the value fulfils, and both `nil` rejects with
/// `PMKError.invalidCallingConvention`. A throw from `body` rejects. Only the first call counts.
/// Nothing is attached to the promise, so cancelling a chain made from it does not reach the
/// work.
@available(*, deprecated, message: "use Promise { seal in … } (init(resolver:)) and pass seal.resolve")
public func wrap<T>(_ body: (@escaping @Sendable (T?, Error?) -> Void) throws -> Void) -> Promise<T> {
    Promise { seal in try body { seal.resolve($0, $1) } }
}

/// `wrap` for a completion handler that passes a value (always) and an optional error: an error
/// rejects, else the value fulfils. Today's spelling is `Promise { seal in … seal.resolve … }`;
/// queues and cancellation as the first `wrap(_:)`.
@available(*, deprecated, message: "use Promise { seal in … } (init(resolver:)) and pass seal.resolve")
public func wrap<T>(_ body: (@escaping @Sendable (T, Error?) -> Void) throws -> Void) -> Promise<T> {
    Promise { seal in try body { seal.resolve($0, $1) } }
}

/// `wrap` for a completion handler that passes the optional error first: an error rejects, else
/// the value fulfils, and both `nil` rejects with `PMKError.invalidCallingConvention`. Today's
/// spelling is `Promise { seal in … seal.resolve … }`; queues and cancellation as the first
/// `wrap(_:)`.
@available(*, deprecated, message: "use Promise { seal in … } (init(resolver:)) and pass seal.resolve")
public func wrap<T>(_ body: (@escaping @Sendable (Error?, T?) -> Void) throws -> Void) -> Promise<T> {
    Promise { seal in try body { seal.resolve($0, $1) } }
}

/// `wrap` for a completion handler that passes only an optional error: an error rejects, `nil`
/// fulfils. Today's spelling is `Promise { seal in … seal.resolve … }`; queues and cancellation
/// as the first `wrap(_:)`.
@available(*, deprecated, message: "use Promise { seal in … } (init(resolver:)) and pass seal.resolve")
public func wrap(_ body: (@escaping @Sendable (Error?) -> Void) throws -> Void) -> Promise<Void> {
    Promise { seal in try body { seal.resolve($0) } }
}

/// `wrap` for a completion handler that passes a value and cannot fail: the value fulfils (a
/// throw from `body` still rejects). Today's spelling is
/// `Promise { seal in … seal.fulfill … }`, or `Guarantee { resolve in … }` when `body` cannot
/// throw; queues and cancellation as the first `wrap(_:)`.
@available(*, deprecated, message: "use Promise { seal in … } (init(resolver:)) and pass seal.fulfill")
public func wrap<T>(_ body: (@escaping @Sendable (T) -> Void) throws -> Void) -> Promise<T> {
    Promise { seal in try body { seal.fulfill($0) } }
}

// MARK: - always

extension Promise {
    /// The older name (deprecated in PromiseKit 6) for `ensure`: runs `body` once this promise
    /// settles, whatever the result, and passes the result on. It runs for a cancellation too.
    /// Without `on:` (or with `on: .main`), `body` is a main-actor body, run on the main queue.
    @available(*, deprecated, renamed: "ensure(on:_:)")
    @preconcurrency
    public func always(
        on: MainActorQueue = .main, execute body: @escaping @MainActor @Sendable () -> Void
    ) -> Promise<T> {
        ensure(on: on, body)
    }

    /// The older name (deprecated in PromiseKit 6) for `ensure`, with a `@Sendable` body run on
    /// `on` (synchronously on the settling thread for `nil`).
    @available(*, deprecated, renamed: "ensure(on:_:)")
    @preconcurrency @_disfavoredOverload
    public func always(on: DispatchQueue?, execute body: @escaping @Sendable () -> Void) -> Promise<T> {
        ensure(on: on, body)
    }
}

// MARK: - Sequences

extension Thenable where T: Sequence {
    /// The older name (deprecated in PromiseKit 6) for `filterValues`: keeps the elements for
    /// which `test` returns `true`. Rejections pass through. Without `on:` (or with `on: .main`),
    /// `test` is a main-actor body, run on the main queue.
    @available(*, deprecated, renamed: "filterValues(on:_:)")
    @preconcurrency
    public func filter(
        on: MainActorQueue = .main, test: @escaping @MainActor @Sendable (T.Iterator.Element) -> Bool
    ) -> Promise<[T.Iterator.Element]> {
        filterValues(on: on, test)
    }

    /// The older name (deprecated in PromiseKit 6) for `filterValues`, with a `@Sendable` `test`
    /// run on `on` (synchronously on the settling thread for `nil`).
    @available(*, deprecated, renamed: "filterValues(on:_:)")
    @preconcurrency @_disfavoredOverload
    public func filter(
        on: DispatchQueue?, test: @escaping @Sendable (T.Iterator.Element) -> Bool
    ) -> Promise<[T.Iterator.Element]> {
        filterValues(on: on, test)
    }
}

extension Thenable where T: Collection {
    /// The older name (deprecated in PromiseKit 6) for ``firstValue``: the first element, taken synchronously on the
    /// thread that settles this thenable; rejects with `PMKError.emptySequence` if there is none.
    @available(*, deprecated, renamed: "firstValue")
    public var first: Promise<T.Iterator.Element> { firstValue }

    /// The older name (deprecated in PromiseKit 6) for ``lastValue``: the last element, taken synchronously on the
    /// thread that settles this thenable; rejects with `PMKError.emptySequence` if there is none.
    @available(*, deprecated, renamed: "lastValue")
    public var last: Promise<T.Iterator.Element> { lastValue }
}

extension Thenable where T: Sequence, T.Iterator.Element: Comparable {
    /// The older name (deprecated in PromiseKit 6) for ``sortedValues(on:flags:)``: the elements in ascending order,
    /// sorted on `on`. Rejections pass through.
    @available(*, deprecated, renamed: "sortedValues(on:)")
    public func sorted(on: DispatchQueue? = conf.Q.map) -> Promise<[T.Iterator.Element]> {
        sortedValues(on: on)
    }
}
