enum TokenAction {
    case onCancel(() -> Void)
    case onComplete((Bool) -> Void)
    case cancel(WeakCancellable)
    /// A token derived from this one (always run synchronously).
    case derived(DerivedLink)
    /// A removed entry's tombstone: runs nothing, dropped when the list is compacted.
    case removed

    var isRemoved: Bool {
        if case .removed = self { return true }
        return false
    }

    /// Handlers and registered objects are the token's own entries; links are not.
    var isOwn: Bool {
        switch self {
        case .derived, .removed: return false
        case .onCancel, .onComplete, .cancel: return true
        }
    }

    /// Registered objects (held weakly) and links to derived tokens: what a sweep may drop.
    var isSweepable: Bool {
        switch self {
        case .cancel, .derived: return true
        case .onCancel, .onComplete, .removed: return false
        }
    }
}
