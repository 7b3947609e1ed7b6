// The queue-hop workloads, shared by the benchmark rows and the profile driver so that both
// measure the same thing.

import CancellablePromiseKit
import Dispatch

/// `remaining` blocks on `queue` one after the other, each enqueuing the next; the last one
/// signals `done` (the baseline of a hop chain: a bare `queue.async` per hop).
public func hop(_ remaining: Int, on queue: DispatchQueue, done: DispatchSemaphore) {
    queue.async {
        if remaining > 1 {
            hop(remaining - 1, on: queue, done: done)
        } else {
            done.signal()
        }
    }
}

/// A chain of `length` `map(on: queue)` links, built pending: running it hops once per link.
/// The links are kept until the chain is released, so none is freed while it runs.
public struct SerialHopChain {
    private let resolver: Resolver<Int>
    private let links: [Promise<Int>]
    private let finished = DispatchSemaphore(value: 0)

    public init(length: Int, on queue: DispatchQueue) {
        let (head, resolver) = Promise<Int>.pending()
        var links: [Promise<Int>] = []
        links.reserveCapacity(length)
        var tail = head
        for _ in 0..<length {
            tail = tail.map(on: queue) { $0 &+ 1 }
            links.append(tail)
        }
        let finished = self.finished
        tail.pipe { _ in finished.signal() }
        self.resolver = resolver
        self.links = links
    }

    /// Fulfils the head and waits for the tail's handler.
    public func run() {
        resolver.fulfill(0)
        finished.wait()
    }

    /// Whether every link fulfilled with its position in the chain.
    public var isComplete: Bool {
        links.last?.value == links.count && links.allSatisfy { $0.isFulfilled }
    }
}
