import Dispatch
import Foundation

// Time as a parameter: every API of the package that waits (`after`, `timeout`, `retry`'s
// delays) asks a `PromiseScheduler` to run a closure later instead of reading the wall clock
// itself. The default, `DispatchScheduler`, is the wall clock and a dispatch queue, as before;
// the `PromiseTesting` library's `TestScheduler` is virtual time that a test advances by hand.
//
// Intervals that are not numbers. Everywhere in the package an interval of NaN seconds means
// what `DispatchTime.now() + .nan` means to Dispatch (and so to PromiseKit's `after`): the same
// as an infinite one, a deadline that never comes.
//
// Intervals too long for a clock. The package's clocks count whole nanoseconds in 64 bits
// (Dispatch's deadlines, a `TestScheduler`'s virtual time), so a delay of 2^63 nanoseconds or
// more (about 292 years) cannot be represented. Clamping it to something shorter would run the
// work early; such a delay means never, as an infinite one does (`ScheduledDelay`).

/// When work scheduled after a delay runs, by the package's one rule for delays. Every
/// scheduler of the package (`DispatchScheduler`, `ClockScheduler`, `TestScheduler`) and every
/// API that waits (`after`, `timeout`, `retry`'s delays, a process's `killAfter`) reads a delay
/// through it, so that they all agree:
///
/// - zero or less: `now`, as soon as the scheduler runs work (never synchronously);
/// - NaN, infinite, or 2^63 nanoseconds (about 292 years) or more, longer than the package's
///   clocks can represent: `never`, and nothing is scheduled (the work would otherwise run
///   early, or at once: `max(0, .nan)` is 0);
/// - anything else: `after(_:)` that many seconds.
enum ScheduledDelay: Equatable, Sendable {
    /// As soon as the scheduler runs work.
    case now
    /// After this many seconds: more than zero, less than 2^63 nanoseconds.
    case after(TimeInterval)
    /// Never: nothing is scheduled.
    case never

    /// What a delay of `seconds` means.
    init(_ seconds: TimeInterval) {
        // NaN fails both comparisons: it must not fall through to `now`.
        if !(seconds * 1e9 < 0x1p63) {
            self = .never
        } else if seconds > 0 {
            self = .after(seconds)
        } else {
            self = .now
        }
    }

    /// The seconds to wait, zero or more; `nil` for never.
    var seconds: TimeInterval? {
        switch self {
        case .now: return 0
        case .after(let seconds): return seconds
        case .never: return nil
        }
    }
}

/// The seconds to wait for a delay of `seconds` by the package's one rule (`ScheduledDelay`):
/// zero or more, or `nil` for never. What the other modules read a delay through.
package func scheduledDelaySeconds(_ seconds: TimeInterval) -> TimeInterval? {
    ScheduledDelay(seconds).seconds
}

/// Runs closures after a delay, on a clock of its own: the wall clock (``DispatchScheduler``),
/// a Swift `Clock` (``ClockScheduler``), or virtual time that a test advances by hand
/// (`TestScheduler`, in the `PromiseTesting` library).
///
/// Every API of the package that waits takes one: `after(seconds:scheduler:)`,
/// `timeout(seconds:scheduler:)`, `retry(…scheduler:…)`. Without one they use
/// ``DispatchScheduler/global``.
///
/// ```swift
/// func poll(every seconds: TimeInterval, scheduler: any PromiseScheduler = DispatchScheduler.global)
///     -> Guarantee<Void>
/// {
///     after(seconds: seconds, scheduler: scheduler)
/// }
/// ```
///
/// A conforming type must be thread-safe: `schedule(after:_:)`, `now` and the returned work's
/// `cancel()` may be called from any thread.
public protocol PromiseScheduler: Sendable {
    /// The scheduler's current time, in seconds since an origin of its own choosing: only
    /// differences between two readings mean something.
    var now: TimeInterval { get }

    /// Runs `work` once, `seconds` from ``now``, and returns the handle that cancels it.
    ///
    /// Where `work` runs is the scheduler's to say (``DispatchScheduler``: on its queue). A
    /// `seconds` of zero or less means as soon as possible, but never synchronously inside this
    /// call; an infinite or NaN `seconds` means never (the scheduler may release `work` at once),
    /// and so does a delay longer than the scheduler's clock can represent: the package's
    /// schedulers count nanoseconds in 64 bits, so for them 2^63 nanoseconds (about 292 years,
    /// 9,223,372,036.85 s) or more is never. A scheduler never runs work earlier than asked.
    ///
    /// Cancelling the returned ``ScheduledWork`` before `work` has started unschedules it:
    /// `work` never runs, and the scheduler releases it (and what it captures).
    func schedule(after seconds: TimeInterval, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork
}

/// A closure scheduled on a ``PromiseScheduler``: `cancel()` unschedules it.
public protocol ScheduledWork: Sendable {
    /// Unschedules the work if it has not started: it never runs, and the scheduler releases
    /// it. A no-op once the work has started, and when called again. Safe from any thread,
    /// including from inside other scheduled work.
    func cancel()
}

// MARK: - Dispatch

/// The default scheduler: the wall clock (`DispatchTime`, the system's monotonic uptime) and a
/// dispatch timer that runs the work on ``queue``.
///
/// ```swift
/// after(seconds: 2, scheduler: DispatchScheduler(queue: .main)).done { showHint() }
/// ```
///
/// Cancelling a scheduled item cancels its dispatch timer: nothing stays registered with
/// Dispatch and the work is released on the cancelling thread, before `cancel()` returns.
public struct DispatchScheduler: PromiseScheduler {
    /// Where scheduled work runs.
    public let queue: DispatchQueue

