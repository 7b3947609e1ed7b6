/// Where a member's slot is: the root's own table, or the table of a storage the root absorbed,
/// named by that storage's identity (the storage the member was listed in; its promise's
/// attachment).
struct MemberHome: Equatable {
    let storage: ObjectIdentifier
    /// Whether `storage` is the root (its table is the machine's own `table`).
    let isRoot: Bool

    init(storage: ObjectIdentifier, isRoot: Bool) {
        self.storage = storage
        self.isRoot = isRoot
    }
}
