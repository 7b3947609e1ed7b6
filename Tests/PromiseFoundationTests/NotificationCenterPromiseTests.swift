import Foundation
import PromiseFoundation
import XCTest

/// `NotificationCenter.observe(once:object:)`.
final class NotificationCenterPromiseTests: XCTestCase {
    private let ping = Notification.Name("PromiseFoundationTests.ping")
    private let center = NotificationCenter()

    func testResolvesWithTheFirstNotificationOnThePostingThread() throws {
        let sender = NSObject()
        let guarantee = center.observe(once: ping)
        XCTAssertTrue(guarantee.isPending)
        let resolvedOnPostingThread = SendableBox(false)
        let posted = Handshake()
        let senderBox = UncheckedBox(sender)
        Thread.detachNewThread { [center, ping] in
            let sender = senderBox.value
            let thread = ObjectIdentifier(Thread.current)
            guarantee.done(on: nil) { _ in
                resolvedOnPostingThread.value = ObjectIdentifier(Thread.current) == thread
            }
            center.post(name: ping, object: sender, userInfo: ["n": 1])
            center.post(name: ping, object: sender, userInfo: ["n": 2])
            posted.signal()
        }
        XCTAssertTrue(posted.wait(seconds: 5))
        let notification = try XCTUnwrap(guarantee.value)
        XCTAssertEqual(notification.userInfo?["n"] as? Int, 1)
        XCTAssertTrue(notification.object as AnyObject === sender)
        XCTAssertTrue(resolvedOnPostingThread.value)
    }

    func testObjectFiltersTheSender() {
        let wanted = NSObject(), other = NSObject()
        let guarantee = center.observe(once: ping, object: wanted)
        center.post(name: ping, object: other)
        XCTAssertTrue(guarantee.isPending)
        center.post(name: ping, object: wanted)
        XCTAssertTrue(guarantee.value?.object as AnyObject === wanted)
    }

    func testTheObserverIsRemovedAfterTheFirstNotification() {
        weak var weakGuarantee: Promise<Notification>?  // the guarantee's state, held by the observer
        do {
            let guarantee = center.observe(once: ping)
            weakGuarantee = guarantee.asPromise()
            center.post(name: ping, object: nil)
            XCTAssertFalse(guarantee.isPending)
        }
        // Only the observer block could keep the guarantee alive: it was removed and released.
        XCTAssertNil(weakGuarantee)
    }

    func testCancelRemovesTheObserver() {
        weak var weakGuarantee: Promise<Notification>?  // the guarantee's state, held by the observer
        let cancellable: CancellablePromise<Notification>
        do {
            let guarantee = center.observe(once: ping)
            weakGuarantee = guarantee.asPromise()
            cancellable = guarantee.cancellize()
        }
        XCTAssertNotNil(weakGuarantee, "the observer holds the pending guarantee")
        cancellable.cancel()
        XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled)
        XCTAssertNil(weakGuarantee, "the observer was not removed")
        center.post(name: ping, object: nil)
        XCTAssertEqual(cancellable.error as? CancellablePromiseError, .cancelled)
    }

    func testCancellingAChainBuiltOnTheNotificationRemovesTheObserver() {
        weak var weakGuarantee: Promise<Notification>?  // the guarantee's state, held by the observer
        let ran = SendableBox(false)
        let tail: CancellablePromise<Void>
        do {
            let guarantee = center.observe(once: ping)
            weakGuarantee = guarantee.asPromise()
            tail = guarantee.cancellize().done(on: nil) { _ in ran.value = true }
        }
        tail.cancel()
        XCTAssertNil(weakGuarantee)
        center.post(name: ping, object: nil)
        XCTAssertFalse(ran.value)
    }

    func testTimeoutOnANotification() throws {
        let scheduler = TestScheduler()
        let timed = center.observe(once: ping).cancellize().timeout(seconds: 0.05, scheduler: scheduler)
        scheduler.advance(by: 0.05)
        let error = try XCTUnwrap(timed.error)
        XCTAssertTrue(error is PromiseTimeoutError)
        XCTAssertFalse(error.isCancelled)
    }

    func testCancelRacingPostsSettlesOnceAndNeverCrashes() {
        for _ in 0..<300 {
            let cancellable = center.observe(once: ping).cancellize()
            XCTAssertTrue(
                runConcurrently([
                    { [center, ping] in center.post(name: ping, object: nil) },
                    { cancellable.cancel() },
                    { [center, ping] in center.post(name: ping, object: nil) },
                ]))
            XCTAssertFalse(cancellable.isPending)
        }
    }
}
