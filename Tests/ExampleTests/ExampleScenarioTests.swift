import CancellablePromiseKit
import ExampleSupport
import Foundation
import XCTest

/// Runs each scenario of the example on virtual time (a test scheduler: no real waiting) and
/// checks the order of its timeline.
final class ExampleScenarioTests: XCTestCase {
    private func run(_ start: (Timeline) -> Guarantee<Void>) -> [TimelineEvent] {
        let scheduler = TestScheduler()
        let timeline = Timeline(scheduler: scheduler)
        let over = start(timeline)
        scheduler.run()
        XCTAssertTrue(over.isResolved, "the scenario is over once nothing is scheduled")
        return timeline.events
    }

    private func index(
        of kind: TimelineEvent.Kind, _ subject: String, in events: [TimelineEvent],
        file: StaticString = #filePath, line: UInt = #line
    ) -> Int {
        guard let found = events.firstIndex(where: { $0.kind == kind && $0.subject == subject }) else {
            XCTFail("no \(kind) event for \(subject)", file: file, line: line)
            return -1
        }
        return found
    }

    private func subjects(_ kind: TimelineEvent.Kind, in events: [TimelineEvent]) -> Set<String> {
        Set(events.filter { $0.kind == kind }.map(\.subject))
    }

    func testMirrorsWinnerAnswersBeforeTheLosersCancelHandlersRunAndLosersNeverAnswer() {
        let events = run { MirrorsScenario.run(timeline: $0) }

        XCTAssertEqual(subjects(.finished, in: events), ["us-east"])
        XCTAssertEqual(subjects(.failed, in: events), ["ap-south"])
        XCTAssertEqual(subjects(.cancelHandler, in: events), ["eu-west", "sa-east"])

        let won = index(of: .finished, "us-east", in: events)
        let outcome = index(of: .outcome, "race", in: events)
        for loser in ["eu-west", "sa-east"] {
            let cancelled = index(of: .cancelHandler, loser, in: events)
            XCTAssertLessThan(won, cancelled, "the winner answers before \(loser) is cancelled")
            XCTAssertLessThan(cancelled, outcome, "\(loser) is cancelled before the race's handlers run")
        }
        XCTAssertTrue(events[outcome].message.hasPrefix("won by us-east"))
        XCTAssertEqual(events.last?.subject, "(end)")
        XCTAssertTrue(events.last?.message.contains("never answered") ?? false)
    }

    func testMirrorsTheFailedMirrorIsNotCancelledAndDoesNotWin() {
        let events = run { MirrorsScenario.run(timeline: $0) }
        XCTAssertLessThan(index(of: .failed, "ap-south", in: events), index(of: .finished, "us-east", in: events))
        XCTAssertFalse(subjects(.cancelHandler, in: events).contains("ap-south"))
    }

    func testSubtasksCancelledHalfWayStopTheRunningStageAndNeverStartTheNextOne() {
        let events = run { SubtasksScenario.run(timeline: $0) }

        XCTAssertEqual(subjects(.finished, in: events), ["fetch users", "fetch orders"])
        XCTAssertEqual(subjects(.cancelHandler, in: events), ["render charts", "render tables"])
        XCTAssertFalse(subjects(.started, in: events).contains("upload report"))

        let cancel = index(of: .cancelRequested, "caller", in: events)
        XCTAssertLessThan(index(of: .finished, "fetch orders", in: events), cancel)
        for stage in ["render charts", "render tables"] {
            XCTAssertLessThan(index(of: .started, stage, in: events), cancel)
            XCTAssertLessThan(cancel, index(of: .cancelHandler, stage, in: events))
        }
        let outcome = index(of: .outcome, "report", in: events)
        XCTAssertLessThan(index(of: .cancelHandler, "render charts", in: events), outcome)
        XCTAssertTrue(events[outcome].message.contains("CancellablePromiseError.cancelled"))
    }

    func testSubtasksReportCancelledBeforeItStartsRejectsAtOnceAndStopsBothFetches() {
        let timeline = Timeline()
        let report = SubtasksScenario.makeReport(timeline: timeline)
        report.cancel()
        XCTAssertEqual(report.error as? CancellablePromiseError, .cancelled)
        XCTAssertEqual(subjects(.cancelHandler, in: timeline.events), ["fetch users", "fetch orders"])
    }

