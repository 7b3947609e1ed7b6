import Dispatch
import XCTest

@testable import PromiseCore

// `PromiseAttachment.promiseDidSettle(key:)`, the one way an owner hears a settle: as a
// promise's attachment, or as a settle listener (`Promise.addSettleListener(_:key:)`) that holds
// its owner weakly, and that a long-lived promise stops storing once the owner is gone.

final class SettleListenerTests: XCTestCase {
    /// "Tells `owner` `key` once this promise settles, synchronously on the settling thread."
    func testOwnerIsToldItsKeyOnceWhenThePromiseSettles() {
        let owner = KeyOwner()
        let (promise, resolver) = Promise<Int>.pending()
        promise.addSettleListener(owner, key: 7)
        promise.addSettleListener(owner, key: 1 << 40)
        XCTAssertEqual(owner.keys, [])
        resolver.reject(ListenerError.failed)
        resolver.fulfill(1)
        XCTAssertEqual(owner.keys, [7, 1 << 40], "in the order added, once each")
    }

    /// "At once, on this thread, if it has settled already."
    func testOwnerIsToldAtOnceForASettledPromise() {
        let owner = KeyOwner()
        Promise.value(1).addSettleListener(owner, key: 3)
        XCTAssertEqual(owner.keys, [3])
    }

    /// "Held weakly: a listener keeps nothing alive", and an owner gone by then is not told.
    func testListenerHoldsItsOwnerWeakly() {
        let (promise, resolver) = Promise<Int>.pending()
        weak var weakOwner: KeyOwner?
        do {
            let owner = KeyOwner()
            weakOwner = owner
            promise.addSettleListener(owner, key: 1)
            XCTAssertEqual(promise.waitingHandlerCount, 1)
        }
        XCTAssertNil(weakOwner)
        XCTAssertEqual(promise.waitingHandlerCount, 0, "a listener whose owner is gone is not waiting")
        XCTAssertEqual(promise.debugDescription, "Promise<Int>.pending(handlers: 0)")
        resolver.fulfill(1)
        XCTAssertEqual(promise.value, 1)
    }

    func testAttachmentIsToldWithItsKeyAndReleasedOnSettling() {
        weak var weakOwner: KeyOwner?
        let (promise, resolver) = Promise<Int>.pending()
        do {
            let owner = KeyOwner()
            weakOwner = owner
            XCTAssertTrue(promise.replaceAttachment(with: owner, key: 5).attached)
        }
        XCTAssertNotNil(weakOwner, "an attachment is held until the promise settles")
        let owner = weakOwner
        resolver.fulfill(1)
        XCTAssertEqual(owner?.keys, [5])
        XCTAssertNil(promise.attachment)
    }

    /// An attachment replaced while pending (not a producer's task) is still told, once.
    func testReplacedAttachmentIsStillToldOnce() {
        let (promise, resolver) = Promise<Int>.pending()
        let first = KeyOwner()
        let second = KeyOwner()
        XCTAssertNil(promise.replaceAttachment(with: first, key: 1).replaced)
        XCTAssertNil(promise.replaceAttachment(with: second, key: 2).replaced, "a listener now, not released")
        resolver.fulfill(1)
        XCTAssertEqual(first.keys, [1])
        XCTAssertEqual(second.keys, [2])
    }

    /// A producer's task is handed back to be released: the new attachment stands for it.
    func testReplacedProducerTaskIsHandedBackAndNotKept() {
        let (promise, resolver) = Promise<Int>.pending()
        promise.attachCancellation {}
        let owner = KeyOwner()
        let outcome = promise.replaceAttachment(with: owner, key: 4)
        XCTAssertTrue(outcome.attached)
        XCTAssertTrue(outcome.replaced is PromiseCancellation)
        XCTAssertEqual(promise.waitingHandlerCount, 0)
        resolver.fulfill(1)
        XCTAssertEqual(owner.keys, [4])
        XCTAssertFalse(promise.replaceAttachment(with: owner, key: 9).attached, "settled: attaches nothing")
    }

    func testLongLivedPromiseStoresOnlyAboutAsManyListenersAsHaveALiveOwner() {
        let (promise, resolver) = Promise<Int>.pending()
        let live = (0..<10).map { _ in KeyOwner() }
        for round in 0..<100_000 {
            if round % 10_000 == 0 { promise.addSettleListener(live[round / 10_000], key: UInt64(round)) }
            let owner = KeyOwner()
            promise.addSettleListener(owner, key: 0)  // the owner goes away
        }
        let storage = promise.handlerStorage
        XCTAssertEqual(promise.waitingHandlerCount, 10)
        XCTAssertLessThanOrEqual(storage.stored, 64, "stored: \(storage)")
        XCTAssertLessThanOrEqual(storage.capacity, 128, "stored: \(storage)")
        resolver.fulfill(0)
        XCTAssertEqual(live.map(\.keys), (0..<10).map { [UInt64($0 * 10_000)] })
    }

    func testSweepingKeepsTheOrderOfEveryHandler() {
        let (promise, resolver) = Promise<Int>.pending()
        let order = Recorder<Int>()
        let owner = OrderOwner(order)
        for index in 0..<1_000 {
            if index % 3 == 0 {
                promise.pipe { _ in order.append(index) }
            } else if index % 3 == 1 {
                promise.addSettleListener(owner, key: UInt64(index))
            } else {
                promise.addSettleListener(OrderOwner(order), key: 0)  // gone at once
            }
        }
        resolver.fulfill(0)
        XCTAssertEqual(order.all, (0..<1_000).filter { $0 % 3 != 2 })
    }

    func testOwnersGoingAwayWhileSettlingAreToldAtMostOnce() {
        for _ in 0..<200 {
            let (promise, resolver) = Promise<Int>.pending()
            let counter = Counter()
            var owners: [CountingOwner?] = (0..<8).map { _ in CountingOwner(counter) }
            for owner in owners { promise.addSettleListener(owner!, key: 0) }
            let box = Locked(owners)
            owners = []
            DispatchQueue.concurrentPerform(iterations: 9) { index in
                if index == 8 {
                    resolver.fulfill(0)
                } else {
                    let released = box.withLock { list -> CountingOwner? in
                        defer { list[index] = nil }
                        return list[index]
                    }
                    _ = released
                }
            }
            XCTAssertLessThanOrEqual(counter.value, 8)
            XCTAssertEqual(promise.waitingHandlerCount, nil)
        }
    }
}

private final class KeyOwner: PromiseAttachment, Sendable {
    private let received = Locked<[UInt64]>([])

    /// The keys received, in order.
    var keys: [UInt64] { received.withLock { $0 } }

    func promiseDidSettle(key: UInt64) {
        received.withLock { $0.append(key) }
    }

    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

private final class OrderOwner: PromiseAttachment, Sendable {
    let order: Recorder<Int>
    init(_ order: Recorder<Int>) { self.order = order }
    func promiseDidSettle(key: UInt64) { order.append(Int(key)) }
    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

private final class CountingOwner: PromiseAttachment, Sendable {
    let counter: Counter
    init(_ counter: Counter) { self.counter = counter }
    func promiseDidSettle(key: UInt64) { counter.increment() }
    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

private enum ListenerError: Error { case failed }
