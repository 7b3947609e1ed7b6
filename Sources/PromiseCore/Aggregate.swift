// Aggregates: a promise that settles from several inputs (`when`, `race`). The aggregate is
// itself the promise it returns and the handler of every input: no object per input. An input's
// handler call says which promise settled; an aggregate that needs the input's position finds
// it in an `InputIndex`. The aggregates themselves live with their functions: `WhenFulfilled`
// and `WhenResolved` in when.swift, `Race` in race.swift.

/// A promise fed by several inputs, each handled by the aggregate itself.
protocol AggregateSink: PromiseHandler, Sendable {
    /// Records that `input` (the promise the aggregate is added to as a handler next) is the
    /// input at `index`, before the aggregate is added to it; called once per input, in order.
    func register(_ input: AnyObject, at index: Int)
}

/// Adds `sink` as the handler of every input; inputs already settled are delivered at once.
func connect<U: Thenable>(_ sink: any AggregateSink, to inputs: [U]) {
    // Through the buffer: each input is used in place, not copied out of the array (a retain
    // and a release per input in this generic, unspecialized code).
    inputs.withUnsafeBufferPointer { buffer in
        for index in buffer.indices {
            let input = buffer[index].asPromise()
            sink.register(input, at: index)
            input.addHandlerAndDrain(sink)
        }
    }
}

/// The position of each input of an aggregate, found from the input's promise: an
/// open-addressing table keyed by the promise's address, with linear probing and room for 1.5
/// to 3 times the inputs. An input given twice has an entry per position; `index(of:where:)`
/// returns the first one the caller accepts (the first not filled yet).
///
/// The table holds addresses, not references. An entry is only looked up from its input's own
/// handler call, while that promise is alive, so an address that is freed and reused by another
/// object is never looked up in its place. Not synchronized: the aggregate uses it under its
/// lock, and deallocates it (once) when it settles.
struct InputIndex {
    private struct Slot {
        /// The input's address; 0 for an empty slot.
        var key: UInt
        var index: Int
    }

    private let slots: UnsafeMutablePointer<Slot>
    private let mask: Int
    /// `UInt.bitWidth` minus the table size's power of two: the hash keeps the top bits.
    private let shift: UInt

    init(count: Int) {
        var size = 4
        var bits: UInt = 2
        while size < count + count / 2 + 1 {
            size <<= 1
            bits += 1
        }
        mask = size - 1
        shift = UInt(UInt.bitWidth) - bits
        slots = .allocate(capacity: size)
        slots.initialize(repeating: Slot(key: 0, index: 0), count: size)
    }

    func deallocate() {
        slots.deallocate()
    }

    /// An odd 64-bit constant of well-mixed bits (its low half on 32-bit platforms).
    private static let multiplier = UInt(truncatingIfNeeded: 0xFF51_AFD7_ED55_8CCD as UInt64)

    @inline(__always) private static func key(_ input: AnyObject) -> UInt {
        UInt(bitPattern: ObjectIdentifier(input))
    }

    /// Where probing for `key` starts: its bits mixed (a shift-xor, a multiplication, a
    /// shift-xor), then the top bits. Addresses of objects allocated together are evenly spaced,
    /// which a multiplication alone maps onto a few clusters for some spacings.
    @inline(__always) private func start(_ key: UInt) -> Int {
        var mixed = key ^ (key >> 33)
        mixed = mixed &* InputIndex.multiplier
        mixed ^= mixed >> 33
        return Int(truncatingIfNeeded: mixed >> shift)
    }

    func insert(_ input: AnyObject, at index: Int) {
        let key = Self.key(input)
        var position = start(key)
        while slots[position].key != 0 { position = (position + 1) & mask }
        slots[position] = Slot(key: key, index: index)
    }

    /// The first position of `input` that `accept` accepts, or `nil`.
    @inline(__always)
    func index(of input: AnyObject, where accept: (Int) -> Bool) -> Int? {
        let key = Self.key(input)
        var position = start(key)
        while true {
            let slot = slots[position]
            if slot.key == 0 { return nil }
            if slot.key == key, accept(slot.index) { return slot.index }
            position = (position + 1) & mask
        }
    }
}
