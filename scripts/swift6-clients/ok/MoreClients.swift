// More race-free client code: guarantees, after, when, retry, latest wins, shared work, bags, tokens.

import CancellablePromiseKit
import Dispatch
import Foundation

@MainActor final class MoreScreen {
    var title = ""
    var count = 0
    var items: [Item] = []
    let bag = CancelBag()
    let latest = LatestWins()
    let coalescer = InFlightCoalescer<String, Data>()

    func guarantees() {
        Guarantee.value(3).done { self.count = $0 }
        after(seconds: 0.1).done { self.title = "later" }
        Guarantee.value(1).map { $0 + self.count }.done { self.count = $0 }
    }

    func explicitMain() {
        fetchTitle().done(on: .main) { self.title = $0 }.cauterize()
        download("x").map(on: .main) { $0.count }.done { self.count = $0 }.catch { _ in self.title = "" }
    }

    func combinators() {
        when(fulfilled: [download("a"), download("b")]).done { self.count = $0.count }.catch { _ in }
        race(fulfilled: [download("a"), download("b")], autoCancel: true).done { self.count = $0.count }.store(in: bag)
        when(fulfilled: fetchTitle(), fetchTitle()).done { a, b in self.title = a + b }.cauterize()
    }

    func patterns() {
        retry(maxAttempts: 3) { _ in download("x") }.done { self.count = $0.count }.store(in: bag)
        latest.run { download("query") }.map(on: .global()) { decode($0) }.done { self.items = $0 }.cauterize()
        coalescer.promise(for: "k") { download("k") }.done { self.count = $0.count }.cauterize()
        let shared = SharedCancellablePromise { download("s") }
        shared.follower().done { self.count = $0.count }.cauterize()
        download("t").timeout(seconds: 5).done { self.count = $0.count }.cauterize()
    }

    func localState() {
        var local = 0
        fetchTitle().done { _ in local += 1 }.cauterize()
        fetchTitle().ensure { self.title = "\(local)" }.cauterize()
    }

    func tokens() {
        let request = CancellationRequest()
        request.token.onCancel { print("cancelled") }
        _ = request.token.map { true }
        request.cancel()
    }

    func recovering() {
        download("x").recover { _ in CancellablePromise.value(Data()) }.done { self.count = $0.count }.cauterize()
        fetchTitle().recover { _ in Guarantee.value("none") }.done { self.title = $0 }
        fetchTitle().tap { _ in self.count += 1 }.get { self.title = $0 }.asVoid().cauterize()
        fetchTitle().catch { _ in self.title = "" }.finally { self.count = 0 }
    }
}

nonisolated func background2(_ names: [String]) -> Promise<Int> {
    let base = 10
    return fetchTitle().map(on: .global()) { $0.count + base }
        .then(on: .global()) { n in Promise.value(n * 2) }
        .recover(on: nil) { _ in Promise.value(0) }
}

nonisolated func iterate() -> Promise<[Int]> {
    var n = 0
    let it = AnyIterator<Promise<Int>> {
        n += 1
        return n < 3 ? Promise.value(n) : nil
    }
    return when(fulfilled: it, concurrently: 2)
}

nonisolated func asyncWork() async throws -> Int {
    let data = try await download("a").async()
    let value = await Guarantee.value(2).async()
    return data.count + value
}

nonisolated func cancellableTask(_ job: Job) -> CancellablePromise<Int> {
    CancellablePromise<Int>(using: Promise.value(1)) { job.stop() }
}