    func testAdoptCancelFromAnotherThreadSkipsLaterBodiesRunsObserversAndStopsTheTimer() {
        let events = run { AdoptScenario.run(timeline: $0) }

        XCTAssertTrue(events.filter { $0.kind == .body }.isEmpty, "no map/done body runs after cancel")
        let cancel = index(of: .cancelRequested, "other thread", in: events)
        XCTAssertLessThan(index(of: .finished, "login", in: events), cancel)
        XCTAssertLessThan(cancel, index(of: .rejectedByCancel, "keep-alive", in: events))
        XCTAssertFalse(subjects(.finished, in: events).contains("keep-alive"), "the attached timer was stopped")

        let observers = events.enumerated().filter { $0.element.kind == .observer }
        XCTAssertEqual(observers.count, 2, "ensure and catch(policy: .allErrors)")
        XCTAssertTrue(observers.allSatisfy { $0.offset > cancel })
        XCTAssertTrue(events.contains { $0.message == "cancelAll() returned; chain.isRejected: true" })

        // A plain promise's work is not stopped: it finishes after the cancel, unused.
        XCTAssertLessThan(cancel, index(of: .finished, "fetch profile", in: events))
    }

    func testSearchStopsEveryStaleSearchAndRetriesTheFlakyBackendForTheLastText() {
        let events = run { SearchScenario.run(timeline: $0) }
        func typed(_ text: String) -> Int {
            guard
                let found = events.firstIndex(where: {
                    $0.kind == .cancelRequested && $0.message.hasPrefix("typed \"\(text)\":")
                })
            else {
                XCTFail("\(text) was not typed")
                return -1
            }
            return found
        }

        // Only the last text shows results; every earlier search was cancelled, none finished.
        XCTAssertEqual(subjects(.outcome, in: events), ["\"swift\""])
        XCTAssertEqual(subjects(.rejectedByCancel, in: events), ["\"s\"", "\"sw\"", "\"swi\""])
        XCTAssertEqual(subjects(.finished, in: events), ["\"swift\" #3"])

        // "s" and "swi" are stopped mid-request by the next keystroke, before it starts its own.
        XCTAssertEqual(subjects(.cancelHandler, in: events), ["\"s\" #1", "\"swi\" #1"])
        XCTAssertLessThan(typed("sw"), index(of: .cancelHandler, "\"s\" #1", in: events))
        XCTAssertLessThan(
            index(of: .cancelHandler, "\"s\" #1", in: events), index(of: .started, "\"sw\" #1", in: events))
        XCTAssertLessThan(typed("swift"), index(of: .cancelHandler, "\"swi\" #1", in: events))

        // "sw" failed, was backing off when "swi" was typed, and never made a second attempt.
        XCTAssertLessThan(index(of: .failed, "\"sw\" #1", in: events), typed("swi"))
        XCTAssertLessThan(typed("swi"), index(of: .rejectedByCancel, "\"sw\"", in: events))
        XCTAssertFalse(subjects(.started, in: events).contains("\"sw\" #2"), "its backoff timer was stopped")

        // "swift" fails twice (HTTP 503), backs off, and answers on the third attempt.
        let swift = events.filter { $0.subject.hasPrefix("\"swift\" #") }.map { "\($0.subject) \($0.kind)" }
        XCTAssertEqual(
            swift,
            [
                "\"swift\" #1 started", "\"swift\" #1 failed", "\"swift\" #2 started", "\"swift\" #2 failed",
                "\"swift\" #3 started", "\"swift\" #3 finished",
            ])
        XCTAssertLessThan(
            index(of: .finished, "\"swift\" #3", in: events), index(of: .outcome, "\"swift\"", in: events))
        XCTAssertTrue(events.last?.message.contains("attempt 3 of 4") ?? false)
    }

