import Dispatch
import Foundation
import PromiseCore

// Virtual time for tests. The scheduler is a clock that only moves when a test says so, and a
// queue of work ordered by due time, then by the order it was scheduled in. Moving the clock
// runs what fell due, one item at a time: each item is taken out under the lock, with the
// clock set to its due time, and run after the lock is released, so work may schedule, cancel
// or advance again.
//
// Items live in a dictionary by number (what `cancel()` removes, releasing the closure at
// once) and in a binary heap of (due time, number) entries; a cancelled item's heap entry is
// dropped when it reaches the top.

/// A scheduler with virtual time, for testing code that waits (`after`, `timeout`, `retry`'s
/// delays, anything that takes a `PromiseScheduler`) without waiting.
///
/// Time stands still until the test moves it: `advance(by:)` and `advance(to:)` move
/// `now` forward and run the work that falls due, in time order (items due at the same time
/// in the order they were scheduled), **synchronously, on the calling thread**, each with
/// `now` set to its due time. Work scheduled while advancing runs in the same call if it
/// falls due before the target time. `run()` runs everything until nothing is scheduled.
///
/// ```swift
/// let scheduler = TestScheduler()
/// let slow = Promise<Int>.pending().promise.timeout(seconds: 10, scheduler: scheduler)
///
/// scheduler.advance(by: 9.9)
/// XCTAssertTrue(slow.isPending)
/// scheduler.advance(by: 0.1)
/// XCTAssertTrue(slow.error is PromiseTimeoutError)   // settled on this thread, no waiting
/// ```
///
/// Handlers chained with the default `on:` still run on the main queue: use `on: nil` in the
/// code under test, or look at the promise itself (`value`, `error`, `isPending`) after
/// advancing, which settles synchronously.
///
/// Thread-safe: schedule, cancel and read `now` from any thread. No lock is held while work
/// runs. Advance from one thread at a time: two threads advancing at once run the due work
/// between them, each item once, but not in one time order.
///
/// Cancelling a scheduled item (`ScheduledWork/cancel()`) removes it and releases its closure
/// at once, on the cancelling thread; `pendingCount` no longer counts it. The scheduler
/// holds its items' closures until they run or are cancelled; an item holds the scheduler
/// weakly.
public final class TestScheduler: PromiseScheduler {
    private let state: Locked<State>

    /// A scheduler whose clock reads `now` seconds (0 by default) and has nothing scheduled.
    public init(now: TimeInterval = 0) {
        precondition(now.isFinite, "TestScheduler(now:) needs a finite time, got \(now)")
        state = Locked(State(now: Nanoseconds(seconds: now)))
    }

    /// The virtual time, in seconds: where the last `advance(by:)`, `advance(to:)` or
    /// `run()` left it, or the due time of the item running now.
    public var now: TimeInterval {
        state.withLock { $0.now.seconds }
    }

    /// How many scheduled items have neither run nor been cancelled.
    public var pendingCount: Int {
        state.withLock { $0.items.count }
    }

    /// When the next pending item is due, in the scheduler's time; `nil` if nothing is pending.
    public var nextDueTime: TimeInterval? {
        state.withLock { $0.nextDue()?.seconds }
    }

    /// Schedules `work` to run `seconds` after `now`, when the scheduler's time reaches it.
    ///
    /// Zero or a negative `seconds` means now: the work runs at the next `advance(by:)` (even
    /// `advance(by: 0)`), `advance(to:)` or `run()`, never inside this call. An infinite or
    /// NaN `seconds` means never: nothing is scheduled and `work` is released at once.
    public func schedule(after seconds: TimeInterval, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
        guard seconds < .infinity else { return neverScheduledWork }
        let delay = Nanoseconds(seconds: max(0, seconds))
        let number = state.withLock { $0.add(work, after: delay) }
        return Item(scheduler: self, number: number)
    }

    /// Moves time forward by `seconds`, running every item that falls due on the way (see
    /// `advance(to:)`).
    ///
    /// `seconds` must be zero or more and finite: a negative or NaN duration stops the program
    /// with a precondition failure naming it (time does not go back; use `run()` to run
    /// everything). `advance()` (zero) runs what is due now.
    public func advance(by seconds: TimeInterval = 0) {
        precondition(
            seconds >= 0 && seconds.isFinite,
            "TestScheduler.advance(by:) needs a finite, non-negative number of seconds, got \(seconds)")
        let target = state.withLock { $0.now.adding(Nanoseconds(seconds: seconds)) }
        advance(toNanoseconds: target)
    }

    /// Moves time forward by `interval` (see `advance(by:)`). `.never` is a precondition
    /// failure: use `run()`.
    public func advance(by interval: DispatchTimeInterval) {
        advance(by: interval.promiseSeconds)
    }

