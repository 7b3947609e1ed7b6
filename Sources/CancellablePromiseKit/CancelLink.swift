import PromiseCore

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Links: what cancelling a step reaches besides its own promise (another chain, a producer's
// task), and how links are released without recursing.

/// What cancelling a step cancels besides its own promise.
enum CancelLink {
    /// Another chain, held through its handle: cancelling cancels it.
    case chain(CancelContext)
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

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            #if canImport(Darwin)
            Unmanaged<Queue>.fromOpaque(pointer).release()
            #else
            if let pointer { Unmanaged<Queue>.fromOpaque(pointer).release() }
            #endif
        }
        precondition(status == 0, "LinkRelease: pthread_key_create failed (\(status))")
        return key
    }()

    /// This thread's queue (created on first use, released when the thread exits).
    private static var queue: Queue {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<Queue>.fromOpaque(pointer).takeUnretainedValue()
        }
        let queue = Queue()
        pthread_setspecific(key, Unmanaged.passRetained(queue).toOpaque())
        return queue
    }

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
