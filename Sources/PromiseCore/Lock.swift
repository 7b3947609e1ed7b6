#if canImport(Darwin)
import Darwin
#elseif os(Linux)
internal import CPromiseLock
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Locking without an allocation per lock.
//
// A promise must be created and fulfilled in about the cost of one allocation and one lock,
// so its lock lives inside the promise object itself. Swift gives no stable address for a
// stored property (an `inout` access may go through a temporary, and ThreadSanitizer reports
// concurrent `inout` accesses as races), and `Synchronization.Mutex` hides its contended path
// from ThreadSanitizer. So the lock word is the *first stored property of a root class* and is
// addressed through the object pointer: a Swift object is a header of two words followed by its
// stored properties in declaration order. `LockWordTests` checks the offset on every platform
// the suite runs on.
//
// On Apple platforms the lock word is an `os_unfair_lock` (one word). On Linux it is a 32-bit
// futex lock (the `CPromiseLock` target): `pthread_mutex_t` is 40 bytes there, a third of a
// pending promise, and costs a library call per lock and unlock and one more to destroy;
// the futex lock's uncontended paths are one inlined atomic instruction each (`pending()` +
// fulfil and a `map` link take two and three lock pairs). Elsewhere it is a `pthread_mutex_t`.

// `LockWord()` is unlocked: all platforms' static initialisers are zero bits.
#if canImport(Darwin)
/// The platform lock stored inline in promise objects.
package typealias LockWord = os_unfair_lock
#elseif os(Linux)
/// The lock stored inline in promise objects: a futex word, 0 when unlocked.
package typealias LockWord = UInt32
#else
/// The platform lock stored inline in promise objects.
package typealias LockWord = pthread_mutex_t
#endif

/// Creates an unlocked lock word.
@inline(__always)
func makeLockWord() -> LockWord {
    LockWord()
}

/// Offset of the first stored property of a root Swift class: two words of object header,
/// rounded up to the lock word's alignment.
@usableFromInline
let lockWordOffset: Int = {
    let header = 2 * MemoryLayout<UnsafeRawPointer>.size
    let align = MemoryLayout<LockWord>.alignment
    return (header + align - 1) / align * align
}()

/// Inline storage for a promise's value: the second stored property of `Promise`.
typealias ValueBuffer = (Int, Int, Int)

/// Offset of `Promise`'s value buffer, the stored property after the lock word.
@usableFromInline
let valueBufferOffset: Int = {
    let end = lockWordOffset + MemoryLayout<LockWord>.size
    let align = MemoryLayout<ValueBuffer>.alignment
    return (end + align - 1) / align * align
}()

/// Returns the address of the lock word stored as the first property of `object`'s root class.
@inline(__always)
func lockWordPointer(_ object: AnyObject) -> UnsafeMutablePointer<LockWord> {
    UnsafeMutableRawPointer(Unmanaged.passUnretained(object).toOpaque())
        .advanced(by: lockWordOffset)
        .assumingMemoryBound(to: LockWord.self)
}

@inline(__always)
func lockWordLock(_ pointer: UnsafeMutablePointer<LockWord>) {
    #if canImport(Darwin)
    os_unfair_lock_lock(pointer)
    #elseif os(Linux)
    cpk_lock(pointer)
    #else
    let rc = pthread_mutex_lock(pointer)
    assert(rc == 0, "pthread_mutex_lock failed: \(rc)")
    #endif
}

@inline(__always)
func lockWordUnlock(_ pointer: UnsafeMutablePointer<LockWord>) {
    #if canImport(Darwin)
    os_unfair_lock_unlock(pointer)
    #elseif os(Linux)
    cpk_unlock(pointer)
    #else
    let rc = pthread_mutex_unlock(pointer)
    assert(rc == 0, "pthread_mutex_unlock failed: \(rc)")
    #endif
}

@inline(__always)
func lockWordDestroy(_ pointer: UnsafeMutablePointer<LockWord>) {
    #if !canImport(Darwin) && !os(Linux)
    pthread_mutex_destroy(pointer)
    #endif
}

// The lock words of other modules' objects (the cancellation layer's storages and tokens):
// the same rule, a `LockWord()` as the first stored property of a root class, addressed through
// the object.

/// Locks the lock word stored as the first property of `object`'s root class.
@inline(__always)
package func lockWordLock(of object: AnyObject) {
    lockWordLock(lockWordPointer(object))
}

/// Unlocks the lock word stored as the first property of `object`'s root class.
@inline(__always)
package func lockWordUnlock(of object: AnyObject) {
    lockWordUnlock(lockWordPointer(object))
}

/// Destroys the lock word stored as the first property of `object`'s root class; in `deinit`.
@inline(__always)
package func lockWordDestroy(of object: AnyObject) {
    lockWordDestroy(lockWordPointer(object))
}

/// A small lock-protected cell for state that is not on a hot path (configuration, aggregates,
/// cancel contexts in other modules). The lock word is its first stored property.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: as `Synchronization.Mutex`, every access to `value` holds the lock word.
    private var word = makeLockWord()  // must stay the first stored property
    /// Guarded by the lock word, so no dynamic exclusivity check is needed (it would cost two
    /// runtime calls per access, on every read of `conf` for instance).
    @exclusivity(unchecked) private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    deinit {
        lockWordDestroy(lockWordPointer(self))
    }

    /// Runs `body` with exclusive access to the value. `body` must not call user code.
    @inline(__always)
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        let p = lockWordPointer(self)
        lockWordLock(p)
        defer { lockWordUnlock(p) }
        return try body(&value)
    }

    /// The address of the stored lock word as Swift sees it; used by tests to check the offset.
    func _storedLockWordAddress() -> UnsafeMutableRawPointer {
        withUnsafeMutablePointer(to: &word) { UnsafeMutableRawPointer($0) }
    }
}

/// Wraps a value that is handed between threads under the library's own synchronisation
/// (a lock or a dispatch hop), where the compiler cannot see that the transfer is safe.
package struct UncheckedSendable<Value>: @unchecked Sendable {
    // @unchecked: its purpose, for hand-overs the compiler cannot check (a queue hop, a lock).
    package var value: Value
    @inline(__always) package init(_ value: Value) { self.value = value }
}
