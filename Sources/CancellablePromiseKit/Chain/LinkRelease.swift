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
