import Foundation
import PromiseFoundation
import XCTest

/// `launch(.promise).print()`, PromiseKit's debugging aid for a process's output, with real
/// child processes (`/bin/sh`). The lines are recorded through the seam `print()` writes with.
final class ProcessPrintTests: XCTestCase {
    private func shell(_ script: String) -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        return process
    }

    /// After a successful run, `print()` writes the standard output and standard error after
    /// `stdout:` and `stderr:`, and passes the pipes on.
    func testPrintWritesBothOutputsAndPassesThePipesOn() throws {
        let lines = Recorder<String>()
        let printed = shell("echo hello; echo there >&2").launch(.promise)._print { lines.append($0) }
        let pipes = try XCTUnwrap(waitForValue(printed))
        XCTAssertEqual(lines.all, ["stdout: hello\n", "stderr: there\n"])
        XCTAssertTrue(
            pipes.out.fileHandleForReading.readDataToEndOfFile().isEmpty, "printing read the pipe to its end")
    }

    /// A failed run is printed as its error, and the rejection is passed on.
    func testPrintWritesTheErrorOfAFailedRun() throws {
        let lines = Recorder<String>()
        let printed = shell("echo broken >&2; exit 4").launch(.promise)._print { lines.append($0) }
        let error = try XCTUnwrap(waitForError(printed) as? Process.PMKError)
        XCTAssertEqual(lines.all, ["\(error)"])
        XCTAssertEqual(lines.all.first, "sh exited with status 4: broken\n")
    }

    /// The public `print()` passes the result on unchanged.
    func testPublicPrintPassesTheResultOn() throws {
        let pipes = try XCTUnwrap(waitForValue(shell("true").launch(.promise).print()))
        XCTAssertTrue(pipes.err.fileHandleForReading.readDataToEndOfFile().isEmpty)
    }

    /// The process stays attached through `print()`: cancelling `print().cancellize()`
    /// terminates it.
    func testCancellingAfterPrintTerminatesTheProcess() throws {
        let child = shell("exec sleep 30")
        let chain = child.launch(.promise, killAfter: .infinity)._print { _ in }.cancellize()
        XCTAssertTrue(child.isRunning)
        chain.cancel()
        XCTAssertEqual(chain.error as? CancellablePromiseError, .cancelled)
        XCTAssertTrue(eventually(seconds: 10) { !child.isRunning }, "SIGTERM ended the process")
        XCTAssertEqual(child.terminationReason, .uncaughtSignal)
    }
}
