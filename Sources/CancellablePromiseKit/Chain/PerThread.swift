#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One `Value` per thread, made on the thread's first use and released when the thread exits:
/// the work lists of the loops that replace recursion (`LinkRelease`, `TokenCompletions`).
final class PerThread<Value: AnyObject>: @unchecked Sendable {
    // @unchecked: `key` and `make` are immutable; each thread only ever sees its own value.
    private let key: pthread_key_t
    private let make: @Sendable () -> Value

    /// `name` names the user in the precondition message if the system has no key left.
    init(_ name: StaticString, _ make: @escaping @Sendable () -> Value) {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            #if canImport(Darwin)
            Unmanaged<AnyObject>.fromOpaque(pointer).release()
            #else
            if let pointer { Unmanaged<AnyObject>.fromOpaque(pointer).release() }
            #endif
        }
        precondition(status == 0, "\(name): pthread_key_create failed (\(status))")
        self.key = key
        self.make = make
    }

    /// This thread's value.
    var value: Value {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<Value>.fromOpaque(pointer).takeUnretainedValue()
        }
        let value = make()
        pthread_setspecific(key, Unmanaged.passRetained(value as AnyObject).toOpaque())
        return value
    }
}
