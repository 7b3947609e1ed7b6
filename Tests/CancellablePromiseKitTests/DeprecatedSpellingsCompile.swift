import CancellablePromiseKit
import Dispatch
import Foundation

// Compile-only: every deprecated spelling of PromiseKit 7 / CancelForPromiseKit once, so a
// change that drops or breaks one fails the build. Never called; the function is deprecated
// itself, so using the aliases here does not warn. DeprecatedSpellingTests checks behaviour.

@available(*, deprecated)
private func useEveryDeprecatedSpelling(task: CancellableTask, items: CancelItemList) {
    let (promise, resolver) = Promise<Int>.pending()
    let p1 = CancellablePromise<Int>(task: task) { _ in }
    _ = CancellablePromise(task: task, promise: promise, resolver: resolver)
    _ = CancellablePromise<Int>(task: task, error: PMKError.badInput)
    _ = CancellablePromise(task: task)
    _ = cancellableAfter(seconds: 1)
    _ = cancellableAfter(.seconds(1))

    _ = p1.thenable
    _ = p1.catchable
    _ = p1.cancelItemList
    p1.cancel(error: nil)
    p1.catch { _ in }.cancel(error: nil)
    items.cancel(error: nil)
    p1.appendCancellable(cancellable: task, reject: nil)
    p1.appendCancellableTask(task, reject: nil)
    _ = promise.cancellize(items)
    _ = cancellize(promise)
    let p2 = Promise<Int>(cancellableTask: task) { _ in }
    p2.setCancellableTask(task, reject: nil)
    let g = Guarantee<Int>(cancellableTask: task) { _ in }
    g.setCancellableTask(task)

    _ = p1.cancellableThen { Promise.value($0) }
    _ = p1.cancellableRecover { _ in Promise.value(0) }
    let values = CancellablePromise.value([1, 2])
    _ = values.cancellableThenMap { Promise.value($0) }
    _ = values.cancellableThenFlatMap { Promise.value([$0]) }

    _ = cancellableWhen(fulfilled: p1, p1)
    _ = cancellableWhen(fulfilled: p1, p1, p1)
    _ = cancellableWhen(fulfilled: p1, p1, p1, p1)
    _ = cancellableWhen(fulfilled: p1, p1, p1, p1, p1)
    _ = cancellableWhen(fulfilled: [p1, p1])
    _ = cancellableRace(p1, p1)
    _ = cancellableRace([p1, p1])

    _ = timeout(seconds: 1)
    _ = PMKError.timedOut
}
