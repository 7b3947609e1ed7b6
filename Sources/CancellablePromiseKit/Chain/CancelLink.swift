import PromiseCore

// Links: what cancelling a step reaches besides its own promise (another chain, through a
// handle of it; a producer's task), and how links are released without recursing.

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

// MARK: - Releasing links

/// Releases links without recursing. Releasing a link can release the last handle of the chain
/// it reaches, which abandons that chain and releases its own links: a chain of a hundred
/// thousand `then` bodies each waiting on the next would otherwise release them in nested
/// `deinit`s. The first release on a thread releases, in a loop, whatever the releases it causes
/// hand over.
enum LinkRelease {
    private final class Queue {
        var pending: [CancelLink] = []
        var isReleasing = false
    }

    /// This thread's queue (made on first use, released when the thread exits).
    private static let queues = PerThread("LinkRelease") { Queue() }
    private static var queue: Queue { queues.value }

    /// Releases `links` (moved out: the caller keeps no reference that could be the last one).
    static func release(_ links: inout [CancelLink]) {
        let queue = self.queue
        queue.pending.append(contentsOf: links)
        links = []
        guard !queue.isReleasing else { return }
        queue.isReleasing = true
        while let link = queue.pending.popLast() {
            if case .both(let first, let second) = link {
                queue.pending.append(first)
                queue.pending.append(second)
            }
            _ = link
        }
        queue.isReleasing = false
    }
}
