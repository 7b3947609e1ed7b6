import XCTest

@testable import PromiseCore

/// The inline lock word is addressed through the object pointer (see Lock.swift): its offset
/// must match where Swift actually stores the first property of a root class.
final class LockWordTests: XCTestCase {
    func testLockOffset() {
        let cell = Locked(0)
        XCTAssertEqual(cell._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(cell)))
    }

    func testLockedSerialisesAccessFromManyThreads() {
        let cell = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10_000 { cell.withLock { $0 += 1 } }
        }
        XCTAssertEqual(cell.withLock { $0 }, 80_000)
    }
}
