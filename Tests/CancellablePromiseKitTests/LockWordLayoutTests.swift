import XCTest

@testable import CancellablePromiseKit
@testable import PromiseCore

/// The classes of this module that keep an inline lock word (the token, a bag's state, the
/// coalescer) address
/// it through the object pointer (see PromiseCore's Lock.swift): the offset must match where
/// Swift stores their first stored property.
final class LockWordLayoutTests: XCTestCase {
    func testCancellationTokenLockWordOffset() {
        let token = CancellationRequest().token
        XCTAssertEqual(token._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(token)))
    }

    func testCancelBagStateLockWordOffset() {
        let (object, stored) = CancelBag()._stateLockWord
        XCTAssertEqual(stored, UnsafeMutableRawPointer(lockWordPointer(object)))
    }

    func testInFlightCoalescerLockWordOffset() {
        let coalescer = InFlightCoalescer<String, Int>()
        XCTAssertEqual(coalescer._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(coalescer)))
    }
}
