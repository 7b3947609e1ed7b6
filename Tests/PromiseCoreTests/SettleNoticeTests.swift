import XCTest

@testable import PromiseCore

// `Promise.addSettleNotice(owner:key:)`: an owner told, by its key, that a promise it watches
// settled; the notice holds the owner weakly.

final class SettleNoticeTests: XCTestCase {
    /// "Tells `owner` `key` once this promise settles, synchronously on the settling thread."
    func testOwnerIsToldItsKeyOnceWhenThePromiseSettles() {
        let owner = NoticeOwner()
        let (promise, resolver) = Promise<Int>.pending()
        promise.addSettleNotice(owner: owner, key: 7)
        promise.addSettleNotice(owner: owner, key: 1 << 40)
        XCTAssertEqual(owner.keys, [])
        resolver.reject(NoticeError.failed)
        resolver.fulfill(1)
        XCTAssertEqual(owner.keys, [7, 1 << 40], "in the order added, once each")
    }

    /// "At once, on this thread, if it has settled already."
    func testOwnerIsToldAtOnceForASettledPromise() {
        let owner = NoticeOwner()
        Promise.value(1).addSettleNotice(owner: owner, key: 3)
        XCTAssertEqual(owner.keys, [3])
    }

    /// "Held weakly: a notice keeps nothing alive", and an owner gone by then is not told.
    func testNoticeHoldsItsOwnerWeakly() {
        let (promise, resolver) = Promise<Int>.pending()
        weak var weakOwner: NoticeOwner?
        do {
            let owner = NoticeOwner()
            weakOwner = owner
            promise.addSettleNotice(owner: owner, key: 1)
        }
        XCTAssertNil(weakOwner)
        resolver.fulfill(1)
        XCTAssertEqual(promise.value, 1)
    }
}

private final class NoticeOwner: SettleNoticeOwner {
    private let received = Locked<[UInt64]>([])

    /// The keys of the notices received, in order.
    var keys: [UInt64] { received.withLock { $0 } }

    func promiseDidSettle(noticeKey: UInt64) {
        received.withLock { $0.append(noticeKey) }
    }
}

private enum NoticeError: Error { case failed }
