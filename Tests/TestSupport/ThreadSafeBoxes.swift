import Foundation

// Small thread-safe boxes for what a test records from other threads, shared by every test
// target. Each class keeps its state behind its `NSLock` (hence `@unchecked Sendable`).

/// A counter safe to bump from any thread.
public final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    public init() {}

    public var value: Int { lock.withLock { count } }

    @discardableResult
    public func increment() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
}

/// A flag safe to raise from any thread.
public final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var raised = false

    public init() {}

    public var value: Bool { lock.withLock { raised } }
    public func raise() { lock.withLock { raised = true } }
}

/// A list safe to append to from any thread, in the order the values were appended.
public final class Recorder<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var elements: [Element] = []

    public init() {}

    public var all: [Element] { lock.withLock { elements } }
    public func append(_ element: Element) { lock.withLock { elements.append(element) } }
}

/// A value safe to read and write from any thread.
public final class SendableBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    public init(_ value: Value) { stored = value }

    public var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// Hands a non-Sendable value to a closure the test knows runs safely.
public struct UncheckedBox<Value>: @unchecked Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
}
