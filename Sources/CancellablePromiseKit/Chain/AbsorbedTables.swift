// The tables of the storages a chain's root absorbed by joins, kept in the root's state machine
// (`ChainState.absorbed`) and found by the identity of the storage each belongs to: a member of
// an absorbed storage keeps its slot (its promise knows its storage and slot), and only the
// table it sits in moves, once, into the machine that decides for it.

/// The member tables of absorbed storages, by storage identity, in the order they joined.
/// Finding a table costs one hash lookup; dropping empty tables keeps the order of the others.
struct AbsorbedTables {
    private var storages: [ObjectIdentifier] = []
    private var tables: [MemberTable] = []
    private var positions: [ObjectIdentifier: Int] = [:]

    init() {}

    /// The number of tables.
    var count: Int { tables.count }

    var isEmpty: Bool { tables.isEmpty }

    /// Whether there is a table for `storage`.
    func contains(_ storage: ObjectIdentifier) -> Bool { positions[storage] != nil }

    /// The listed members of every table.
    var listedCount: Int { tables.reduce(0) { $0 + $1.listedCount } }

    /// Runs `body` on the table of `storage`, making an empty one first if there is none.
    mutating func withTable<R>(_ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R) -> R {
        if let position = positions[storage] { return body(&tables[position]) }
        positions[storage] = tables.count
        storages.append(storage)
        tables.append(MemberTable())
        return body(&tables[tables.count - 1])
    }

    /// Runs `body` on the table of `storage`; `nil` if there is none.
    mutating func withExistingTable<R>(_ storage: ObjectIdentifier, _ body: (inout MemberTable) -> R) -> R? {
        guard let position = positions[storage] else { return nil }
        return body(&tables[position])
    }

    /// Reads the table of `storage`; `nil` if there is none.
    func readTable<R>(_ storage: ObjectIdentifier, _ body: (MemberTable) -> R) -> R? {
        guard let position = positions[storage] else { return nil }
        return body(tables[position])
    }

    /// Adds `table` as the table of `storage`, replacing an empty one it may have had (a table
    /// left by a storage that is gone, whose identity a new storage took).
    mutating func insert(_ table: consuming MemberTable, for storage: ObjectIdentifier) {
        if let position = positions[storage] {
            precondition(tables[position].inUse == 0, "AbsorbedTables.insert: a storage is absorbed once")
            tables[position] = table
            return
        }
        positions[storage] = tables.count
        storages.append(storage)
        tables.append(table)
    }

    /// Moves every table of `other` here, in its order.
    mutating func absorb(_ other: inout AbsorbedTables) {
        var moved = AbsorbedTables()
        swap(&moved, &other)
        for position in moved.tables.indices {
            var table = MemberTable()
            swap(&table, &moved.tables[position])
            insert(table, for: moved.storages[position])
        }
    }

    /// Runs `body` on every table, in the order they joined.
    mutating func forEach(_ body: (_ storage: ObjectIdentifier, _ table: inout MemberTable) -> Void) {
        for position in tables.indices { body(storages[position], &tables[position]) }
    }

    /// Drops the tables with no slot in use; returns how many were dropped.
    @discardableResult
    mutating func dropEmptyTables() -> Int {
        guard tables.contains(where: { $0.inUse == 0 }) else { return 0 }
        var keptStorages: [ObjectIdentifier] = []
        var keptTables: [MemberTable] = []
        var dropped = 0
        for position in tables.indices {
            if tables[position].inUse == 0 {
                dropped += 1
                continue
            }
            var table = MemberTable()
            swap(&table, &tables[position])
            keptStorages.append(storages[position])
            keptTables.append(table)
        }
        storages = keptStorages
        tables = keptTables
        positions = [:]
        for (position, storage) in storages.enumerated() { positions[storage] = position }
        return dropped
    }
}
