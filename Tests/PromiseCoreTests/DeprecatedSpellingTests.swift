import Dispatch
import Foundation
import PromiseCore
import XCTest

// The spellings PromiseKit 6 deprecated and still shipped (`wrap`, `always`, and `filter`,
// `first`, `last`, `sorted` on promises of sequences), used as PromiseKit 4 and 5 code used them
// and checked to behave as the operation each forwards to. The test methods are marked
// deprecated themselves, so using the spellings inside them does not warn (the strict build
// treats warnings as errors).

private struct Stop: Error, Equatable {}

// Completion-handler APIs of the shapes `wrap` adapts, calling back at once.
private func fetch(value: Int?, error: Error?, _ completion: @escaping (Int?, Error?) -> Void) {
    completion(value, error)
}

private func fetchAlways(value: Int, error: Error?, _ completion: @escaping (Int, Error?) -> Void) {
    completion(value, error)
}

private func fetchErrorFirst(value: Int?, error: Error?, _ completion: @escaping (Error?, Int?) -> Void) {
    completion(error, value)
}

private func performTask(error: Error?, _ completion: @escaping (Error?) -> Void) {
    completion(error)
}

private func produce(value: Int, _ completion: @escaping (Int) -> Void) {
    completion(value)
}

final class DeprecatedSpellingTests: XCTestCase {
    /// Checks a `wrap` of a callback that reports an optional value and an optional error:
    /// `wrapping(value, nil)` fulfils with `value`, `wrapping(value, Stop())` rejects with `Stop`,
    /// and `wrapping(nil, nil)` rejects with `PMKError.invalidCallingConvention`.
    private func assertWrap(
        fulfilling value: Int, _ wrapping: (Int?, Error?) -> Promise<Int>,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(wrapping(value, nil).value, value, file: file, line: line)
        XCTAssertEqual(wrapping(value, Stop()).error as? Stop, Stop(), file: file, line: line)
        XCTAssertEqual(pmkCase(wrapping(nil, nil).error), "invalidCallingConvention", file: file, line: line)
    }

    // MARK: wrap

    /// `wrap` with `(T?, Error?)`: the value fulfils, the error rejects, both `nil` rejects with
    /// `PMKError.invalidCallingConvention`.
    @available(*, deprecated)
    func testWrapOfAnOptionalValueAndError() {
        assertWrap(fulfilling: 3) { value, error in wrap { fetch(value: value, error: error, $0) } }
    }

    /// `wrap` with `(T, Error?)`: the error rejects, else the value fulfils.
    @available(*, deprecated)
    func testWrapOfAValueAndAnOptionalError() {
        XCTAssertEqual(wrap { fetchAlways(value: 4, error: nil, $0) }.value, 4)
        XCTAssertEqual(wrap { fetchAlways(value: -1, error: Stop(), $0) }.error as? Stop, Stop())
    }

    /// `wrap` with `(Error?, T?)`: the error comes first and rejects; both `nil` rejects with
    /// `PMKError.invalidCallingConvention`.
    @available(*, deprecated)
    func testWrapOfTheErrorFirst() {
        assertWrap(fulfilling: 5) { value, error in wrap { fetchErrorFirst(value: value, error: error, $0) } }
    }

    /// `wrap` with `(Error?)`: `nil` fulfils a `Promise<Void>`, an error rejects.
    @available(*, deprecated)
    func testWrapOfAnOptionalErrorOnly() {
        XCTAssertTrue(wrap { performTask(error: nil, $0) }.isFulfilled)
        XCTAssertEqual(wrap { performTask(error: Stop(), $0) }.error as? Stop, Stop())
    }

    /// `wrap` with `(T)`: the value fulfils; a throw from the body rejects.
    @available(*, deprecated)
    func testWrapOfAValueOnly() {
        XCTAssertEqual(wrap { produce(value: 6, $0) }.value, 6)
        let thrown = wrap { (_: @escaping @Sendable (Int) -> Void) in throw Stop() }
        XCTAssertEqual(thrown.error as? Stop, Stop())
    }

