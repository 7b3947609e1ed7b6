import Foundation
import PromiseCore
import XCTest

// The patterns the "PromiseKit compatibility" article gives for what PromiseKit code meets here,
// written as the article writes them.

/// The article's log handler state: a lock-protected object the handler captures as a constant.
private final class LogRecorder: @unchecked Sendable {  // every access holds `lock`
    private let lock = NSLock()
    private var recorded: [LogEvent] = []
    func record(_ event: LogEvent) { lock.withLock { recorded.append(event) } }
    var events: [LogEvent] { lock.withLock { recorded } }
}

/// The article's stand-in for `after(life:)` on Linux: a guarantee fulfilled by `deinit`.
private final class Session {
    let ended: Guarantee<Void>
    private let markEnded: @Sendable (()) -> Void
    init() { (ended, markEnded) = Guarantee<Void>.pending() }
    deinit { markEnded(()) }
}

final class CompatibilityArticleTests: XCTestCase {
    /// A `@Sendable` log handler that records into a lock-protected object compiles in Swift 6
    /// mode and receives the events.
    func testLogHandlerRecordingIntoALockedObject() {
        let recorder = LogRecorder()
        withConfiguration({ $0.logHandler = { recorder.record($0) } }) {
            Promise<Int>(error: CocoaError(.fileNoSuchFile)).cauterize()
        }
        XCTAssertEqual(describeLog(recorder.events).count, 1)
        XCTAssertTrue(describeLog(recorder.events).first?.hasPrefix("cauterized(") == true)
    }

    /// A guarantee fulfilled from `deinit` settles when the object's last reference goes, and
    /// does not keep the object alive.
    func testAGuaranteeFulfilledFromDeinitSettlesWhenTheObjectGoes() {
        var session: Session? = Session()
        weak let watched = session
        let ended = session!.ended
        XCTAssertTrue(ended.isPending)
        session = nil
        XCTAssertNil(watched)
        XCTAssertFalse(ended.isPending)
    }
}
