// `race` and `when` at the size most code uses them, two inputs: shared by the benchmark rows
// and the profile driver so that both measure the same thing.

import CancellablePromiseKit

/// `race` and `when(fulfilled:)` over two pending promises, then both inputs fulfilled with `i`.
public func raceAndWhenOverTwo(_ i: Int) {
    let (a, ra) = Promise<Int>.pending()
    let (b, rb) = Promise<Int>.pending()
    let first = race(a, b)
    let both = when(fulfilled: a, b)
    ra.fulfill(i)
    rb.fulfill(i)
    precondition(first.value == i && both.value?.1 == i)
}

/// The same over two pending cancellable promises.
public func cancellableRaceAndWhenOverTwo(_ i: Int) {
    let (a, ra) = CancellablePromise<Int>.pending()
    let (b, rb) = CancellablePromise<Int>.pending()
    let first = race(a, b)
    let both = when(fulfilled: a, b)
    ra.fulfill(i)
    rb.fulfill(i)
    precondition(first.value == i && both.value?.1 == i)
}

/// The same with `autoCancel: true`: the first input fulfils, the race cancels the other,
/// whose cancellation rejects the `when`.
public func cancellableRaceAndWhenOverTwoAutoCancel(_ i: Int) {
    let (a, ra) = CancellablePromise<Int>.pending()
    let (b, _) = CancellablePromise<Int>.pending()
    let first = race(a, b, autoCancel: true)
    let both = when(fulfilled: a, b, autoCancel: true)
    ra.fulfill(i)
    precondition(first.value == i && b.isCancelled && both.isRejected)
}
