// Aggregates: a promise that settles from several inputs (`when`, `race`). The aggregate is
// itself the promise it returns and conforms to `AggregateSink`; each input gets an
// `AggregateInput` handler that delivers its result with its index. The aggregates themselves
// live with their functions: `WhenFulfilled` and `WhenResolved` in when.swift, `Race` in
// race.swift.

/// A promise fed by several inputs, each delivered with its index.
protocol AggregateSink: AnyObject, Sendable {
    /// Records the input at `index`, `source` (a settled `Promise` of the aggregate's input
    /// type, read with `settledError`/`settledValue`); returns what settling the aggregate
    /// released.
    func receive(from source: AnyObject, at index: Int) -> ReleasedHandlers
}

/// Delivers one input to an aggregate with the input's index. Not generic, so creating one
/// needs no metadata lookup.
final class AggregateInput: PromiseHandler, Sendable {
    private let aggregate: any AggregateSink
    private let index: Int

    init(_ aggregate: any AggregateSink, index: Int) {
        self.aggregate = aggregate
        self.index = index
    }

    func handle(settled source: AnyObject) -> ReleasedHandlers {
        aggregate.receive(from: source, at: index)
    }
}

/// Adds an input handler to every input; inputs already settled are delivered at once.
func connect<U: Thenable>(_ sink: any AggregateSink, to inputs: [U]) {
    // Through the buffer: each input is used in place, not copied out of the array (a retain
    // and a release per input in this generic, unspecialized code).
    inputs.withUnsafeBufferPointer { buffer in
        for index in buffer.indices {
            buffer[index].asPromise().addHandlerAndDrain(AggregateInput(sink, index: index))
        }
    }
}
