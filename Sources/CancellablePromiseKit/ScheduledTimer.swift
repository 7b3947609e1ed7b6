import Foundation
import PromiseCore

extension PromiseScheduler {
    /// Schedules `fire` after `seconds`, by the package's rule for intervals: zero or less is as
    /// soon as possible, infinite or NaN is never (nothing is scheduled and `fire` is released).
    /// Cancelling the returned work unschedules `fire` and lets the scheduler release it.
    func scheduleTimer(seconds: TimeInterval, _ fire: @escaping @Sendable () -> Void) -> any ScheduledWork {
        guard seconds < .infinity else { return neverScheduledWork }
        return schedule(after: max(0, seconds), fire)
    }
}
