import Foundation
import PromiseFoundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `Process` promises with real child processes (`/bin/sh`, `/bin/sleep`).
final class ProcessPromiseTests: XCTestCase {
    private func process(_ executable: String, _ arguments: String...) -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        return process
    }

    private func shell(_ script: String) -> Process {
        process("/bin/sh", "-c", script)
    }

    /// Cancels `promise`, which runs `child`, and waits until `child` has exited.
    private func cancel<T>(_ promise: CancellablePromise<T>, thenWaitUntilExitOf child: Process) {
        promise.cancel()
        child.waitUntilExit()
    }

    /// The process state letter from /proc (for example "S", or "Z" for a zombie), or `nil` once
    /// the process is gone (reaped).
    private func procState(_ pid: Int32) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ").first.map(String.init)
    }

    private func procName(_ pid: Int32) -> String? {
        (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: run(.promise)

    func testRunCapturesExitStatusAndBothOutputs() throws {
        let result = waitForResult(shell("echo out; echo err >&2; exit 3").run(.promise))
        let output = try XCTUnwrap(result?.fulfilledValue)
        XCTAssertEqual(output.terminationReason, .exit)
        XCTAssertEqual(output.terminationStatus, 3)
        XCTAssertEqual(output.outputString, "out\n")
        XCTAssertEqual(output.errorString, "err\n")
        XCTAssertFalse(output.succeeded)
    }

    func testRunCapturesOutputLargerThanAPipeHolds() throws {
        let result = waitForResult(shell("head -c 1000000 /dev/zero; head -c 300000 /dev/zero >&2").run(.promise))
        let output = try XCTUnwrap(result?.fulfilledValue)
        XCTAssertTrue(output.succeeded)
        XCTAssertEqual(output.standardOutput.count, 1_000_000)
        XCTAssertEqual(output.standardError.count, 300_000)
    }

    func testValidateRejectsAFailedRun() throws {
        let result = waitForResult(shell("echo bad input >&2; exit 2").run(.promise).validate())
        let error = try XCTUnwrap(result?.rejectedError as? ProcessExitError)
        XCTAssertEqual(error.output.terminationStatus, 2)
        XCTAssertEqual(error.localizedDescription, "The process exited with status 2: bad input\n")
        XCTAssertNotNil(waitForResult(shell("true").run(.promise).validate())?.fulfilledValue)
        XCTAssertNotNil(waitForResult(shell("true").run(.promise).cancellize().validate())?.fulfilledValue)
    }

    func testRunRejectsWhenTheExecutableCannotBeLaunched() {
        let result = waitForResult(process("/nonexistent/program").run(.promise))
        let error = result?.rejectedError
        XCTAssertNotNil(error)
        XCTAssertFalse(error?.isCancelled ?? true)
        let launched = waitForResult(process("/nonexistent/program").launch(.promise))
        XCTAssertNotNil(launched?.rejectedError)
    }

    func testAnExistingTerminationHandlerIsStillCalled() {
        let called = Handshake()
        let child = shell("exit 0")
        child.terminationHandler = { _ in called.signal() }
        XCTAssertNotNil(waitForResult(child.run(.promise))?.fulfilledValue)
        XCTAssertTrue(called.wait(seconds: 5), "termination handler")
    }

    // MARK: launch(.promise) (PromiseKit's form)

    func testLaunchFulfilsWithThePipes() throws {
        let result = waitForResult(shell("echo hello; echo there >&2").launch(.promise))
        let (out, err) = try XCTUnwrap(result?.fulfilledValue)
        XCTAssertEqual(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self), "hello\n")
        XCTAssertEqual(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self), "there\n")
    }

    func testLaunchRejectsANonZeroExitWithTheOutput() throws {
        let result = waitForResult(shell("echo partial; echo broken >&2; exit 4").launch(.promise))
        let error = try XCTUnwrap(result?.rejectedError as? Process.PMKError)
        guard case .execution(let process, let out, let err) = error else { return XCTFail("\(error)") }
        XCTAssertEqual(process.terminationStatus, 4)
        XCTAssertEqual(out, "partial\n")
        XCTAssertEqual(err, "broken\n")
        XCTAssertEqual(error.localizedDescription, "sh exited with status 4: broken\n")
    }

    // MARK: Cancellation

    func testCancelTerminatesTheProcessAndItIsReaped() throws {
        let child = process("/bin/sleep", "30")
        let running = child.run(.promise).cancellize()
        let pid = child.processIdentifier
        XCTAssertTrue(child.isRunning)
        XCTAssertNotNil(procState(pid))
        let cancelled = Date()
        running.cancel()
        XCTAssertEqual(running.error as? CancellablePromiseError, .cancelled, "rejected at once")
        // Gone from the process table: terminated and reaped, never left a zombie.
        var sawZombieFor = 0
        XCTAssertTrue(
            eventually(seconds: 5) {
                if procState(pid) == "Z" { sawZombieFor += 1 }
                return procState(pid) == nil
            }, "pid \(pid) still present (state \(procState(pid) ?? "-"))")
        let reapedAfter = Date().timeIntervalSince(cancelled)
        child.waitUntilExit()
        XCTAssertEqual(child.terminationReason, .uncaughtSignal)
        XCTAssertEqual(child.terminationStatus, SIGTERM)
        XCTAssertLessThan(reapedAfter, 2)
        print("cancel() → child terminated and reaped in \(String(format: "%.1f", reapedAfter * 1000)) ms")
    }

    func testCancelKillsAProcessThatIgnoresSIGTERM() throws {
        let scheduler = TestScheduler()
        let child = shell("trap '' TERM; exec /bin/sleep 30")
        let running = child.run(.promise, killAfter: 0.2, scheduler: scheduler).cancellize()
        let pid = child.processIdentifier
        // Wait for the exec, so that SIGTERM is ignored by the sleeping process.
        XCTAssertTrue(eventually { procName(pid) == "sleep" })
        running.cancel()
        XCTAssertTrue(running.isRejected)
        XCTAssertEqual(scheduler.pendingCount, 1, "SIGKILL is scheduled for killAfter")
        // A fixed wait: a process that did not ignore SIGTERM would be gone by then, and no
        // event tells that a signal was ignored. (The SIGKILL waits on virtual time.)
        Thread.sleep(forTimeInterval: 0.1)
        XCTAssertNotNil(procState(pid), "SIGTERM is ignored: still running before killAfter")
        scheduler.advance(by: 0.2)
        XCTAssertTrue(eventually(seconds: 5) { procState(pid) == nil }, "not killed and reaped")
        child.waitUntilExit()
        XCTAssertEqual(child.terminationReason, .uncaughtSignal)
        XCTAssertEqual(child.terminationStatus, SIGKILL)
    }

    /// A cancelled process that exits on `SIGTERM` unschedules its `SIGKILL`: nothing is left on
    /// the scheduler once it exited.
    func testAProcessThatExitsOnSIGTERMLeavesNothingScheduled() throws {
        let scheduler = TestScheduler()
        let child = process("/bin/sleep", "30")
        let running = child.run(.promise, killAfter: 5, scheduler: scheduler).cancellize()
        // The cancel schedules the SIGKILL (unless the process already exited: then it is
        // unscheduled at once); see testCancelKillsAProcessThatIgnoresSIGTERM.
        cancel(running, thenWaitUntilExitOf: child)
        XCTAssertEqual(child.terminationStatus, SIGTERM)
        XCTAssertTrue(eventually(seconds: 5) { scheduler.pendingCount == 0 }, "the SIGKILL was left scheduled")
    }

    /// The same for `launch(.promise)`.
    func testALaunchedProcessThatExitsOnSIGTERMLeavesNothingScheduled() throws {
        let scheduler = TestScheduler()
        let child = process("/bin/sleep", "30")
        let launched = child.launch(.promise, killAfter: 5, scheduler: scheduler).cancellize()
        // The cancel schedules the SIGKILL (unless the process already exited: then it is
        // unscheduled at once); see testCancelKillsAProcessThatIgnoresSIGTERM.
        cancel(launched, thenWaitUntilExitOf: child)
        XCTAssertTrue(eventually(seconds: 5) { scheduler.pendingCount == 0 }, "the SIGKILL was left scheduled")
    }

    func testCancellingALaunchedProcessTerminatesIt() throws {
        let child = process("/bin/sleep", "30")
        let launched = child.launch(.promise).cancellize()
        let pid = child.processIdentifier
        launched.cancel()
        XCTAssertEqual(launched.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(eventually { procState(pid) == nil })
        child.waitUntilExit()
        XCTAssertEqual(child.terminationStatus, SIGTERM)
    }

    func testTimeoutTerminatesTheProcess() throws {
        let child = process("/bin/sleep", "30")
        let scheduler = TestScheduler()
        let timed = child.run(.promise).cancellize().timeout(seconds: 0.2, scheduler: scheduler)
        scheduler.advance(by: 0.2)
        let error = try XCTUnwrap(timed.error as? PromiseTimeoutError)
        XCTAssertEqual(error.seconds, 0.2)
        child.waitUntilExit()
        XCTAssertEqual(child.terminationReason, .uncaughtSignal)
    }

    func testCancellingAFinishedRunDoesNothing() throws {
        let child = shell("echo done")
        let run = child.run(.promise).cancellize()
        XCTAssertEqual(waitForResult(run)?.fulfilledValue?.outputString, "done\n")
        run.cancel()
        XCTAssertEqual(run.value?.terminationStatus, 0)
    }

    func testACancelledRunReleasesItsPromiseAndClosures() throws {
        weak var weakPromise: Promise<ProcessOutput>?
        let released = SendableBox(false)
        let child = process("/bin/sleep", "30")
        do {
            let source = child.run(.promise)
            weakPromise = source
            let captured = DeinitFlag(released)
            let chain = source.cancellize().map(on: nil) { output -> Int32 in
                _ = captured
                return output.terminationStatus
            }
            chain.cancel()
        }
        child.waitUntilExit()
        XCTAssertTrue(eventually { released.value }, "the chain's closure was not released")
        XCTAssertTrue(eventually { weakPromise == nil }, "the promise was not released")
    }
}
