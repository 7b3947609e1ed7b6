import CancellablePromiseKit
import Foundation
import PromiseCore

// A notification as a guarantee: the next matching notification, observed once; cancelling it
// removes the observer.

extension NotificationCenter {
    /// Returns a guarantee of the next notification named `name` (from `object`, if given),
    /// as PromiseKit's `observe(once:object:)`.
    ///
    /// The observer is added at once and removed as soon as the first matching notification
    /// arrives. The guarantee resolves synchronously on the thread that posts the notification;
    /// handlers run where their `on:` says.
    ///
    /// Cancelling: the observation is attached to the guarantee, so
    /// `observe(once: name).cancellize()` gives a `CancellablePromise` whose `cancel()` removes
    /// the observer (later notifications are not delivered, and the center releases the
    /// observation) and rejects the cancellable promise with `CancellablePromiseError.cancelled`.
    /// A `Guarantee` cannot reject, so the guarantee itself then stays pending forever.
    ///
    /// ```swift
    /// let wait = NotificationCenter.default.observe(once: .configurationDidChange).cancellize()
    /// wait.done { note in reload(note.object) }.cauterize()
    /// // …
    /// wait.cancel()   // the observer is removed
    /// ```
    public func observe(once name: Notification.Name, object: Any? = nil) -> Guarantee<Notification> {
        let promise = Promise<Notification>._makePending()
        let observation = OnceObservation(center: self)
        let token = addObserver(forName: name, object: object, queue: nil) { notification in
            promise.resolve(.fulfilled(notification))
            observation.remove()
        }
        observation.setToken(token)
        promise.attachCancellation { observation.remove() }
        return Guarantee(promise: promise)
    }
}

/// One observer registration that is removed once: after the first notification or on cancel,
/// whichever comes first, even when that happens before `addObserver` has returned its token.
private final class OnceObservation: @unchecked Sendable {
    // @unchecked: `NotificationCenter` and its observer tokens are used from any thread by
    // Foundation's contract; `state` is guarded by its lock.
    private weak var center: NotificationCenter?
    /// The observer token, once known, until removed; `removed` once `remove()` ran.
    private let state = Locked((token: NSObjectProtocol?.none, removed: false))

    init(center: NotificationCenter) {
        self.center = center
    }

    func setToken(_ token: NSObjectProtocol) {
        let removeNow = state.withLock { state in
            if state.removed { return true }
            state.token = token
            return false
        }
        if removeNow { center?.removeObserver(token) }
    }

    func remove() {
        let token = state.withLock { state in
            state.removed = true
            let token = state.token
            state.token = nil
            return token
        }
        if let token { center?.removeObserver(token) }
    }
}
