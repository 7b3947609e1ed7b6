import CancellablePromiseKit
import Dispatch
import Foundation
import XCTest

private enum StressOutcome: Sendable { case value, cancelled, other }

private func stressOutcome<T>(_ result: Swift.Result<T, Error>) -> StressOutcome {
    switch result {
    case .success: return .value
    case .failure(let error as CancellablePromiseError) where error == .cancelled: return .cancelled
    case .failure(is CancellationError): return .cancelled
    case .failure: return .other
    }
}

/// Cancels many tasks at random points. A leaked continuation would hang a task (the test then
/// fails on its deadline); one resumed twice would crash. Run under ThreadSanitizer too.
final class AsyncStressTests: XCTestCase {
    /// Awaits `tasks`, failing if they do not all finish within `seconds`.
    private func awaitAll(_ tasks: [Task<StressOutcome, Never>], seconds: TimeInterval = 120) async -> [StressOutcome] {
        guard let outcomes = await values(of: tasks, seconds: seconds) else {
            XCTFail("not every task finished within \(seconds) s: a continuation leaked")
            return []
        }
        let values = outcomes.filter { $0 == .value }.count
        let cancelled = outcomes.filter { $0 == .cancelled }.count
        print("\(name): \(values) fulfilled, \(cancelled) cancelled of \(tasks.count)")
        return outcomes
    }

    func testCancellingAwaitingTasksAtRandomPoints() async {
        let count = 2_000
        var tasks: [Task<StressOutcome, Never>] = []
        var promises: [CancellablePromise<Int>] = []
        let cancelClosureCalls = (0..<count).map { _ in Counter() }
        for index in 0..<count {
            let resolverBox = Recorder<Resolver<Int>>()
            let promise = CancellablePromise<Int> { resolver in
                resolverBox.append(resolver)
                return { cancelClosureCalls[index].increment() }
            }
            promises.append(promise)
            let mode = Int.random(in: 0..<6)
            let step = promise.map(on: nil) { $0 }
            let task = Task { () -> StressOutcome in
                if mode == 0 { withUnsafeCurrentTask { $0?.cancel() } }  // before async()
                let result: Swift.Result<Int, Error>
                do {
                    result = .success(try await step.async())
                } catch {
                    result = .failure(error)
                }
                return stressOutcome(result)
            }
            tasks.append(task)
            let resolver = resolverBox.all[0]
            // Half the racers start at once, racing the task to its await; the others once the
            // task awaits (or the step has settled).
            let race = { @Sendable in
                switch mode {
                case 1: task.cancel()  // racing the await
                case 2: resolver.fulfill(index)  // racing the await
                case 3:  // fulfil and cancel race each other
                    DispatchQueue.global().async { task.cancel() }
                    resolver.fulfill(index)
                case 4: promise.cancel()  // the promise itself
                default:
                    task.cancel()
                    resolver.fulfill(index)
                }
            }
            if Bool.random() { DispatchQueue.global().async(execute: race) } else { runWhenAwaited(step.promise, race) }
        }
        let outcomes = await awaitAll(tasks)
        XCTAssertEqual(outcomes.count, count)
        XCTAssertFalse(outcomes.contains(.other))
        for index in 0..<count {
            XCTAssertNotNil(promises[index].result, "promise \(index) still pending")
            XCTAssertLessThanOrEqual(cancelClosureCalls[index].value, 1)
            if outcomes[index] == .cancelled {
                // The awaited map step was cancelled; the head may still have been fulfilled
                // first (a fulfil that wins the head's lock, with the step still pending).
                XCTAssertTrue(promises[index].isCancelled)
            }
        }
    }

    func testCancellingAsyncBodyPromisesAndTheirAwaitersAtRandomPoints() async {
        let count = 1_000
        var tasks: [Task<StressOutcome, Never>] = []
        for index in 0..<count {
            let suspensions = Int.random(in: 0..<4)
            let promise = CancellablePromise<Int> {
                for _ in 0..<suspensions { await Task.yield() }
                try Task.checkCancellation()
                return index
            }
            let mode = Int.random(in: 0..<4)
            let task = Task { () -> StressOutcome in
                do {
                    _ = try await promise.async()
                    return .value
                } catch {
                    return stressOutcome(.failure(error) as Swift.Result<Int, Error>)
                }
            }
            tasks.append(task)
            switch mode {
            case 0: DispatchQueue.global().async { promise.cancel() }
            case 1: DispatchQueue.global().async { task.cancel() }
            case 2: runWhenAwaited(promise.promise) { promise.cancel() }  // once awaited, or settled
            default: break
            }
        }
        let outcomes = await awaitAll(tasks)
        XCTAssertFalse(outcomes.contains(.other))
    }

    func testTaskToTokenToPromiseAtRandomPoints() async {
        let count = 1_000
        var tasks: [Task<StressOutcome, Never>] = []
        for index in 0..<count {
            let item = Recorder<DispatchWorkItem>()
            let task = Task { () -> StressOutcome in
                do {
                    let value = try await withCancellationToken { token in
                        try await Promise<Int>(cancellationToken: token) { resolver in
                            let work = DispatchWorkItem { resolver.fulfill(index) }
                            item.append(work)
                            DispatchQueue.global().async(execute: work)
                            return {
                                for work in item.all { work.cancel() }
                                resolver.reject(CancellablePromiseError.cancelled)
                            }
                        }.cancellize().async()
                    }
                    XCTAssertEqual(value, index)
                    return .value
                } catch {
                    return stressOutcome(.failure(error) as Swift.Result<Int, Error>)
                }
            }
            tasks.append(task)
            if Bool.random() {
                DispatchQueue.global().async { task.cancel() }  // racing the fulfilment
            }
        }
        let outcomes = await awaitAll(tasks)
        XCTAssertFalse(outcomes.contains(.other))
    }
}
