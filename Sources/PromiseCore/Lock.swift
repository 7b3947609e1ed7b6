internal import CPromiseLock

#if canImport(Darwin)
import Darwin
#elseif os(Linux)
// The lock word and its operations are CPromiseLock's (imported above on every platform).
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
// from ThreadSanitizer. So a promise's lock word is the *first stored property of a root class*
// and is addressed through the object pointer: a Swift object is a header of two words followed
// by its stored properties in declaration order. `LockWordTests` checks the offset on every
// platform the suite runs on. The other lock-carrying objects hold a `LockStorage` (below),
// which needs no such assumption, at the cost of one allocation more.
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

// The lock operations on a lock word's address, for the objects of this module that keep one:
// `Promise` (inline, addressed through the object) and `LockStorage` (the element of a
// `ManagedBuffer`). Other modules reach theirs only through the object (`lockWordLock(of:)`,
// below).

/// Takes the lock at `pointer`, waiting (on Linux: spinning briefly, then sleeping) while
/// another thread holds it. Not recursive.
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

/// Releases the lock at `pointer`; only by the thread that holds it.
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

/// Releases what the platform keeps for the (unlocked) lock at `pointer`; once, before its
/// memory goes. Nothing to do for an `os_unfair_lock` or a futex word.
@inline(__always)
func lockWordDestroy(_ pointer: UnsafeMutablePointer<LockWord>) {
    #if !canImport(Darwin) && !os(Linux)
    pthread_mutex_destroy(pointer)
    #endif
}

// MARK: - Inline lock words of other objects

// The one way, besides `Promise`'s own, to keep a lock word inline in an object: for the
// classes where a `LockStorage` (below) costs too much. The rule is `Promise`'s: a `LockWord()`
// declared as the *first stored property of a root class* (`private var lockWord = LockWord()`),
// reached only through the three functions below, destroyed in `deinit` with
// `lockWordDestroy(of:)`, and checked by layout tests: `LockWordTests` here compares the address
// `lockWordPointer` computes with the stored property's own (`Locked._storedLockWordAddress()`,
// the one class that exposes it), and `LockWordLayoutTests` checks, for every other class under
// this rule, that it is a root class whose first stored property is its `LockWord` (by
// reflection), so the same offset holds for it. One more user keeps it as the first field of the
// header of a `ManagedBuffer` subclass, whose header is that root class's one stored property:
// the cancellation layer's chain storage (`CancelStorage`; `LockWordLayoutTests` compares the
// header's address with the one computed here).
// The state it guards is `@exclusivity(unchecked)`, accessed only between `lockWordLock(of:)` and
// `lockWordUnlock(of:)`. Its users, and what a `LockStorage` cost them (callgrind, instructions per
// operation, inline → `LockStorage`):
// - `CancellationToken`: one object per request, per derived token, per bridged task; one
//   allocation more each: a request made, given an `onCancel` handler and cancelled
//   3,861 → 4,698 (+22 %), a derived token made and dropped 4,637 → 5,464 (+18 %).
// - `Locked`, made and used from every module: `Promise(cancellationToken:)` made and fulfilled
//   14,785 → 15,957 (+8 %), a chain stored in a `CancelBag` and cancelled 5,557 → 6,162 (+11 %).
// The last one is the cost of calls from other modules, where a `LockStorage` is not specialized.
// A `CancelBag`'s state keeps one too (it was a `Locked`, whose generic calls are not specialized
// either): a chain stored in a new bag and cancelled, 8,051 → 6,046 with the bag's other
// changes of the same commit (its stored chains' listeners hold the state strongly, and
// `cancelAll()` takes the table out whole). So does shared work's host (`SharedWorkHost`, one
// per shared promise and per key in flight of a coalescer): a follower made and cancelled costs
// 8,883 with a `Locked`, 8,772 with a `LockStorage` reached through its pointer, 8,792 inline
// (one allocation less, and `LockStorage` is internal to this module).

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

// MARK: - Atomics