    /// `wrap` accepts a function reference, and a completion called later from another thread
    /// settles the promise; only the first call counts.
    @available(*, deprecated)
    func testWrapOfAFunctionReferenceCompletedFromAnotherThread() {
        func fetchLater(_ completion: @escaping @Sendable (Int?, Error?) -> Void) {
            DispatchQueue.global().async {
                completion(7, nil)
                completion(8, nil)
            }
        }
        XCTAssertEqual(waitForValue(wrap(fetchLater)), 7)
    }

    // MARK: always

    /// `always(on:execute:)` runs its body on the given queue after a fulfilment and after a
    /// rejection, and passes the result on.
    @available(*, deprecated)
    func testAlwaysRunsAfterEitherResultAndPassesItOn() {
        let ran = Counter()
        let fulfilled = Promise.value(1).always(on: nil) { ran.increment() }
        let rejected = Promise<Int>(error: Stop()).always(on: nil) { ran.increment() }
        XCTAssertEqual(fulfilled.value, 1)
        XCTAssertEqual(rejected.error as? Stop, Stop())
        XCTAssertEqual(ran.value, 2)
    }

    /// `always` without `on:` is a main-actor body: it runs on the main queue.
    @available(*, deprecated)
    func testAlwaysRunsOnTheMainQueueByDefault() {
        let onMain = Flag()
        let promise = Promise.value(1).always { if isOnMainQueue { onMain.raise() } }
        XCTAssertEqual(waitForValue(promise), 1)
        XCTAssertTrue(onMain.value)
    }

    // MARK: Sequences

    /// `filter(on:test:)` keeps the elements `test` accepts.
    @available(*, deprecated)
    func testFilterKeepsTheAcceptedElements() {
        XCTAssertEqual(Promise.value([1, 2, 3, 4]).filter(on: nil) { $0.isMultiple(of: 2) }.value, [2, 4])
        XCTAssertEqual(Promise<[Int]>(error: Stop()).filter(on: nil) { _ in true }.error as? Stop, Stop())
    }

    /// `first` and `last` give the first and last element, and reject an empty collection with
    /// `PMKError.emptySequence`.
    @available(*, deprecated)
    func testFirstAndLast() {
        XCTAssertEqual(Promise.value([1, 2, 3]).first.value, 1)
        XCTAssertEqual(Promise.value([1, 2, 3]).last.value, 3)
        XCTAssertEqual(pmkCase(Promise.value([Int]()).first.error), "emptySequence")
        XCTAssertEqual(pmkCase(Promise.value([Int]()).last.error), "emptySequence")
    }

    /// `sorted(on:)` sorts the elements in ascending order.
    @available(*, deprecated)
    func testSortedSortsAscending() {
        XCTAssertEqual(Promise.value([3, 1, 2]).sorted(on: nil).value, [1, 2, 3])
    }

    /// The sequence spellings work on any thenable: a guarantee gives a promise.
    @available(*, deprecated)
    func testSequenceSpellingsOnAGuarantee() {
        let numbers = Guarantee.value([5, 4, 6])
        let filtered: Promise<[Int]> = numbers.filter(on: nil) { $0 > 4 }
        XCTAssertEqual(filtered.value, [5, 6])
        XCTAssertEqual(numbers.first.value, 5)
        XCTAssertEqual(numbers.last.value, 6)
        XCTAssertEqual(numbers.sorted(on: nil).value, [4, 5, 6])
    }
}

/// Compile-only: each deprecated spelling in the form PromiseKit code wrote it (default queues,
/// trailing closures), so a change that drops or breaks one fails the build. Never called; the
/// function is deprecated itself, so using the spellings here does not warn.
@available(*, deprecated)
private func promiseKit6DeprecatedSpellings() {
    let _: Promise<Int> = wrap { fetch(value: 1, error: nil, $0) }
    let _: Promise<Int> = wrap { fetchAlways(value: 1, error: nil, $0) }
    let _: Promise<Int> = wrap { fetchErrorFirst(value: 1, error: nil, $0) }
    let _: Promise<Void> = wrap { performTask(error: nil, $0) }
    let _: Promise<Int> = wrap { produce(value: 1, $0) }
    let numbers = Promise.value([1, 2])
    _ = numbers.always {}
    _ = numbers.always(execute: {})
    _ = numbers.filter { $0 > 1 }
    _ = numbers.filter(test: { $0 > 1 })
    _ = numbers.first
    _ = numbers.last
    _ = numbers.sorted()
}
