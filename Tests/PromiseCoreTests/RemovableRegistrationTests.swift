import Dispatch
import XCTest

@testable import PromiseCore

// `Promise.register(owner:_:)`: a handler that can be taken off a pending promise, and that a
// long-lived promise stops storing once it is removed or its owner is gone.

final class RemovableRegistrationTests: XCTestCase {
    func testActionRunsOnceWithTheResultWhileTheOwnerLives() {
        let (promise, resolver) = Promise<Int>.pending()
        let owner = Owner()
        let seen = Recorder<Int>()
        promise.register(owner: owner) { owner, result in
            seen.append(valueOf(result) + owner.offset)
            return .none
        }
        resolver.fulfill(1)
        resolver.fulfill(2)
        XCTAssertEqual(seen.all, [101])
    }

    func testRegisteringOnASettledPromiseRunsTheActionAtOnce() {
        let owner = Owner()
        let seen = Recorder<Int>()
        Promise.value(3).register(owner: owner) { _, result in
            seen.append(valueOf(result))
            return .none
        }
        XCTAssertEqual(seen.all, [3])
    }

    func testRemovedRegistrationDoesNotRunAndReleasesItsActionAtOnce() {
        let (promise, resolver) = Promise<Int>.pending()
        let owner = Owner()
        let released = Counter()
        let ran = Counter()
        let registration: PromiseRegistration
        do {
            let probe = Probe { released.increment() }
            registration = promise.register(owner: owner) { _, _ in
                _ = probe
                ran.increment()
                return .none
            }
        }
        XCTAssertEqual(released.value, 0)
        registration.remove()
        XCTAssertEqual(released.value, 1, "removing releases what the action captured")
        XCTAssertEqual(promise.waitingHandlerCount, 0)
        resolver.fulfill(1)
        XCTAssertEqual(ran.value, 0)
    }

    func testActionDoesNotRunOnceItsOwnerIsGone() {
        let (promise, resolver) = Promise<Int>.pending()
        let ran = Counter()
        do {
            let owner = Owner()
            promise.register(owner: owner) { _, _ in
                ran.increment()
                return .none
            }
            XCTAssertEqual(promise.waitingHandlerCount, 1)
        }
        XCTAssertEqual(promise.waitingHandlerCount, 0, "a registration whose owner is gone is not waiting")
        resolver.fulfill(1)
        XCTAssertEqual(ran.value, 0)
    }

    func testRegistrationDoesNotKeepItsOwnerAlive() {
        let (promise, resolver) = Promise<Int>.pending()
        weak var weakOwner: Owner?
        do {
            let owner = Owner()
            weakOwner = owner
            promise.register(owner: owner) { _, _ in .none }
        }
        XCTAssertNil(weakOwner)
        resolver.fulfill(0)
    }

    func testLongLivedPromiseStoresOnlyAboutAsManyRegistrationsAsAreLive() {
        let (promise, resolver) = Promise<Int>.pending()
        let live = (0..<10).map { _ in Owner() }
        let ran = Counter()
        for round in 0..<100_000 {
            if round % 10_000 == 0 {
                // A few registrations stay live all along.
                promise.register(owner: live[round / 10_000]) { _, _ in
                    ran.increment()
                    return .none
                }
            }
            let owner = Owner()
            let registration = promise.register(owner: owner) { _, _ in
                ran.increment()
                return .none
            }
            if round % 2 == 0 { registration.remove() }  // the others' owners go away
        }
        let storage = promise.handlerStorage
        XCTAssertEqual(promise.waitingHandlerCount, 10)
        XCTAssertLessThanOrEqual(storage.stored, 64, "stored: \(storage)")
        XCTAssertLessThanOrEqual(storage.capacity, 128, "stored: \(storage)")
        resolver.fulfill(0)
        XCTAssertEqual(ran.value, 10)
    }

    func testSweepingKeepsTheRegistrationOrderOfEveryHandler() {
        let (promise, resolver) = Promise<Int>.pending()
        let order = Recorder<Int>()
        let owner = Owner()
        for index in 0..<1_000 {
            if index % 3 == 0 {
                promise.pipe { _ in order.append(index) }
            } else if index % 3 == 1 {
                promise.register(owner: owner) { _, _ in
                    order.append(index)
                    return .none
                }
            } else {
                promise.register(owner: owner) { _, _ in
                    order.append(-1)
                    return .none
                }.remove()
            }
        }
        resolver.fulfill(0)
        XCTAssertEqual(order.all, (0..<1_000).filter { $0 % 3 != 2 })
    }

    func testRemovingFromManyThreadsWhileSettlingRunsEachActionAtMostOnce() {
        for _ in 0..<200 {
            let (promise, resolver) = Promise<Int>.pending()
            let owner = Owner()
            let ran = Counter()
            let registrations = (0..<8).map { _ in
                promise.register(owner: owner) { _, _ in
                    ran.increment()
                    return .none
                }
            }
            DispatchQueue.concurrentPerform(iterations: 9) { index in
                if index == 8 {
                    resolver.fulfill(0)
                } else {
                    registrations[index].remove()
                    registrations[index].remove()
                }
            }
            XCTAssertLessThanOrEqual(ran.value, 8)
            XCTAssertEqual(promise.waitingHandlerCount, nil)
        }
    }
}

private final class Owner {
    let offset = 100
}

private final class Probe {
    let onDeinit: () -> Void
    init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
    deinit { onDeinit() }
}

private func valueOf(_ result: Result<Int>) -> Int {
    if case .fulfilled(let value) = result { return value }
    return -1
}
