import Foundation
import PromiseCore

extension PromiseScheduler {
    /// Schedules `fire` after `seconds`, by the package's rule for intervals: zero or less is as
    /// soon as possible; infinite, NaN or too long for a clock (`ScheduledDelay`) is never
    /// (nothing is scheduled and `fire` is released).
    /// Cancelling the returned work unschedules `fire` and lets the scheduler release it.
    func scheduleTimer(seconds: TimeInterval, _ fire: @escaping @Sendable () -> Void) -> any ScheduledWork {
        guard let delay = scheduledDelaySeconds(seconds) else { return neverScheduledWork }
        return schedule(after: delay, fire)
    }
}
