// Aggregates: a promise that settles from several inputs (`when`, `race`). The aggregate is
// itself the promise it returns and the handler of every input: no object per input. An input's
// handler call says which promise settled; an aggregate that needs the input's position finds
// it in an `InputIndex`. The aggregates themselves live with their functions: `WhenFulfilled`
// and `WhenResolved` in when.swift, `Race` in race.swift.

/// A promise fed by several inputs, each handled by the aggregate itself.
@usableFromInline protocol AggregateSink: PromiseHandler, Sendable {
    /// Whether the aggregate needs its inputs' positions (`register`); `race` does not.
    static var needsPositions: Bool { get }

    /// Records that `input` is the input at `index`. Called for every input, in order, before
    /// the aggregate is added to any of them: no handler call can run meanwhile, so this needs
    /// no lock.
    func register(_ input: AnyObject, at index: Int)
}

/// Adds `sink` as the handler of every input (after registering them all); inputs already
/// settled are delivered at once.
@inlinable
func connect<U: Thenable>(_ sink: any AggregateSink, to inputs: [U]) {
    if U.self == Promise<U.T>.self {
        // The same type: the cast changes nothing but the static type.
        connect(sink, toPromises: unsafeBitCast(inputs, to: [Promise<U.T>].self))
        return
    }
    // Other thenables: `asPromise()` once per input (it may make a new promise each time),
    // read through the buffer (see the reason of `Array.mapThroughBuffer`, in
    // CancellablePromiseKit's Array+MapThroughBuffer.swift).
    let promises = inputs.withUnsafeBufferPointer { buffer in
        var promises: [Promise<U.T>] = []
        promises.reserveCapacity(buffer.count)
        for index in buffer.indices { promises.append(buffer[index].asPromise()) }
        return promises
    }
    connect(sink, toPromises: promises)
}

/// `connect` for promises. Each is used where the array holds it, borrowed
/// (`_withUnsafeGuaranteedRef`), with no retain and release per input: sound because the
/// caller's array keeps every element alive and nothing here changes it (and a `[Promise<T>]`
/// stores one reference per element, which a test checks).
@inlinable
func connect<T>(_ sink: any AggregateSink, toPromises inputs: [Promise<T>]) {
    inputs.withUnsafeBufferPointer { buffer in
        guard let base = buffer.baseAddress else { return }
        let references = UnsafeRawPointer(base)
        @inline(__always) func withInput(at index: Int, _ body: (Promise<T>) -> Void) {
            let reference = references.load(
                fromByteOffset: index * MemoryLayout<UnsafeRawPointer>.stride, as: UnsafeRawPointer.self)
            Unmanaged<Promise<T>>.fromOpaque(reference)._withUnsafeGuaranteedRef(body)
        }
        if type(of: sink).needsPositions {
            for index in buffer.indices {
                withInput(at: index) { sink.register($0, at: index) }
            }
        }
        for index in buffer.indices {
            withInput(at: index) { $0.addHandlerAndDrain(sink) }
        }
    }
}

/// The positions of the inputs of an aggregate, found from an input's promise: an
/// open-addressing table keyed by the promise's address, with linear probing and at least half
/// again as many slots as inputs. A promise given at several positions has one slot, heading a
/// list of its positions not yet taken; each handler call takes one (`take(_:)`), so every
/// position is filled once whatever the number of repeats, in constant time per call.
///
/// The table holds addresses, not references: an input is only looked up from its own handler
/// call, while that promise is alive. (An address can be reused while the aggregate is
/// pending only by an input promise freed before it settles, whose positions can then never be
/// filled anyway.) Not synchronized: the aggregate uses it under its lock, and deallocates it
/// (once) when it settles.
struct InputIndex {
    private struct Slot {
        /// The input's address; 0 for an empty slot.
        var key: UInt
        /// The first of the input's positions not taken yet, or -1.
        var first: Int
    }

    private let slots: UnsafeMutablePointer<Slot>
    /// For each position, the next position of the same promise not taken yet, or -1.
    private let next: UnsafeMutablePointer<Int>
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
        // One allocation: the slots, then `next` (both word-aligned).
        let slotBytes = size * MemoryLayout<Slot>.stride
        let buffer = UnsafeMutableRawPointer.allocate(
            byteCount: slotBytes + count * MemoryLayout<Int>.stride,
            alignment: max(MemoryLayout<Slot>.alignment, MemoryLayout<Int>.alignment))
        slots = buffer.bindMemory(to: Slot.self, capacity: size)
        slots.initialize(repeating: Slot(key: 0, first: -1), count: size)
        next = (buffer + slotBytes).bindMemory(to: Int.self, capacity: count)
    }

    func deallocate() {
        UnsafeMutableRawPointer(slots).deallocate()  // `next`'s storage too
    }

    /// An odd constant of well-mixed bits (its low half on 32-bit platforms).
    private static let multiplier = UInt(truncatingIfNeeded: 0xFF51_AFD7_ED55_8CCD as UInt64)

    @inline(__always) private static func key(_ input: AnyObject) -> UInt {
        UInt(bitPattern: ObjectIdentifier(input))
    }

    /// The slot of `key`, or the empty slot where it goes: mixes the key's bits (shift-xor,
    /// multiplication, shift-xor), takes the top bits and probes from there. Addresses of
    /// objects allocated together are evenly spaced, which a multiplication alone maps onto a
    /// few clusters for some spacings; the table is never full, so probing ends.
    @inline(__always) private func slot(for key: UInt) -> UnsafeMutablePointer<Slot> {
        let half = UInt(UInt.bitWidth / 2)
        var mixed = key ^ (key >> half)
        mixed = mixed &* InputIndex.multiplier
        mixed ^= mixed >> half
        var position = Int(truncatingIfNeeded: mixed >> shift)
        while slots[position].key != 0, slots[position].key != key { position = (position + 1) & mask }
        return slots + position
    }

    /// Records that `input` is the input at `index` (each index once).
    func insert(_ input: AnyObject, at index: Int) {
        let key = Self.key(input)
        let slot = slot(for: key)
        slot.pointee.key = key
        next[index] = slot.pointee.first
        slot.pointee.first = index
    }

    /// Takes one of `input`'s positions not taken yet; `nil` if there is none (never for an
    /// input's own handler call, one per position it was inserted at).
    @inline(__always)
    func take(_ input: AnyObject) -> Int? {
        let slot = slot(for: Self.key(input))
        let index = slot.pointee.first
        guard index >= 0 else { return nil }
        slot.pointee.first = next[index]
        return index
    }
}
