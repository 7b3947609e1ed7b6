// Cancellable `map` chains whose bodies run, reading `CancellationToken.current` not at all,
// once or three times per body: shared by the benchmark rows and the profile driver so that
// both measure the same thing. The closures capture nothing, so the rows differ only by the
// reads.

import CancellablePromiseKit

/// How often each body of `runCancellableMapChain` reads `CancellationToken.current`.
public enum CurrentTokenReads: Sendable {
    case none, once, thrice
}

/// A `length`-link cancellable `map` chain (`on: nil`), resolved: every body runs.
public func runCancellableMapChain(length: Int, reads: CurrentTokenReads) {
    let (head, resolver) = CancellablePromise<Int>.pending()
    var tail = head
    for _ in 0..<length {
        switch reads {
        case .none:
            tail = tail.map(on: nil) { $0 &+ 1 }
        case .once:
            tail = tail.map(on: nil) { CancellationToken.current.isCancelled ? 0 : $0 &+ 1 }
        case .thrice:
            tail = tail.map(on: nil) { value in
                let first = CancellationToken.current.isCancelled
                let second = CancellationToken.current.isCancelled
                return first || second || CancellationToken.current.isCancelled ? 0 : value &+ 1
            }
        }
    }
    resolver.fulfill(0)
    precondition(tail.value == length)
}