/// Adds `delta` to the word at `word` atomically, with acquire-release ordering, and returns
/// the new value: the package's one atomic read-modify-write outside the lock words (a chain's
/// handle count, which the last of its promises takes to zero without the chain's lock).
///
/// It is C (`CPromiseLock`'s `cpk_counter_add`) on Darwin and Linux alike, and a call rather
/// than an inlined instruction on purpose: ThreadSanitizer sees every update as an atomic
/// access, which it does not for an access through a Swift pointer, and the package needs no
/// dependency (`Synchronization.Atomic` needs macOS 15 / iOS 18 and a stable address of its own).
@inline(__always)
package func atomicAdd(_ word: UnsafeMutablePointer<Int>, _ delta: Int) -> Int {
    cpk_counter_add(word, delta)
}

// MARK: - Lock storage

// A value with its lock, for the objects that are not `Promise`: one heap object that holds the
// value and the lock word, without any layout assumption. It is a `ManagedBuffer` whose header is
// the value and whose one element is the lock word: a buffer's elements have a stable address
// (`withUnsafeMutablePointerToElements` yields it, with no temporary copy), which a stored
// property of a class has not. The value is the header rather than the element because the
// header can also be read through `header`, an access the pointer functions do not check for
// exclusivity against; nothing here reads `header`, and the lock word is never reached that way.
//
// An object of PromiseCore that guards state with a lock may hold a `let` of
// `LockStorage<State>`: one allocation more than a lock word stored inline (the dispatch timer
// does). `LockStorage` is internal: its methods cannot be `@inlinable` (their bodies reach the
// lock functions, whose C module PromiseCore imports internally), so another module would call
// them, generic and unspecialized, on every access; the other modules use `Locked` (the same
// cost) or an inline lock word (above), which `lockWordLock(of:)` takes without a generic call.
//
// MARK: - The one borrowed lock
//
// Every lock guards the state of the object that holds it, and only that object's code takes
// it, with one exception: a promise lends its own lock to `CancellablePromise`, for the context
// that wrapper makes on first use for a promise made settled (`Promise._withLockForWrapper(_:)`,
// Promise+Attachment.swift). The wrapper's body only reads or sets that one field: it takes no
// other lock and touches nothing of the promise meanwhile. (A lock of its own would cost a
// wrapper one allocation, or a word, that the chain's common case never uses.)

/// A value and the lock that guards it, in one object. Every access to the value goes through
/// `withLockedValue` (or sits between `lock()` and `unlock()`); closures run on the calling
/// thread, with the lock held, and must not call user code or take the same lock again.
final class LockStorage<Value>: ManagedBuffer<Value, LockWord> {
    /// A storage holding `value`, unlocked.
    @inlinable
    static func create(value: Value) -> LockStorage<Value> {
        let buffer = create(minimumCapacity: 1) { _ in value }
        // `create(minimumCapacity:makingHeaderWith:)` makes an instance of the class it is
        // called on, this one.
        let storage = unsafeDowncast(buffer, to: LockStorage<Value>.self)
        storage.withUnsafeMutablePointerToElements { $0.initialize(to: LockWord()) }
        return storage
    }

    @inlinable
    deinit {
        withUnsafeMutablePointerToElements { lockWordDestroy($0) }
    }

    /// Takes the lock. Pair with `unlock()` on the same thread; prefer `withLockedValue`.
    @inlinable @inline(__always)
    func lock() {
        withUnsafeMutablePointerToElements { lockWordLock($0) }
    }

    /// Releases the lock taken by `lock()`.
    @inlinable @inline(__always)
    func unlock() {
        withUnsafeMutablePointerToElements { lockWordUnlock($0) }
    }

    /// Runs `body` on the value with the lock held (on the calling thread), and returns what it
    /// returns. The lock is released when `body` returns or throws.
    @inlinable @inline(__always)
    func withLockedValue<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        try withUnsafeMutablePointers { value, word in
            lockWordLock(word)
            defer { lockWordUnlock(word) }
            return try body(&value.pointee)
        }
    }
}

/// A small lock-protected cell for state that is not on a hot path (configuration, aggregates,
/// cancel contexts in other modules). Its lock word is inline, by the rule above (its first
/// stored property): `Locked` is made and used from other modules, where a `LockStorage` is not
/// specialized (see `LockStorage`).
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
        lockWordDestroy(of: self)
    }

    /// Runs `body` with exclusive access to the value (on the calling thread, the lock held).
    /// `body` must not call user code.
    @inline(__always)
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lockWordLock(of: self)
        defer { lockWordUnlock(of: self) }
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
