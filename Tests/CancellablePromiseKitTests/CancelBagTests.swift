import CancellablePromiseKit
import Foundation
import XCTest

@testable import CancellablePromiseKit

// Owner-bound cancellation: a `CancelBag` cancels what it holds when its owner goes away, and
// holds only what is still running.

final class CancelBagTests: XCTestCase {
    /// An owner, as a view model would be: it starts work and keeps it in its bag.
    private final class Owner {
        let bag = CancelBag()
    }

    func testOwnerDeallocatedCancelsEveryChainOnce() {
        let called = Counter()
        var tails: [CancellablePromise<Void>] = []
        var owner: Owner? = Owner()
        for _ in 0..<10 {
            let tail = CancellablePromise<Int> { _ in { called.increment() } }.done(on: nil) { _ in }
            tail.store(in: owner!.bag)
            tails.append(tail)
        }
        XCTAssertEqual(owner?.bag.count, 10)
        owner = nil
        XCTAssertEqual(called.value, 10, "every cancel closure ran once")
        for tail in tails {
            XCTAssertEqual(tail.error as? CancellablePromiseError, .cancelled)
        }
    }

    func testFireAndForgetChainStaysCancellableThroughTheBag() {
        let called = Counter()
        let ran = Counter()
        var owner: Owner? = Owner()
        CancellablePromise<Int> { _ in { called.increment() } }
            .done(on: nil) { _ in ran.increment() }
            .catch(on: nil, policy: .allErrors) { _ in ran.increment() }
            .store(in: owner!.bag)
        owner = nil
        XCTAssertEqual(called.value, 1)
        XCTAssertEqual(ran.value, 1, "the catch saw the cancellation")
    }

    func testSettledChainsLeaveTheBag() {
        let bag = CancelBag()
        weak var weakProbeOwner: DeinitProbe?
        for index in 0..<10_000 {
            let probe = DeinitProbe {}
            if index == 0 { weakProbeOwner = probe }
            let (promise, resolver) = CancellablePromise<Int>.pending()
            promise.map(on: nil) { value -> Int in
                _ = probe
                return value
            }.store(in: bag)
            resolver.fulfill(index)
        }
        XCTAssertEqual(bag.count, 0, "a long-lived bag holds only what still runs")
        XCTAssertNil(weakProbeOwner)
    }

    func testStoringIntoACancelledBagCancelsAtOnce() {
        let bag = CancelBag()
        bag.cancelAll()
        let task = FakeTask<Int>()
        let promise = task.promise.cancellize()
        promise.store(in: bag)
        XCTAssertTrue(task.isCancelled)
        XCTAssertEqual(promise.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(bag.count, 0)
        XCTAssertTrue(bag.isCancelled)
    }

    func testBagHoldsRequestsContextsTasksAndCancellables() async {
        let bag = CancelBag()
        let request = CancellationRequest()
        request.store(in: bag)
        let context = CancelContext()
        let member = Promise<Int>.pending().promise.cancellize(cancelContext: context)
        context.store(in: bag)
        let item = DispatchWorkItem {}
        item.store(in: bag)
        let task = Task { () -> Int in
            try? await Task.sleep(nanoseconds: 60_000_000_000)
            return Task.isCancelled ? -1 : 1
        }
        task.store(in: bag)
        bag.cancelAll()
        XCTAssertTrue(request.isCancelled)
        XCTAssertTrue(context.isCancelled)
        XCTAssertTrue(member.isRejected)
        XCTAssertTrue(item.isCancelled)
        let value = await task.value
        XCTAssertEqual(value, -1)
    }

    func testCancelledRequestAndFinishedTaskLeaveTheBag() async {
        let bag = CancelBag()
        let request = CancellationRequest()
        request.store(in: bag)
        request.cancel()
        XCTAssertEqual(bag.count, 0)
        let task = Task { 1 }
        task.store(in: bag)
        _ = await task.value
        for _ in 0..<1_000 where bag.count > 0 { await Task.yield() }
        XCTAssertEqual(bag.count, 0)
    }

    func testWeaklyHeldCancellablesAreSweptOut() {
        let bag = CancelBag()
        for _ in 0..<10_000 { DispatchWorkItem {}.store(in: bag) }
        XCTAssertLessThanOrEqual(bag.storedCount, 2_048, "released items are swept out as new ones are stored")
        XCTAssertEqual(bag.count, 0)
    }

    func testStoringAndCancellingFromManyThreads() {
        for _ in 0..<200 {
            let bag = CancelBag()
            let called = Counter()
            let stored = Counter()
            DispatchQueue.concurrentPerform(iterations: 4) { index in
                if index == 0 {
                    bag.cancelAll()
                    return
                }
                for _ in 0..<25 {
                    CancellablePromise<Int> { _ in { called.increment() } }.store(in: bag)
                    stored.increment()
                }
            }
            bag.cancelAll()
            XCTAssertEqual(called.value, stored.value, "every stored chain is cancelled exactly once")
            XCTAssertEqual(bag.count, 0)
        }
    }
}
