import XCTest

@testable import CancellablePromiseKit
@testable import PromiseCore

/// The chain storage keeps an inline lock word and addresses it through the object pointer (see
/// PromiseCore's Lock.swift): the offset must match where Swift stores its first stored property.
final class LockWordLayoutTests: XCTestCase {
    func testCancelStorageLockWordOffset() {
        let storage = CancelContext().storage
        XCTAssertEqual(storage._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(storage)))
    }

    /// The handle count, updated atomically through its address, is the stored property after
    /// the lock word.
    func testCancelStorageHandleCountOffset() {
        let storage = CancelContext().storage
        let addresses = storage._handleWordAddresses()
        XCTAssertEqual(addresses.stored, addresses.computed)
    }
}
