// The storages a chain's root absorbed by joins, as the root's state machine keeps them
// (`ChainState.absorbed`): each storage's member table and whether it counts as a handle,
// found by the storage's identity. A member of an absorbed storage keeps its slot (its promise
// knows its storage and slot); only the table it sits in moves into the machine that decides
// for it.

/// The absorbed storages of a chain, by storage identity, in the order they joined. Finding one
/// costs one hash lookup; dropping the ones that hold nothing keeps the order of the others.
struct AbsorbedTables {
    /// One absorbed storage.
    struct Entry {
        let storage: ObjectIdentifier
        var table: MemberTable
        /// Whether the storage counts as a handle of the storage that absorbed it (until its own
        /// last handle goes): an entry that holds is kept even with an empty table.
        var holds: Bool
    }

    private var entries: [Entry] = []
    private var positions = IdentityIndex()

    init() {}

    /// The number of absorbed storages kept.
    var count: Int { entries.count }

    /// Whether there is an entry for `storage`.
    func contains(_ storage: ObjectIdentifier) -> Bool { positions.position(of: storage) != nil }

    /// The listed members of every table.
    var listedCount: Int { entries.reduce(0) { $0 + $1.table.listedCount } }

    /// Runs `body` on the table of `storage`, making an empty one first if there is none.
    mutating func withTable<R>(_ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R) -> R {
        if let position = positions.position(of: storage) { return body(&entries[position].table) }
        positions.insert(storage, at: entries.count)
        entries.append(Entry(storage: storage, table: MemberTable(), holds: false))
        return body(&entries[entries.count - 1].table)
    }

    /// Runs `body` on the table of `storage`; `nil` if there is none.
    mutating func withExistingTable<R>(_ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R) -> R? {
        guard let position = positions.position(of: storage) else { return nil }
        return body(&entries[position].table)
    }

    /// Reads the table of `storage`; `nil` if there is none.
    func readTable<R>(_ storage: ObjectIdentifier, _ body: (MemberTable) -> R) -> R? {
        guard let position = positions.position(of: storage) else { return nil }
        return body(entries[position].table)
    }

    /// Whether `storage` has an entry that still holds a handle or lists members.
    func isLive(_ storage: ObjectIdentifier) -> Bool {
        guard let position = positions.position(of: storage) else { return false }
        return entries[position].holds || entries[position].table.inUse > 0
    }

    /// Ends the hold of `storage`: `true` if it held.
    mutating func releaseHold(of storage: ObjectIdentifier) -> Bool {
        guard let position = positions.position(of: storage), entries[position].holds else { return false }
        entries[position].holds = false
        return true
    }

    /// Adds `entry`, replacing an empty one its storage may have had (an entry left by a
    /// storage that is gone, whose identity a new storage took).
    mutating func insert(_ entry: consuming Entry) {
        let storage = entry.storage
        if let position = positions.position(of: storage) {
            precondition(
                entries[position].table.inUse == 0 && !entries[position].holds,
                "AbsorbedTables.insert: a storage is absorbed once")
            entries[position] = entry
            return
        }
        positions.insert(storage, at: entries.count)
        entries.append(entry)
    }

    /// Moves every entry of `other` here, in its order.
    mutating func absorb(_ other: inout AbsorbedTables) {
        var moved: [Entry] = []
        swap(&moved, &other.entries)
        other.positions = IdentityIndex()
        for entry in moved { insert(entry) }
    }

    /// Runs `body` on every table, in the order the storages joined.
    mutating func forEach(_ body: (_ storage: ObjectIdentifier, _ table: inout MemberTable) -> Void) {
        for position in entries.indices { body(entries[position].storage, &entries[position].table) }
    }

    /// Drops the entries with no slot in use and no hold; returns how many were dropped.
    @discardableResult
    mutating func dropIdleEntries() -> Int {
        guard entries.contains(where: { $0.table.inUse == 0 && !$0.holds }) else { return 0 }
        let before = entries.count
        entries.removeAll { $0.table.inUse == 0 && !$0.holds }
        positions = IdentityIndex()
        for (position, entry) in entries.enumerated() { positions.insert(entry.storage, at: position) }
        return before - entries.count
    }
}

extension ChainState {
    /// Whether `storage` belongs to this chain, whose root is `root`: the root itself, or an
    /// absorbed storage that still holds a handle or lists members. (An idle entry may outlive
    /// its storage, whose identity a new storage of another chain can then take.)
    func contains(_ storage: ObjectIdentifier, root: ObjectIdentifier) -> Bool {
        storage == root || group?.tables.isLive(storage) == true
    }

    /// The storages a root absorbed (directly or through the storages it absorbed).
    struct Group {
        /// Their tables (they list members of this chain too), and which of them count as a
        /// handle of the storage that absorbed them, until their own last handle goes (see
        /// `handlesGone`). An entry with no slot in use and no hold may be dropped
        /// (`pruneGroup`); its table is made again when its storage reserves a slot.
        var tables = AbsorbedTables()
        /// How many times an absorbed table was found empty (when its storage was absorbed, or
        /// after an event in it) since the last pass of `pruneGroup`: a pass runs only when many
        /// may be empty, and a root whose absorbed storages are all busy is never walked.
        var emptied = 0
    }
}

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
