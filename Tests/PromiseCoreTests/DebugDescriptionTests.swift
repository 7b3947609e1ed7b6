import Dispatch
import XCTest

@testable import PromiseCore

// `debugDescription` reads as PromiseKit 8's: the state, the number of handlers waiting while
// pending, and the error's type before a rejection.

final class DebugDescriptionTests: XCTestCase {
    enum Error: Swift.Error { case dummy }

    func testPendingPromiseWithoutHandlersShowsZeroHandlers() {
        let (promise, resolver) = Promise<Int>.pending()
        XCTAssertEqual(promise.debugDescription, "Promise<Int>.pending(handlers: 0)")
        resolver.fulfill(0)
    }

    func testPendingPromiseCountsEveryHandlerWaiting() {
        let (promise, resolver) = Promise<Int>.pending()
        _ = promise.map(on: nil) { $0 + 1 }
        promise.done(on: nil) { _ in }.cauterize()
        promise.pipe { _ in }
        XCTAssertEqual(promise.debugDescription, "Promise<Int>.pending(handlers: 3)")
        resolver.fulfill(0)
    }

    func testFulfilledVoidPromiseSpellsVoidAsEmptyTuple() {
        XCTAssertEqual(Promise().debugDescription, "Promise<()>.fulfilled(())")
    }

    func testFulfilledPromiseShowsTheValue() {
        XCTAssertEqual(Promise.value(3).debugDescription, "Promise<Int>.fulfilled(3)")
    }

    func testRejectedPromiseShowsTheErrorsTypeThenTheError() {
        XCTAssertEqual(
            Promise<String>(error: Error.dummy).debugDescription, "Promise<String>.rejected(Error.dummy)")
        XCTAssertEqual(
            Promise<Int>(error: TestError(code: 1)).debugDescription,
            "Promise<Int>.rejected(TestError.TestError(code: 1))")
    }

    func testSettledPromiseNoLongerCountsHandlers() {
        let (promise, resolver) = Promise<Int>.pending()
        _ = promise.map(on: nil) { $0 }
        resolver.fulfill(7)
        XCTAssertEqual(promise.debugDescription, "Promise<Int>.fulfilled(7)")
    }

    func testDescriptionIsUnchanged() {
        let (promise, resolver) = Promise<Int>.pending()
        XCTAssertEqual(promise.description, "Promise(…Int)")
        XCTAssertEqual(Promise.value(3).description, "Promise(3)")
        resolver.fulfill(0)
    }

    func testPendingGuaranteeCountsItsHandlers() {
        let (guarantee, resolve) = Guarantee<Int>.pending()
        XCTAssertEqual(guarantee.debugDescription, "Guarantee<Int>.pending(handlers: 0)")
        guarantee.done(on: nil) { _ in }
        XCTAssertEqual(guarantee.debugDescription, "Guarantee<Int>.pending(handlers: 1)")
        resolve(0)
    }

    func testFulfilledGuaranteeShowsTheValue() {
        XCTAssertEqual(Guarantee().debugDescription, "Guarantee<()>.fulfilled(())")
        XCTAssertEqual(Guarantee.value("a").debugDescription, "Guarantee<String>.fulfilled(a)")
    }
}
