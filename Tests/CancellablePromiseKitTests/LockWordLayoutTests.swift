import XCTest

@testable import CancellablePromiseKit
@testable import PromiseCore

/// The classes of this module that keep an inline lock word address it through the object
/// pointer (see PromiseCore's Lock.swift): the offset must match where Swift stores their first
/// stored property.
final class LockWordLayoutTests: XCTestCase {
    func testCancellationTokenLockWordOffset() {
        let token = CancellationRequest().token
        XCTAssertEqual(token._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(token)))
    }
}

extension LockWordLayoutTests {
    func testAutoCancelInputsLockWordOffset() {
        let inputs = AutoCancelInputs([])
        XCTAssertEqual(inputs._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(inputs)))
    }
}

extension LockWordLayoutTests {
    func testSharedCancellablePromiseLockWordOffset() {
        let shared = CancellablePromise.value(1).shared()
        XCTAssertEqual(
            shared.storage._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(shared.storage)))
    }

    func testInFlightCoalescerLockWordOffset() {
        let coalescer = InFlightCoalescer<String, Int>()
        XCTAssertEqual(coalescer._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(coalescer)))
    }
}
