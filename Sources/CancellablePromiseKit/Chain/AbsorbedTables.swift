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
    mutating func withTable<R: ~Copyable>(_ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R) -> R {
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
    /// Reads every table.
    func forEachTable(_ body: (MemberTable) -> Void) {
        for entry in entries { body(entry.table) }
    }

    mutating func forEach(_ body: (_ storage: ObjectIdentifier, _ table: inout MemberTable) -> Void) {
        for position in entries.indices { body(entries[position].storage, &entries[position].table) }
    }

    /// Drops the entries with no slot in use and no hold.
    mutating func dropIdleEntries() {
        guard entries.contains(where: { $0.table.inUse == 0 && !$0.holds }) else { return }
        entries.removeAll { $0.table.inUse == 0 && !$0.holds }
        positions = IdentityIndex()
        for (position, entry) in entries.enumerated() { positions.insert(entry.storage, at: position) }
    }
}
