import CancellablePromiseKit
import Dispatch
import Foundation

/// One line of a scenario's timeline: what happened to whom, in milliseconds since the start.
public struct TimelineEvent: Sendable, CustomStringConvertible {
    /// What kind of thing happened; tests check the order of kinds, not the wording.
    public enum Kind: String, Sendable {
        /// A task or request was started.
        case started
        /// A task finished with a value.
        case finished
        /// A task failed with an error of its own (not a cancellation).
        case failed
        /// Someone called `cancel()`.
        case cancelRequested
        /// A task's cancel handler ran: the work itself was stopped.
        case cancelHandler
        /// A running body saw its step's token cancelled and stopped before its end.
        case stopped
        /// A promise was rejected because its chain was cancelled.
        case rejectedByCancel
        /// A `then`/`map`/`done` body ran.
        case body
        /// An observer (`ensure`, `catch(policy: .allErrors)`, `finally`) ran.
        case observer
        /// The scenario's outcome (a race's winner, a chain's result).
        case outcome
        /// A remark that explains the line above it.
        case note
    }

    /// Milliseconds since the timeline started.
    public let milliseconds: Int
    /// Who the event is about: a mirror, a sub-task, a chain…
    public let subject: String
    /// What happened.
    public let kind: Kind
    /// A short human explanation.
    public let message: String

    /// `  61 ms  us-east    answered …`
    public var description: String {
        let ms = String(milliseconds)
        let paddedMs = String(repeating: " ", count: max(0, 5 - ms.count)) + ms
        let paddedSubject = subject.padding(toLength: max(subject.count, 13), withPad: " ", startingAt: 0)
        return "\(paddedMs) ms  \(paddedSubject) \(message)"
    }
}

/// `CancellablePromiseError.cancelled` rather than `cancelled`: the timeline names the error type.
func describe(_ error: Error) -> String {
    let text = "\(error)"
    let type = "\(type(of: error))"
    return text.hasPrefix(type) ? text : "\(type).\(text)"
}

/// Collects a scenario's events in order and hands each one to a sink as it happens, and is
/// the scenario's clock: every delay of a scenario (simulated work, timers, keystrokes, the
/// end) is scheduled on ``scheduler``.
///
/// Thread-safe: tasks log from timer queues, cancel handlers from whichever thread calls
/// `cancel()`. The sink is called under the timeline's lock, so lines never interleave and
/// ``events`` has them in the order the sink saw them.
public final class Timeline: @unchecked Sendable {
    /// The clock of the scenario: the wall clock when the example runs, a test scheduler's
    /// virtual time in tests.
    public let scheduler: any PromiseScheduler
    private let start: TimeInterval
    private let lock = NSLock()
    private var recorded: [TimelineEvent] = []
    private let sink: @Sendable (TimelineEvent) -> Void

    /// A timeline on `scheduler`'s clock that passes every event to `sink` (by default:
    /// nowhere; read ``events``).
    public init(
        scheduler: any PromiseScheduler = DispatchScheduler.global,
        sink: @escaping @Sendable (TimelineEvent) -> Void = { _ in }
    ) {
        self.scheduler = scheduler
        self.start = scheduler.now
        self.sink = sink
    }

    /// Milliseconds since the timeline was created.
    public var now: Int {
        Int(((scheduler.now - start) * 1_000).rounded(.down))
    }

    /// Runs `work` after `milliseconds` on the scenario's clock.
    @discardableResult
    func schedule(after milliseconds: Int, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
        scheduler.schedule(after: Double(milliseconds) / 1_000, work)
    }

    /// A guarantee resolved after `milliseconds` on the scenario's clock.
    func after(milliseconds: Int) -> Guarantee<Void> {
        CancellablePromiseKit.after(seconds: Double(milliseconds) / 1_000, scheduler: scheduler)
    }

    /// Records an event at the current time.
    public func log(_ subject: String, _ kind: TimelineEvent.Kind, _ message: String) {
        lock.lock()
        defer { lock.unlock() }
        let event = TimelineEvent(milliseconds: now, subject: subject, kind: kind, message: message)
        recorded.append(event)
        sink(event)
    }

    /// Every event so far, in order.
    public var events: [TimelineEvent] {
        lock.lock()
        defer { lock.unlock() }
        return recorded
    }
}
