import XCTest

@testable import CancellablePromiseKit
@testable import PromiseCore

/// The classes of this module that keep an inline lock word (the token) address
/// it through the object pointer (see PromiseCore's Lock.swift): the offset must match where
/// Swift stores their first stored property.
final class LockWordLayoutTests: XCTestCase {
    func testCancellationTokenLockWordOffset() {
        let token = CancellationRequest().token
        XCTAssertEqual(token._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(token)))
    }
}
