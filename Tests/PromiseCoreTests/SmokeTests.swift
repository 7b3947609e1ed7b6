import Dispatch
@testable import PromiseCore
import XCTest

final class SmokeTests: XCTestCase {
    func testMapChainResolves() {
        let (p, r) = Promise<Int>.pending()
        var out = 0
        p.map(on: nil) { $0 + 1 }.then(on: nil) { Promise.value($0 * 2) }.done(on: nil) { out = $0 }.cauterize()
        r.fulfill(1)
        XCTAssertEqual(out, 4)
    }

    func testDeepChainResolveAndRelease() {
        let (head, r) = Promise<Int>.pending()
        var tail = head
        for _ in 0..<1_000_000 { tail = tail.map(on: nil) { $0 + 1 } }
        r.fulfill(0)
        XCTAssertEqual(tail.value, 1_000_000)
        do {
            let (head2, _) = Promise<Int>.pending()
            var t: Promise<Int> = head2
            for _ in 0..<1_000_000 { t = t.then(on: nil) { Promise.value($0 + 1) } }
        }
    }

    func testLockOffset() {
        let cell = Locked(0)
        XCTAssertEqual(cell._storedLockWordAddress(), UnsafeMutableRawPointer(lockWordPointer(cell)))
    }
}
