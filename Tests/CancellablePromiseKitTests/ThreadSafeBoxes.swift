import Foundation

// Small thread-safe boxes for what a test records from other threads. Test targets cannot import
// one another, so this same file stands in each test target: keep the copies identical.

/// A counter safe to bump from any thread.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    init() {}

    var value: Int { lock.withLock { count } }

    @discardableResult
    func increment() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
}

/// A flag safe to raise from any thread.
final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var raised = false

    init() {}

    var value: Bool { lock.withLock { raised } }
    func raise() { lock.withLock { raised = true } }
}

/// A list safe to append to from any thread, in the order the values were appended.
final class Recorder<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var elements: [Element] = []

    init() {}

    var all: [Element] { lock.withLock { elements } }
    func append(_ element: Element) { lock.withLock { elements.append(element) } }
}

/// A value safe to read and write from any thread.
final class SendableBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) { stored = value }

    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// Hands a non-Sendable value to a closure the test knows runs safely.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