    // Real time: the runner prints a scenario on the default scheduler, as `swift run Example`.
    func testShareTheDownloadGoesOnWhenTheFirstScreenClosesAndStopsWhenTheSecondDoes() {
        let events = run { ShareScenario.run(timeline: $0) }

        XCTAssertEqual(events.filter { $0.subject == "download" && $0.kind == .started }.count, 1, "one download")
        XCTAssertFalse(subjects(.finished, in: events).contains("download"), "it never finished")
        XCTAssertTrue(subjects(.outcome, in: events).isEmpty, "no screen showed the image")

        let headerOpened = index(of: .started, "header screen", in: events)
        let detailOpened = index(of: .started, "detail screen", in: events)
        let headerClosed = index(of: .cancelRequested, "header screen", in: events)
        let detailClosed = index(of: .cancelRequested, "detail screen", in: events)
        let stopped = index(of: .cancelHandler, "download", in: events)
        XCTAssertLessThan(headerOpened, index(of: .started, "download", in: events))
        XCTAssertLessThan(index(of: .started, "download", in: events), detailOpened)
        XCTAssertTrue(events[detailOpened].message.contains("joins the download in flight"))
        XCTAssertLessThan(detailOpened, headerClosed)
        XCTAssertLessThan(headerClosed, index(of: .rejectedByCancel, "header screen", in: events))
        XCTAssertLessThan(headerClosed, detailClosed)
        XCTAssertLessThan(detailClosed, stopped, "the download stops only when the last screen closes")
        XCTAssertLessThan(stopped, index(of: .rejectedByCancel, "detail screen", in: events))
        XCTAssertEqual(events[stopped].milliseconds, 400)
        XCTAssertEqual(events.last?.subject, "(end)")
    }

    // The render's body runs on a global queue while the scenario's clock is virtual: the test
    // holds the body at row 5 while the screen closes, then lets it go on. It stops at its next
    // check, so it has rendered exactly rows 0 to 5, whatever the speed of the machine.
    func testRenderARunningBodyStopsAtItsNextCheckOnceTheScreenCloses() {
        let scheduler = TestScheduler()
        let timeline = Timeline(scheduler: scheduler)
        let atRow5 = Handshake()
        let goOn = Handshake()
        let rowsRendered = Counter()
        let over = RenderScenario.run(timeline: timeline, rows: 1_000) { row in
            _ = rowsRendered.increment()
            if row == 5 {
                atRow5.signal()
                goOn.wait()
            }
            return UInt64(row)
        }
        scheduler.advance(by: 0.1)  // the download finishes; the map body starts on a global queue
        XCTAssertTrue(atRow5.wait(), "the render is running")
        scheduler.advance(to: Double(RenderScenario.closeAfter) / 1_000)  // the screen closes
        goOn.signal()
        XCTAssertTrue(eventually { timeline.events.contains { $0.kind == .stopped } })
        scheduler.run()
        XCTAssertNotNil(waitForValue(over), "the scenario ends once the body has returned")

        let events = timeline.events
        XCTAssertEqual(rowsRendered.value, 6, "rows 0 to 5, then the check before row 6 threw")
        let started = index(of: .body, "render", in: events)
        let closed = index(of: .cancelRequested, "screen", in: events)
        let onCancel = index(of: .cancelHandler, "render", in: events)
        let returned = events.firstIndex { $0.subject == "screen" && $0.message.hasPrefix("cancel() returned") } ?? -1
        let stopped = index(of: .stopped, "render", in: events)
        XCTAssertLessThan(started, closed)
        XCTAssertLessThan(closed, onCancel)
        XCTAssertLessThan(onCancel, returned, "the token's onCancel runs before cancel() returns")
        XCTAssertLessThan(returned, stopped)
        XCTAssertLessThan(closed, index(of: .rejectedByCancel, "screen", in: events))
        XCTAssertTrue(events[stopped].message.contains("stopped after 6 of 1000 rows"))
        XCTAssertEqual(events[stopped].milliseconds, RenderScenario.closeAfter, "no virtual time passed")
        XCTAssertFalse(subjects(.finished, in: events).contains("render"), "the render never ran to its end")
        XCTAssertTrue(subjects(.outcome, in: events).isEmpty, "no thumbnail shown")
        XCTAssertEqual(events.last?.message, "the render stopped 0 ms after the screen closed; thumbnail shown: no")
    }

    func testRunnerPrintsHeadingIntroductionAndTimeline() {
        let lines = Recorder<String>()
        let over = Handshake()
        ExampleRunner.run([.mirrors]) { line in lines.append(line) }.done(on: nil) { over.signal() }
        XCTAssertTrue(over.wait(seconds: 20))
        let output = lines.all
        XCTAssertEqual(output.first, "== mirrors: race(fulfilled:autoCancel: true) of four simulated mirrors")
        XCTAssertTrue(output.contains { $0.contains("race") && $0.contains("won by us-east") })
    }
}
