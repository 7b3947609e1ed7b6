/// Positions by object identity: an open-addressing table with linear probing, hashed by
/// multiplying the address bits (objects are distinct addresses, so no general-purpose hash is
/// needed; a `Dictionary` hashes each key with SipHash, several times per join). One array of
/// buckets, each an address and its position (a key of 0 marks an empty bucket). Entries are
/// only added; a caller that drops some builds a new index.
struct IdentityIndex {
    private struct Bucket {
        var key: UInt = 0
        var position = 0
    }

    private var buckets: [Bucket] = []
    private var count = 0

    init() {}

    @inline(__always)
    private static func bucket(_ key: UInt, mask: Int) -> Int {
        // Fibonacci hashing: the high bits of the product spread addresses that differ only in
        // their low bits (heap alignment) across the table.
        Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> 32) & mask
    }

    /// The position recorded for `object`, if any.
    func position(of object: ObjectIdentifier) -> Int? {
        guard !buckets.isEmpty else { return nil }
        let key = UInt(bitPattern: object)
        let mask = buckets.count - 1
        var bucket = IdentityIndex.bucket(key, mask: mask)
        while true {
            let found = buckets[bucket].key
            if found == key { return buckets[bucket].position }
            if found == 0 { return nil }
            bucket = (bucket + 1) & mask
        }
    }

    /// Records `position` for `object` (not recorded yet).
    mutating func insert(_ object: ObjectIdentifier, at position: Int) {
        insert(key: UInt(bitPattern: object), at: position)
    }

    private mutating func insert(key: UInt, at position: Int) {
        if 2 * (count + 1) > buckets.count { grow() }
        let mask = buckets.count - 1
        var bucket = IdentityIndex.bucket(key, mask: mask)
        while buckets[bucket].key != 0 {
            if buckets[bucket].key == key {
                buckets[bucket].position = position
                return
            }
            bucket = (bucket + 1) & mask
        }
        buckets[bucket] = Bucket(key: key, position: position)
        count += 1
    }

    /// Doubles the table (at least 16 buckets) and places every entry again.
    private mutating func grow() {
        let old = buckets
        buckets = Array(repeating: Bucket(), count: max(16, 2 * buckets.count))
        count = 0
        for entry in old where entry.key != 0 {
            insert(key: entry.key, at: entry.position)
        }
    }
}
