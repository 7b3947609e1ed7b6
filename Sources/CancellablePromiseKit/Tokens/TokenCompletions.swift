import PromiseCore

/// Completes derived tokens iteratively. A link's body completes the derived token, whose own
/// links complete the tokens derived from it, and so on: a chain of 100,000 tokens each mapped
/// from the one before would otherwise recurse once per token and overflow the stack. While a
/// link body runs on a thread, the completions it causes are queued (`defer`) instead of
/// performed; the first link body on the thread then performs them in a loop, each of them
/// queueing the completions its own links cause.
///
/// Only link bodies (library code) are deferred: handlers run with nothing deferred, so a
/// handler that cancels another request still finds that request's handlers run when its
/// `cancel()` returns. Each token's handlers run in registration order; the handlers of a token
/// derived from it run once that token's handlers have.
enum TokenCompletions {
    private final class Queue {
        var pending: [TokenActions] = []
        var next = 0
        /// A link body is running on this thread: completions are queued.
        var isInLink = false
        /// This thread is performing the queued completions.
        var isDraining = false
    }

    /// This thread's queue (made on first use, released when the thread exits).
    private static let queues = PerThread("TokenCompletions") { Queue() }
    private static var queue: Queue { queues.value }

    /// Performs `actions` (a completion) now, with the completions it causes, or queues them if
    /// a link body is running on this thread (the loop of the completion that ran that body
    /// performs them).
    static func perform(_ actions: TokenActions) {
        let queue = self.queue
        if queue.isInLink {
            queue.pending.append(actions)
            return
        }
        drain(queue, first: actions, then: [])
    }

    /// Runs a link body; the completions it causes are performed by the loop of the
    /// completion that runs it, or, without one (a link run at once as it is added, or by a
    /// token's deinit), here.
    static func runLink(_ body: () -> Void) {
        let queue = self.queue
        if queue.isInLink || queue.isDraining {
            let wasInLink = queue.isInLink
            queue.isInLink = true
            body()
            queue.isInLink = wasInLink
            return
        }
        queue.isInLink = true
        body()
        queue.isInLink = false
        guard !queue.pending.isEmpty else { return }
        let deferred = queue.pending
        queue.pending = []
        drain(queue, first: nil, then: deferred)
    }

    /// Performs `first`, then `queued`, then every completion queued meanwhile, in order, in a
    /// frame of its own:
    /// a handler that completes another token (a nested `cancel()`) gets a new frame, so that
    /// token's handlers, and those of the tokens derived from it, have run when it returns.
    private static func drain(_ queue: Queue, first: TokenActions?, then queued: [TokenActions]) {
        let outer = (queue.pending, queue.next, queue.isDraining)
        queue.pending = queued
        queue.next = 0
        queue.isDraining = true
        first?.perform()
        while queue.next < queue.pending.count {
            let actions = queue.pending[queue.next]
            queue.pending[queue.next] = TokenActions()
            queue.next += 1
            actions.perform()
        }
        (queue.pending, queue.next, queue.isDraining) = outer
    }
}
