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
//
// Time is a whole number of nanoseconds in 64 bits (`Nanoseconds`), so that adding durations
// is exact. Nothing is ever clamped: a time the clock cannot hold is a misuse that stops the
// program with a message (`TimeMisuse`) when a test asks the clock to reach it, and a due time
// the clock cannot hold means never, as an infinite delay does, so no work ever runs early.

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
///
/// **Exact time.** The clock counts whole nanoseconds, from −2^63 to 2^63 − 1 (about ±292
/// years: −9,223,372,036.854775808 s to 9,223,372,036.854775807 s). Every time and duration
/// given in seconds is rounded to the nearest nanosecond on its own (halfway cases away from
/// zero) before it is used, and durations then add exactly:
/// - `advance(by: 0.1)` three times is exactly `advance(by: 0.3)`;
/// - `schedule(after: d)` then `advance(by: d)` always runs the work, whatever `d` and `now`;
/// - a step below half a nanosecond does not move the clock, however often it is taken:
///   `advance(by: 1e-10)` ten times leaves `now` where it was (a nanosecond is the unit);
/// - `now` and `nextDueTime` convert the count back to seconds, which is exact below 2^53
///   nanoseconds (about 104 days) and the nearest `Double` beyond.
///
/// Work whose due time is past the last time the clock can hold (a delay of 1e12 s, or
/// 9e9 s from a `now` of 1e9 s) is never due: as with an infinite or NaN delay, nothing is
/// scheduled and the closure is released at once, so no work ever runs earlier than asked.
/// Asking the clock itself to go where it cannot (`TestScheduler(now: .nan)`,
/// `advance(by: 1e300)`, `advance(by: .never)`, `advance(to: .infinity)`) stops the program
/// with a precondition failure naming the call, rather than moving time somewhere else.
public final class TestScheduler: PromiseScheduler {
    private let state: Locked<State>

    /// A scheduler whose clock reads `now` seconds (0 by default, rounded to the nearest
    /// nanosecond) and has nothing scheduled.
    ///
    /// `now` must be a number within the clock's range (about ±292 years, see "Exact time"
    /// above): NaN, an infinity or a time beyond the range stops the program with a
    /// precondition failure naming it.
    public init(now: TimeInterval = 0) {
        state = Locked(State(now: required(Nanoseconds.start(now))))
    }

    /// The virtual time, in seconds: where the last `advance(by:)`, `advance(to:)` or
    /// `run()` left it, or the due time of the item running now (whole nanoseconds, see
    /// "Exact time").
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

    /// Schedules `work` to run `seconds` after `now` (rounded to the nearest nanosecond), when
    /// the scheduler's time reaches it.
    ///
    /// Zero or a negative `seconds` means now: the work runs at the next `advance(by:)` (even
    /// `advance(by: 0)`), `advance(to:)` or `run()`, never inside this call. An infinite or
    /// NaN `seconds` means never: nothing is scheduled and `work` is released at once; so does
    /// a delay whose due time is past the last time the clock can hold (see "Exact time"),
    /// which would otherwise run early.
    public func schedule(after seconds: TimeInterval, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
        // The package's rule for delays: NaN is never (`max(0, .nan)` would be now), as is infinity.
        guard let seconds = scheduledDelaySeconds(seconds), let delay = Nanoseconds(roundingSeconds: seconds) else {
            return neverScheduledWork
        }
        guard let number = state.withLock({ $0.add(work, after: delay) }) else { return neverScheduledWork }
        return Item(scheduler: self, number: number)
    }

    /// Moves time forward by `seconds` (rounded to the nearest nanosecond), running every item
    /// that falls due on the way (see `advance(to:)`).
    ///
    /// `seconds` must be a number, zero or more, and `now + seconds` within the clock's range
    /// (see "Exact time"): a negative, NaN or infinite duration, or one that would carry time
    /// past about 292 years, stops the program with a precondition failure naming it (time
    /// does not go back, nor jump to another time than asked; use `run()` to run everything).
    /// `advance()` (zero) runs what is due now.
    public func advance(by seconds: TimeInterval = 0) {
        let delay = required(Nanoseconds.duration(seconds, call: "advance(by: \(seconds))"))
        let target = required(state.withLock { $0.now.advanced(by: delay, call: "advance(by: \(seconds))") })
        advance(toNanoseconds: target)
    }

    /// Moves time forward by `interval`, exactly (see `advance(by:)`).
    ///
    /// `.never` stops the program with a precondition failure naming it, as a negative interval
    /// or one that would carry time past the clock's range does: time cannot reach never; use
    /// `run()` to run everything scheduled.
    public func advance(by interval: DispatchTimeInterval) {
        let delay = required(Nanoseconds.duration(interval))
        let target = required(state.withLock { $0.now.advanced(by: delay, call: "advance(by: \(interval))") })
        advance(toNanoseconds: target)
    }

