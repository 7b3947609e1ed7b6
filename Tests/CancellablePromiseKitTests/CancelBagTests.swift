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
            // Real clock: a task that only ends early when cancelled; the bag's cancelAll() ends the sleep.
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
        // The entry leaves from a task of the bag's that watches the finished one.
        let left = await untilHolds { bag.count == 0 }
        XCTAssertTrue(left, "the finished task's entry is still in the bag")
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
    // MARK: Leaving the bag

    /// "Until the stored promise settles: it leaves the bag then, on the settling thread", with
    /// no sweep: the bag holds one entry fewer before `fulfill` returns, `count` unread.
    func testSettledChainLeavesTheBagAtOnce() {
        let bag = CancelBag()
        let (promise, resolver) = CancellablePromise<Int>.pending()
        promise.store(in: bag)
        let (finalized, finalizedResolver) = CancellablePromise<Int>.pending()
        finalized.done(on: nil) { _ in }.catch(on: nil) { _ in }.store(in: bag)
        XCTAssertEqual(bag.storedCount, 2)
        resolver.fulfill(1)
        XCTAssertEqual(bag.storedCount, 1)
        finalizedResolver.reject(BagTestError.failed)
        XCTAssertEqual(bag.storedCount, 0)
    }

    #if DEBUG  // `settlesHeard` exists only in debug builds
    /// A stored chain's promise tells the bag once, as its one settle listener (the chain hears
    /// it through its own attachment), whether it settles on its own or is cancelled by the bag.
    func testABagEntryIsToldOnceThatItsPromiseSettled() {
        let bag = CancelBag()
        let (settling, resolver) = CancellablePromise<Int>.pending()
        settling.store(in: bag)
        XCTAssertEqual(settling.promise.debugDescription, "Promise<Int>.pending(handlers: 1)", "one listener: the bag")
        resolver.fulfill(1)
        XCTAssertEqual(bag.settlesHeard.withLock { $0 }, 1)
        XCTAssertEqual(bag.storedCount, 0)

        let (cancelled, _) = CancellablePromise<Int>.pending()
        let tail = cancelled.map(on: nil) { $0 }
        cancelled.store(in: bag)
        tail.store(in: bag)
        bag.cancelAll()
        XCTAssertTrue(cancelled.promise.isRejected && tail.promise.isRejected)
        XCTAssertEqual(bag.settlesHeard.withLock { $0 }, 3, "once per entry")
    }
    #endif

    /// The listener a stored chain's promise keeps holds the bag weakly: a bag whose owner is
    /// gone is freed (and cancels its entries) while the chain was pending.
    func testStoredChainDoesNotKeepTheBagAlive() {
        let (promise, _) = CancellablePromise<Int>.pending()
        weak var weakBag: CancelBag?
        do {
            let bag = CancelBag()
            weakBag = bag
            promise.store(in: bag)
        }
        XCTAssertNil(weakBag)
        XCTAssertTrue(promise.promise.isRejected, "cancelled by the bag's deinit")
    }

    /// "The bag no longer holds anything of it": a settled chain's promises are freed while
    /// the bag lives on (weak references).
    func testSettledChainIsNotHeldByTheBag() {
        let bag = CancelBag()
        weak var weakStored: CancellablePromise<Int>?
        weak var weakFinalized: CancellablePromise<Void>?
        var resolvers: [Resolver<Int>] = []
        do {
            let (stored, storedResolver) = CancellablePromise<Int>.pending()
            stored.store(in: bag)
            weakStored = stored
            let (head, headResolver) = CancellablePromise<Int>.pending()
            let finalizer = head.done(on: nil) { _ in }.catch(on: nil) { _ in }
            finalizer.store(in: bag)
            weakFinalized = finalizer.chain  // the `catch` step's promise, a handle of the chain
            resolvers = [storedResolver, headResolver]
        }
        XCTAssertNotNil(weakStored, "the bag keeps a pending chain cancellable")
        XCTAssertNotNil(weakFinalized, "the bag keeps a pending chain cancellable")
        for resolver in resolvers { resolver.fulfill(1) }
        XCTAssertNil(weakStored)
        XCTAssertNil(weakFinalized)
        XCTAssertFalse(bag.isCancelled)
    }

    /// "Leaving costs O(1) whatever the order work ends in": chains settling oldest first leave
    /// one by one, each as it settles.
    func testChainsSettlingOldestFirstLeaveOneByOne() {
        let bag = CancelBag()
        let resolvers = storePendingChains(1_000, in: bag)
        for (index, resolver) in resolvers.enumerated() {
            resolver.fulfill(index)
            XCTAssertEqual(bag.storedCount, resolvers.count - index - 1)
        }
        XCTAssertEqual(bag.count, 0)
    }

    /// Chains settling newest first leave one by one, each as it settles.
    func testChainsSettlingNewestFirstLeaveOneByOne() {
        let bag = CancelBag()
        let resolvers = storePendingChains(1_000, in: bag)
        for (index, resolver) in resolvers.enumerated().reversed() {
            resolver.fulfill(index)
            XCTAssertEqual(bag.storedCount, index)
        }
        XCTAssertEqual(bag.count, 0)
    }

    /// A slot freed by a settled chain, in whatever order, is the next one used: the table
    /// never holds more slots than entries were held at once.
    func testFreedSlotsAreReusedInAnyOrder() {
        let bag = CancelBag()
        var generator = SeededGenerator(seed: 11)
        var resolvers = storePendingChains(1_000, in: bag)
        resolvers.shuffle(using: &generator)
        for resolver in resolvers.prefix(500) { resolver.fulfill(0) }
        XCTAssertEqual(bag.storedCount, 500)
        let more = storePendingChains(500, in: bag)
        XCTAssertEqual(bag.storedCount, 1_000)
        XCTAssertEqual(bag.slotCount, 1_000, "the new chains took the freed slots")
        for resolver in resolvers.suffix(500) + more { resolver.fulfill(0) }
        XCTAssertEqual(bag.storedCount, 0)
    }

    /// A bag of 200,000 pending finalizers that then settle holds nothing of them afterwards,
    /// before anything reads `count`: no entry, no slot table beyond a few slots, no chain.
    func testTwoHundredThousandSettledFinalizersLeaveNothingBehind() {
        let bag = CancelBag()
        weak var weakFirst: CancellablePromise<Void>?
        weak var weakLast: CancellablePromise<Void>?
        var resolvers: [Resolver<Int>] = []
        resolvers.reserveCapacity(200_000)
        for index in 0..<200_000 {
            let (promise, resolver) = CancellablePromise<Int>.pending()
            let finalizer = promise.done(on: nil) { _ in }.catch(on: nil) { _ in }
            finalizer.store(in: bag)
            // The `catch` step's promise, a handle of the chain the bag keeps cancellable.
            if index == 0 { weakFirst = finalizer.chain }
            if index == 199_999 { weakLast = finalizer.chain }
            resolvers.append(resolver)
        }
        XCTAssertEqual(bag.storedCount, 200_000)
        XCTAssertNotNil(weakFirst, "the bag keeps pending chains cancellable")
        for (index, resolver) in resolvers.enumerated() { resolver.fulfill(index) }
        XCTAssertEqual(bag.storedCount, 0)
        XCTAssertLessThanOrEqual(bag.slotCount, 16, "an emptied table frees its slots")
        XCTAssertNil(weakFirst)
        XCTAssertNil(weakLast)
    }

    /// A request leaves the bag when its token completes, before `cancel()` returns.
    func testCancelledRequestLeavesTheBagAtOnce() {
        let bag = CancelBag()
        let request = CancellationRequest()
        request.store(in: bag)
        XCTAssertEqual(bag.storedCount, 1)
        request.cancel()
        XCTAssertEqual(bag.storedCount, 0)
    }

    /// A chain that settled before it was stored leaves at once.
    func testSettledChainStoredLeavesAtOnce() {
        let bag = CancelBag()
        CancellablePromise.value(1).store(in: bag)
        CancellablePromise<Int>(error: BagTestError.failed).catch(on: nil) { _ in }.store(in: bag)
        XCTAssertEqual(bag.storedCount, 0)
    }

    /// `cancelAll()` racing the chains' fulfilment: each chain is either fulfilled or cancelled
    /// (its cancel closure runs only then), and the bag ends empty.
    func testCancelAllRacingFulfilmentCancelsOrFulfilsEachChainOnce() {
        for round in 0..<50 {
            let bag = CancelBag()
            let cancels = Counter()
            var resolvers: [Resolver<Int>] = []
            var promises: [CancellablePromise<Int>] = []
            for _ in 0..<200 {
                let (promise, resolver) = Promise<Int>.pending()
                let chain = CancellablePromise(using: promise, cancel: { cancels.increment() })
                chain.store(in: bag)
                promises.append(chain)
                resolvers.append(resolver)
            }
            let sendableResolvers = UncheckedBox(resolvers)
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 {
                    for (value, resolver) in sendableResolvers.value.enumerated() { resolver.fulfill(value) }
                } else {
                    bag.cancelAll()
                }
            }
            let fulfilled = promises.filter { $0.isFulfilled }.count
            let cancelled = promises.filter { ($0.error as? CancellablePromiseError) == .cancelled }.count
            XCTAssertEqual(fulfilled + cancelled, 200, "round \(round)")
            XCTAssertEqual(cancels.value, cancelled, "round \(round): a cancel closure ran for each cancelled chain")
            XCTAssertEqual(bag.storedCount, 0, "round \(round)")
        }
    }

    /// Chains stored and settled from several threads at once all leave the bag.
    func testChainsStoredAndSettledFromManyThreadsAllLeave() {
        let bag = CancelBag()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            var resolvers: [Resolver<Int>] = []
            for _ in 0..<2_000 {
                let (promise, resolver) = CancellablePromise<Int>.pending()
                promise.store(in: bag)
                resolvers.append(resolver)
                if resolvers.count == 50 {
                    while let resolver = resolvers.popLast() { resolver.fulfill(0) }
                }
            }
            for resolver in resolvers { resolver.fulfill(0) }
        }
        XCTAssertEqual(bag.storedCount, 0)
        XCTAssertEqual(bag.count, 0)
    }

    /// `count` pending chains stored in `bag`, and their resolvers, oldest first.
    private func storePendingChains(_ count: Int, in bag: CancelBag) -> [Resolver<Int>] {
        (0..<count).map { _ in
            let (promise, resolver) = CancellablePromise<Int>.pending()
            promise.store(in: bag)
            return resolver
        }
    }
}

private enum BagTestError: Error { case failed }
