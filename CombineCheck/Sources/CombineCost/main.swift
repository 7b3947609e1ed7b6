// Round trips through the Combine bridge, timed beside a plain `Future` + `sink` measured in the
// same run:
//
//   swift run -c release --package-path CombineCheck CombineCost [rounds]
//
// Rows (ns per round trip; ratio to the baseline):
// - baseline: a completed `Future`, subscribed with `sink`, the cancellable released;
// - a pending `CancellablePromise` → `publisher()` → `sink`, then fulfilled (value delivered);
// - a pending `CancellablePromise` → `publisher()` → `sink`, then the subscription cancelled
//   (the last interest: the promise is cancelled);
// - a `PassthroughSubject` → `cancellablePromise()` → `cancel()`;
// - a `PassthroughSubject` → `cancellablePromise()` → a value sent.
import Dispatch
import PromiseCombine

#if canImport(Combine)
import Combine
#elseif canImport(OpenCombine)
import OpenCombine
#endif

#if canImport(Combine) || canImport(OpenCombine)
let rounds = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 200_000
nonisolated(unsafe) var sink = 0
// A cancelled `pending()` promise leaves its resolver's promise pending: not worth a log line.
conf.logHandler = { _ in }

/// Runs `body` `rounds` times (after a warm-up) and returns nanoseconds per round.
func measure(_ body: () -> Void) -> Double {
    for _ in 0..<rounds / 10 { body() }
    let start = DispatchTime.now().uptimeNanoseconds
    for _ in 0..<rounds { body() }
    return Double(DispatchTime.now().uptimeNanoseconds - start) / Double(rounds)
}

let baseline = measure {
    let future = Future<Int, Error> { $0(.success(1)) }
    let cancellable = future.sink(receiveCompletion: { _ in }, receiveValue: { sink &+= $0 })
    cancellable.cancel()
}

let rows: [(String, Double)] = [
    (
        "CancellablePromise → publisher → sink, fulfilled",
        measure {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let cancellable = promise.publisher().sink(receiveCompletion: { _ in }, receiveValue: { sink &+= $0 })
            resolver.fulfill(1)
            cancellable.cancel()
        }
    ),
    (
        "CancellablePromise → publisher → sink, cancelled",
        measure {
            let (promise, _) = CancellablePromise<Int>.pending()
            let cancellable = promise.publisher().sink(receiveCompletion: { _ in }, receiveValue: { sink &+= $0 })
            cancellable.cancel()
        }
    ),
    (
        "Promise → publisher → sink, fulfilled",
        measure {
            let (promise, resolver) = Promise<Int>.pending()
            let cancellable = promise.publisher().sink(receiveCompletion: { _ in }, receiveValue: { sink &+= $0 })
            resolver.fulfill(1)
            cancellable.cancel()
        }
    ),
    (
        "publisher → cancellablePromise → cancel()",
        measure {
            let subject = PassthroughSubject<Int, Never>()
            subject.cancellablePromise().cancel()
        }
    ),
    (
        "publisher → cancellablePromise → value",
        measure {
            let subject = PassthroughSubject<Int, Never>()
            let promise = subject.cancellablePromise()
            subject.send(1)
            sink &+= promise.value ?? 0
        }
    ),
]

func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

print("\(rounds) rounds each")
print(pad("Future → sink (baseline)", 52) + "\(Int(baseline.rounded())) ns   1.00×")
for (name, ns) in rows {
    let ratio = (ns / baseline * 100).rounded() / 100
    print(pad(name, 52) + "\(Int(ns.rounded())) ns   \(ratio)×")
}
if sink == 42 { print("") }  // keeps the work observable
#endif
