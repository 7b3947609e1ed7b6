#if canImport(ObjectiveC)
import Foundation
import ObjectiveC
import PromiseCore

// `after(life:)` watches an object through an associated object, which needs the Objective-C
// runtime: Apple platforms only. On Linux, fulfil a guarantee from the class's own `deinit`
// (the "PromiseKit compatibility" article shows how).

/// A guarantee fulfilled once `object` has been deallocated (PromiseKit's `after(life:)`).
///
/// The guarantee is fulfilled on the thread that releases the object's last reference, while
/// the object is being torn down: handlers run where their `on:` says. Every call for the same
/// object returns the same guarantee. Nothing is attached to it, so cancelling a chain made
/// from it (`after(life: view).cancellize()`) rejects that chain only, and the guarantee is
/// still fulfilled when the object goes. Apple platforms only (it needs the Objective-C
/// runtime).
///
/// ```swift
/// after(life: controller).done { print("closed") }
/// ```
public func after(life object: NSObject) -> Guarantee<Void> {
    lifeWatchers.withLock { _ in
        if let watcher = objc_getAssociatedObject(object, &lifeWatcherKey) as? LifeWatcher {
            return watcher.guarantee
        }
        let watcher = LifeWatcher()
        objc_setAssociatedObject(object, &lifeWatcherKey, watcher, .OBJC_ASSOCIATION_RETAIN_NONATOMIC)
        return watcher.guarantee
    }
}

/// Serialises the look-up and the setting of watchers, so two threads asking at once share one.
private let lifeWatchers = Locked(())

/// The associated-object key: only its address is used.
nonisolated(unsafe) private var lifeWatcherKey: UInt8 = 0

/// Held by the watched object; fulfils its guarantee when the object releases it.
private final class LifeWatcher: Sendable {
    let guarantee: Guarantee<Void>
    private let fulfil: @Sendable (()) -> Void

    init() {
        let (guarantee, resolve) = Guarantee<Void>.pending()
        self.guarantee = guarantee
        self.fulfil = resolve
    }

    deinit {
        fulfil(())
    }
}
#endif