    /// Moves time forward to `time` (rounded to the nearest nanosecond), running every item due
    /// at or before it, in time order, synchronously on this thread, each with `now` set to its
    /// due time; then sets `now` to `time`. Items scheduled while this runs are run too if they
    /// fall due by `time`.
    ///
    /// `time` must be a number within the clock's range (see "Exact time") and not before
    /// `now`: otherwise a precondition failure names it.
    public func advance(to time: TimeInterval) {
        let target = required(Nanoseconds.time(time, call: "advance(to: \(time))"))
        let current = state.withLock { $0.now }
        precondition(
            target >= current,
            "TestScheduler.advance(to: \(time)) would move time back from \(current.seconds): time only moves forward")
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
struct Nanoseconds: Comparable {
    var value: Int64

    init(value: Int64) {
        self.value = value
    }

    /// `seconds` rounded to the nearest nanosecond (halfway cases away from zero); `nil` for
    /// NaN, an infinity, or a count of nanoseconds outside `Int64` (about ±292 years).
    init?(roundingSeconds seconds: TimeInterval) {
        let nanoseconds = (seconds * 1e9).rounded()
        // NaN fails both comparisons; 2^63 is the first `Double` past `Int64.max`.
        guard nanoseconds >= -0x1p63, nanoseconds < 0x1p63 else { return nil }
        value = Int64(nanoseconds)
    }

    var seconds: TimeInterval { Double(value) / 1e9 }

    /// This time moved by `delay`; `nil` if the result is past the clock's range.
    func adding(_ delay: Nanoseconds) -> Nanoseconds? {
        let (sum, overflow) = value.addingReportingOverflow(delay.value)
        return overflow ? nil : Nanoseconds(value: sum)
    }

    static func < (lhs: Nanoseconds, rhs: Nanoseconds) -> Bool { lhs.value < rhs.value }

    // MARK: Checking what a test asks for

    /// The start time of `TestScheduler(now:)`.
    static func start(_ now: TimeInterval) -> Swift.Result<Nanoseconds, TimeMisuse> {
        time(now, call: "init(now: \(now))")
    }

    /// A time to move the clock to, for `call`.
    static func time(_ seconds: TimeInterval, call: String) -> Swift.Result<Nanoseconds, TimeMisuse> {
        if seconds.isNaN {
            return .failure(TimeMisuse(call: call, problem: "a time must be a number of seconds, not NaN"))
        }
        guard let time = Nanoseconds(roundingSeconds: seconds) else {
            return .failure(TimeMisuse(call: call, problem: "the clock cannot hold this time, \(TimeMisuse.range)"))
        }
        return .success(time)
    }

    /// A duration to move the clock by, for `call`.
    static func duration(_ seconds: TimeInterval, call: String) -> Swift.Result<Nanoseconds, TimeMisuse> {
        if seconds.isNaN {
            return .failure(TimeMisuse(call: call, problem: "a duration must be a number of seconds, not NaN"))
        }
        if seconds < 0 {
            return .failure(TimeMisuse(call: call, problem: "time does not go back; the duration must not be negative"))
        }
        if seconds == .infinity {
            return .failure(TimeMisuse(call: call, problem: "time never reaches infinity; use run() to run everything"))
        }
        guard let duration = Nanoseconds(roundingSeconds: seconds) else {
            return .failure(
                TimeMisuse(call: call, problem: "the clock cannot move this far, \(TimeMisuse.range)"))
        }
        return .success(duration)
    }

    /// A `DispatchTimeInterval` to move the clock by, exactly.
    static func duration(_ interval: DispatchTimeInterval) -> Swift.Result<Nanoseconds, TimeMisuse> {
        let call = "advance(by: \(interval))"
        let (count, unit): (Int, Int64)
        switch interval {
        case .seconds(let seconds): (count, unit) = (seconds, 1_000_000_000)
        case .milliseconds(let milliseconds): (count, unit) = (milliseconds, 1_000_000)
        case .microseconds(let microseconds): (count, unit) = (microseconds, 1_000)
        case .nanoseconds(let nanoseconds): (count, unit) = (nanoseconds, 1)
        case .never:
            return .failure(TimeMisuse(call: call, problem: "time never reaches .never; use run() to run everything"))
        @unknown default:
            return .failure(TimeMisuse(call: call, problem: "this kind of interval is not known to the scheduler"))
        }
        if count < 0 {
            return .failure(TimeMisuse(call: call, problem: "time does not go back; the duration must not be negative"))
        }
        let (product, overflow) = Int64(count).multipliedReportingOverflow(by: unit)
        guard !overflow else {
            return .failure(TimeMisuse(call: call, problem: "the clock cannot move this far, \(TimeMisuse.range)"))
        }
        return .success(Nanoseconds(value: product))
    }

    /// This time moved by `delay`, for `call`.
    func advanced(by delay: Nanoseconds, call: String) -> Swift.Result<Nanoseconds, TimeMisuse> {
        guard let target = adding(delay) else {
            return .failure(
                TimeMisuse(
                    call: call,
                    problem: "from now (\(seconds) s) that would carry time past the clock's end, \(TimeMisuse.range)"))
        }
        return .success(target)
    }
}

/// A time or duration a test asked a `TestScheduler` for that the clock cannot reach: the
/// message of the precondition failure that stops the program.
struct TimeMisuse: Error, Equatable, CustomStringConvertible {
    /// The clock's range, as the messages say it.
    static let range =
        "which counts nanoseconds in 64 bits (-9223372036.854775808 s to 9223372036.854775807 s, about 292 years)"

    let description: String

    init(call: String, problem: String) {
        description = "TestScheduler.\(call): \(problem)"
    }
}

/// The value, or a precondition failure with the misuse's message.
private func required<T>(_ checked: Swift.Result<T, TimeMisuse>) -> T {
    switch checked {
    case .success(let value): return value
    case .failure(let misuse): preconditionFailure(misuse.description)
    }
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

    /// Schedules `work` `delay` from now; `nil` (nothing scheduled) if its due time is past the
    /// clock's range: never due.
    mutating func add(_ work: @escaping @Sendable () -> Void, after delay: Nanoseconds) -> UInt64? {
        guard let due = now.adding(delay) else { return nil }
        nextNumber += 1
        items[nextNumber] = work
        if heap.count > 2 * items.count + 64 {
            // Mostly cancelled entries: keep the live ones (a sorted array is a valid heap).
            heap = heap.filter { items[$0.number] != nil }.sorted { $0.runsBefore($1) }
        }
        push(Entry(due: due, number: nextNumber))
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
