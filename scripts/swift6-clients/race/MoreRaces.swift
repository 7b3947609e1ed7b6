// More data races a Swift 6 client must be told about.

import CancellablePromiseKit
import Dispatch
import Foundation

nonisolated final class Tally { var n = 0 }

@MainActor final class RacyMore {
    var title = ""
    func guaranteeOff() {
        Guarantee.value(1).done(on: .global()) { _ in
            self.title = "g"  // expect-diagnostic
        }
    }
    func afterOff() {
        after(seconds: 0.1).done(on: .global()) {
            self.title = "a"  // expect-diagnostic
        }
    }
    func whenOff() {
        when(fulfilled: [download("a"), download("b")]).done(on: .global()) { _ in
            self.title = "w"  // expect-diagnostic
        }.cauterize()
    }
    func tapOff() {
        fetchTitle().tap(on: .global()) { _ in
            self.title = "t"  // expect-diagnostic
        }.cauterize()
    }
    func recoverOff() {
        download("x").recover(on: .global()) { _ -> CancellablePromise<Data> in
            self.title = "r"  // expect-diagnostic
            return CancellablePromise.value(Data())
        }.cauterize()
    }
    func finallyOff() {
        fetchTitle().catch(on: nil) { _ in }.finally(on: .global()) {
            self.title = "f"  // expect-diagnostic
        }
    }
    func mapValuesOff() {
        Promise.value([1, 2]).mapValues(on: .global()) { v -> Int in
            self.title = "m"  // expect-diagnostic
            return v
        }.cauterize()
    }
    func cancellableEnsureOff() {
        download("x").ensure(on: .global()) {
            self.title = "e"  // expect-diagnostic
        }.cauterize()
    }
}

nonisolated func retryRace() -> Int {
    let tally = Tally()
    _ = retry(maxAttempts: 3) { _ -> CancellablePromise<Data> in
        tally.n += 1  // expect-diagnostic
        return download("x")
    }
    return tally.n
}

nonisolated func tokenRace() -> Int {
    let tally = Tally()
    let request = CancellationRequest()
    request.token.onCancel {
        tally.n += 1  // expect-diagnostic
    }
    DispatchQueue.global().async { request.cancel() }
    return tally.n
}

nonisolated func onNilRace() -> Int {
    var seen = 0
    fetchTitle().done(on: nil) { _ in
        seen += 1  // expect-diagnostic
    }.cauterize()
    return seen
}

nonisolated func pipeRace() -> Int {
    var seen = 0
    fetchTitle().pipe { _ in
        seen += 1  // expect-diagnostic
    }
    return seen
}

nonisolated func dispatchRace() -> Int {
    let tally = Tally()
    DispatchQueue.global().async(.promise) {
        tally.n += 1  // expect-diagnostic
    }.cauterize()
    return tally.n
}

nonisolated func usingCancelRace() -> Int {
    let tally = Tally()
    let p = CancellablePromise<String>(using: fetchTitle()) {
        tally.n += 1  // expect-diagnostic
    }
    DispatchQueue.global().async { p.cancel() }
    return tally.n
}

nonisolated func mainBodyFromNonisolated() -> Int {
    var seen = 0
    fetchTitle().done { _ in seen += 1 }.cauterize()  // expect-diagnostic
    return seen
}

nonisolated func iteratorRace() -> Int {
    var n = 0
    let it = AnyIterator<Promise<Int>> {
        n += 1
        return n < 3 ? Promise.value(n) : nil
    }
    when(fulfilled: it, concurrently: 2).cauterize()  // expect-diagnostic
    return n
}

nonisolated func tokenMapRace() -> Int {
    let tally = Tally()
    let request = CancellationRequest()
    _ = request.token.map {
        tally.n += 1  // expect-diagnostic
        return true
    }
    return tally.n
}
