import TestSupport
import XCTest

@testable import PromiseCore

#if os(Linux)
import CPromiseLock
#endif

/// The inline lock word is addressed through the object pointer (see Lock.swift): its offset
/// must match where Swift actually stores the first property of a root class.
final class LockWordTests: XCTestCase {
    func testLockOffset() {
        let cell = Locked(0)
        XCTAssertEqual(cell._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(cell)))
    }

    /// A `LockStorage` hands out the same addresses for its value and its lock word on every
    /// access (they are the header and the element of a `ManagedBuffer`, not stored properties
    /// that an access could copy), and the value it was made with.
    func testLockStorageAddressesAreStable() {
        let storage = LockStorage<Int>.create(value: 7)
        let first = storage.withUnsafeMutablePointers { (UnsafeMutableRawPointer($0), UnsafeMutableRawPointer($1)) }
        let second = storage.withUnsafeMutablePointers { (UnsafeMutableRawPointer($0), UnsafeMutableRawPointer($1)) }
        XCTAssertEqual(first.0, second.0)
        XCTAssertEqual(first.1, second.1)
        XCTAssertEqual(storage.withLockedValue { $0 }, 7)
    }

    /// `atomicAdd` returns the value after the addition.
    func testAtomicAddReturnsTheNewValue() {
        let word = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        defer { word.deallocate() }
        word.initialize(to: 1)
        XCTAssertEqual(atomicAdd(word, 2), 3)
        XCTAssertEqual(atomicAdd(word, -3), 0)
        XCTAssertEqual(word.pointee, 0)
    }

    /// `Promise` addresses its lock word and its value buffer (the first two stored properties)
    /// through the object pointer too.
    func testPromiseFieldOffsets() {
        let promise = Promise<Int>._makePending()
        let stored = promise._storedFieldAddresses()
        XCTAssertEqual(stored.lockWord, UnsafeMutableRawPointer(lockWordPointer(promise)))
        XCTAssertEqual(stored.valueBuffer, promise._valueBufferAddress())
        let step = promise.map(on: nil) { "\($0)" }
        XCTAssertEqual(step._storedFieldAddresses().valueBuffer, step._valueBufferAddress())
    }

    /// Values stored inline and values too large for the buffer (kept in an allocation) are
    /// copied out intact and destroyed with their promise.
    func testPromiseValueStorage() {
        final class Token {}
        struct Large { var a: Token; var b = 1, c = 2, d = 3, e = "large" }
        weak var weakInline: Token?
        weak var weakLarge: Token?
        do {
            let inline = Token()
            weakInline = inline
            let large = Large(a: Token())
            weakLarge = large.a
            let (p1, r1) = Promise<Token>.pending()
            let (p2, r2) = Promise<Large>.pending()
            let m2 = p2.map(on: nil) { $0 }
            r1.fulfill(inline)
            r2.fulfill(large)
            XCTAssertTrue(p1.value === inline)
            XCTAssertTrue(m2.value?.a === large.a)
            XCTAssertEqual(m2.value?.e, "large")
            XCTAssertEqual(Promise.value(large).value?.d, 3)
            XCTAssertEqual(Promise<(Int, Int, Int, Int)>.value((1, 2, 3, 4)).value?.3, 4)
            XCTAssertNotNil(Promise<String>(error: PMKError.badInput).error)
        }
        XCTAssertNil(weakInline)
        XCTAssertNil(weakLarge)
    }

    func testLockedSerialisesAccessFromManyThreads() {
        let cell = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10_000 { cell.withLock { $0 += 1 } }
        }
        XCTAssertEqual(cell.withLock { $0 }, 80_000)
    }

    /// Threads that find the lock held long enough to stop spinning go to sleep (on Linux, on
    /// the futex: the word then reads 2) and are woken one by one as it is released: no increment
    /// is lost and no thread sleeps for ever.
    func testContendedLockSleepsAndWakesEveryWaiter() {
        let cell = Locked(0)
        let holding = DispatchSemaphore(value: 0)
        let sawSleeper = Flag()
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            cell.withLock { value in
                holding.signal()
                // Holds the lock until a waiter sleeps (or 10 s pass, and the check below fails).
                #if os(Linux)
                let word = lockWordPointer(cell)
                let deadline = DispatchTime.now() + 10
                // Real clock: polls every 1 ms until a waiter sleeps on the futex, which nothing signals.
                while cpk_lock_state(word) != 2 && DispatchTime.now() < deadline { usleep(1_000) }
                if cpk_lock_state(word) == 2 { sawSleeper.raise() }
                #else
                // Real clock: no lock state tells that a waiter sleeps here, so the lock is held for 50 ms.
                usleep(50_000)
                sawSleeper.raise()
                #endif
                value += 1
            }
        }
        // Real threads: the waiters must start while the lock is held, on a thread of its own.
        holding.wait()
        for _ in 0..<6 {
            DispatchQueue.global().async(group: group) {
                for _ in 0..<2_000 { cell.withLock { $0 += 1 } }
            }
        }
        // Real clock: the deadline that turns a waiter never woken into a failure instead of a hang.
        guard group.wait(timeout: .now() + 60) == .success else {
            return XCTFail("a thread waiting for the lock was never woken")
        }
        XCTAssertTrue(sawSleeper.value, "no waiter went to sleep: the contended path was not exercised")
        XCTAssertEqual(cell.withLock { $0 }, 12_001)
    }
}