    /// Moves time forward to `time`, running every item due at or before it, in time order,
    /// synchronously on this thread, each with `now` set to its due time; then sets `now`
    /// to `time`. Items scheduled while this runs are run too if they fall due by `time`.
    ///
    /// `time` must be finite and not before `now`: otherwise a precondition failure names it.
    public func advance(to time: TimeInterval) {
        precondition(time.isFinite, "TestScheduler.advance(to:) needs a finite time, got \(time)")
        let target = Nanoseconds(seconds: time)
        let current = state.withLock { $0.now }
        precondition(
            target >= current, "TestScheduler.advance(to: \(time)) would move time back from \(current.seconds)")
        advance(toNanoseconds: target)
    }

    /// Runs every pending item in time order, moving `now` to each one's due time, until
    /// nothing is scheduled, including the items scheduled meanwhile. Work that always
    /// schedules more work (a timer that re-arms itself) makes this call never return: advance
    /// by a duration instead.
    public func run() {
        while let work = state.withLock({ $0.takeNext(dueBy: nil) }) {
            work()
        }
    }

    private func advance(toNanoseconds target: Nanoseconds) {
        while let work = state.withLock({ $0.takeNext(dueBy: target) }) {
            work()
        }
        state.withLock { $0.moveForward(to: target) }
    }

    fileprivate func cancel(_ number: UInt64) {
        // The closure is released here, after the lock.
        _ = state.withLock { $0.items.removeValue(forKey: number) }
    }
}

// MARK: - Items

/// The handle of a scheduled item.
private final class Item: ScheduledWork, @unchecked Sendable {
    // @unchecked: `scheduler` is written once, in `init`, and only loaded afterwards (the
    // runtime loads weak references atomically).
    private weak var scheduler: TestScheduler?
    private let number: UInt64

    init(scheduler: TestScheduler, number: UInt64) {
        self.scheduler = scheduler
        self.number = number
    }

    func cancel() {
        scheduler?.cancel(number)
    }
}

// MARK: - State

/// Virtual time: whole nanoseconds, so that `advance(by: 0.1)` three times is exactly
/// `advance(by: 0.3)`.
private struct Nanoseconds: Comparable {
    var value: Int64

    init(value: Int64) {
        self.value = value
    }

    /// `seconds` rounded to the nearest nanosecond, kept within about ±292 years.
    init(seconds: TimeInterval) {
        let nanoseconds = (seconds * 1e9).rounded()
        if nanoseconds >= 9.2e18 {
            value = 9_200_000_000_000_000_000
        } else if nanoseconds <= -9.2e18 {
            value = -9_200_000_000_000_000_000
        } else {
            value = Int64(nanoseconds)
        }
    }

    var seconds: TimeInterval { Double(value) / 1e9 }

    func adding(_ other: Nanoseconds) -> Nanoseconds {
        let (sum, overflow) = value.addingReportingOverflow(other.value)
        return Nanoseconds(value: overflow ? Int64.max : sum)
    }

    static func < (lhs: Nanoseconds, rhs: Nanoseconds) -> Bool { lhs.value < rhs.value }
}

private struct State {
    struct Entry {
        let due: Nanoseconds
        let number: UInt64

        func runsBefore(_ other: Entry) -> Bool {
            due < other.due || (due == other.due && number < other.number)
        }
    }

    var now: Nanoseconds
    var nextNumber: UInt64 = 0
    /// The pending items' closures, by number.
    var items: [UInt64: @Sendable () -> Void] = [:]
    /// A min-heap of every pending item's entry, and of cancelled items' entries not yet dropped.
    var heap: [Entry] = []

    init(now: Nanoseconds) {
        self.now = now
    }

    mutating func add(_ work: @escaping @Sendable () -> Void, after delay: Nanoseconds) -> UInt64 {
        nextNumber += 1
        items[nextNumber] = work
        if heap.count > 2 * items.count + 64 {
            // Mostly cancelled entries: keep the live ones (a sorted array is a valid heap).
            heap = heap.filter { items[$0.number] != nil }.sorted { $0.runsBefore($1) }
        }
        push(Entry(due: now.adding(delay), number: nextNumber))
        return nextNumber
    }

    /// The due time of the first pending item.
    mutating func nextDue() -> Nanoseconds? {
        dropCancelled()
        return heap.first?.due
    }

    /// Takes the first pending item if it is due by `limit` (any, with `nil`), and sets the
    /// clock to its due time.
    mutating func takeNext(dueBy limit: Nanoseconds?) -> (@Sendable () -> Void)? {
        dropCancelled()
        guard let first = heap.first else { return nil }
        if let limit, limit < first.due { return nil }
        popFirst()
        if now < first.due { now = first.due }
        return items.removeValue(forKey: first.number)
    }

    mutating func moveForward(to target: Nanoseconds) {
        if now < target { now = target }
    }

    private mutating func dropCancelled() {
        while let first = heap.first, items[first.number] == nil {
            popFirst()
        }
    }

    private mutating func push(_ entry: Entry) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].runsBefore(heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func popFirst() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var first = parent
            if left < heap.count, heap[left].runsBefore(heap[first]) { first = left }
            if right < heap.count, heap[right].runsBefore(heap[first]) { first = right }
            guard first != parent else { return }
            heap.swapAt(parent, first)
            parent = first
        }
    }
}
