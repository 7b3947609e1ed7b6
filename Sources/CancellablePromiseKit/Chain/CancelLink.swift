import PromiseCore

// Links: what cancelling a step reaches besides its own promise (another chain, through a
// handle of it; a producer's task). They are released without recursing (`LinkRelease`).

/// What cancelling a step cancels besides its own promise.
enum CancelLink {
    /// Another chain, held through a handle: cancelling cancels it.
    case chain(any _CancelHandle)
    /// A producer's task.
    case task(() -> Void)
    /// Several of them.
    indirect case both(CancelLink, CancelLink)

    /// Adds `other` to `link`.
    static func adding(_ other: CancelLink, to link: CancelLink?) -> CancelLink {
        guard let link else { return other }
        return .both(link, other)
    }
}