    /// The scheduler every time-based API of the package uses unless it is given another: a
    /// global queue of the default quality of service.
    public static let global = DispatchScheduler()

    /// A scheduler that runs scheduled work on `queue` (a global queue by default).
    public init(queue: DispatchQueue = .global()) {
        self.queue = queue
    }

    /// Seconds of system uptime (`DispatchTime.now()`), which does not advance while the
    /// system sleeps, as Dispatch's own deadlines.
    public var now: TimeInterval {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    /// Runs `work` on ``queue`` once `seconds` have passed (as soon as possible for zero or
    /// less; never for an infinite or NaN `seconds`, nor for 2^63 nanoseconds or more, about
    /// 292 years, which Dispatch cannot represent: nothing is scheduled and `work` is released).
    public func schedule(after seconds: TimeInterval, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
        guard let delay = ScheduledDelay(seconds).seconds else { return NeverScheduledWork() }
        // A deadline past the end of the uptime clock is `DISPATCH_TIME_FOREVER`: never, too.
        return DispatchTimerWork(queue: queue, deadline: .now() + delay, work: work)
    }
}

/// The handle of work that never runs (scheduled after an infinite or NaN delay): it holds
/// nothing, and cancelling it does nothing.
struct NeverScheduledWork: ScheduledWork {
    func cancel() {}
}

/// A handle of work that never runs (see `NeverScheduledWork`), for schedulers in other modules.
package let neverScheduledWork: any ScheduledWork = NeverScheduledWork()

/// A one-shot dispatch timer. It keeps itself alive until it fires or is cancelled (the
/// source's handler holds it); either way it releases `work` as soon as it can: after it ran,
/// or at once, on the thread that cancels.
private final class DispatchTimerWork: ScheduledWork, @unchecked Sendable {
    // @unchecked: the source and the work are read and cleared only under their storage's lock.
    private struct Parts {
        let source: DispatchSourceTimer
        let work: @Sendable () -> Void
    }
    /// The source and the work until the timer fires or is cancelled, then `nil`; and their lock.
    private let parts: LockStorage<Parts?>

    init(queue: DispatchQueue, deadline: DispatchTime, work: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeTimerSource(queue: queue)
        parts = .create(value: Parts(source: source, work: work))
        // The handler holds this object (a cycle through the source) until `take()` breaks it.
        source.setEventHandler { [self] in
            guard let parts = take() else { return }
            parts.source.cancel()
            parts.work()
        }
        source.schedule(deadline: deadline)
        source.activate()
    }

    func cancel() {
        take()?.source.cancel()
    }

    private func take() -> Parts? {
        parts.withLockedValue { parts in
            let taken = parts
            parts = nil
            return taken
        }
    }
}

// MARK: - Clock

/// A scheduler on a Swift `Clock` (`ContinuousClock`, `SuspendingClock`, or a test clock of
/// your own): each scheduled item is a `Task` that sleeps on the clock, then runs the work on
/// the task's executor (the global concurrent executor).
///
/// ```swift
/// let scheduler = ClockScheduler(ContinuousClock())
/// after(seconds: 1, scheduler: scheduler).done { print("a second later") }
/// ```
///
/// Cancelling a scheduled item cancels its task: the work never runs, and the task releases it
/// once its sleep has ended with the cancellation (shortly after `cancel()`, asynchronously).
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
public struct ClockScheduler<C: Clock>: PromiseScheduler where C.Duration == Duration {
    /// The clock the scheduler sleeps on and reads ``now`` from.
    public let clock: C
    /// ``now`` counts from this instant.
    private let origin: C.Instant

    /// A scheduler on `clock`, whose ``now`` is 0 at the time of this call.
    public init(_ clock: C) {
        self.clock = clock
        self.origin = clock.now
    }

    /// Seconds on ``clock`` since this scheduler was made.
    public var now: TimeInterval {
        let elapsed = origin.duration(to: clock.now).components
        return Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
    }

    /// Runs `work` in a task once `seconds` have passed on ``clock`` (as soon as possible for
    /// zero or less; never for an infinite or NaN `seconds`, nor for 2^63 nanoseconds or more,
    /// about 292 years: nothing is scheduled and `work` is released).
    public func schedule(after seconds: TimeInterval, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
        guard let delay = ScheduledDelay(seconds).seconds else { return NeverScheduledWork() }
        let clock = self.clock
        let deadline = clock.now.advanced(by: .seconds(delay))
        let task = Task {
            do {
                try await clock.sleep(until: deadline, tolerance: nil)
            } catch {
                return
            }
            guard !Task.isCancelled else { return }
            work()
        }
        return TaskWork(task: task)
    }
}

/// The handle of a ``ClockScheduler`` item: its task.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
private struct TaskWork: ScheduledWork {
    let task: Task<Void, Never>

    func cancel() {
        task.cancel()
    }
}
