import Dispatch
import Foundation
import PromiseCore

/// A one-shot timer on a global queue, for `timeout` and `retry`'s delays. It keeps itself
/// alive until it fires or is cancelled; in either case it releases `fire` (and what it
/// captures): when it has run, or at once, on the thread that cancels.
final class OneShotTimer: Sendable {
    private struct Armed {
        let source: DispatchSourceTimer
        let fire: @Sendable () -> Void
    }

    /// The armed timer, until it fires or is cancelled.
    private let armed: Locked<Armed?>

    init(seconds: TimeInterval, fire: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeTimerSource(queue: .global())
        armed = Locked(Armed(source: source, fire: fire))
        // The handler holds the timer (a cycle through the source) until `take()` breaks it.
        source.setEventHandler { [self] in
            guard let taken = take() else { return }
            taken.source.cancel()
            taken.fire()
        }
        source.schedule(deadline: Self.deadline(after: seconds))
        source.activate()
    }

    /// Stops the timer if it has not fired, and releases `fire`.
    func cancel() {
        take()?.source.cancel()
    }

    private func take() -> Armed? {
        armed.withLock { armed in
            let taken = armed
            armed = nil
            return taken
        }
    }

    private static func deadline(after seconds: TimeInterval) -> DispatchTime {
        guard !seconds.isNaN else { return .now() }
        // About 31 years: beyond it, DispatchTime's nanosecond arithmetic would overflow.
        guard seconds < 1e9 else { return .distantFuture }
        return .now() + max(0, seconds)
    }
}
