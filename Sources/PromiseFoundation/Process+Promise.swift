import CancellablePromiseKit
import Foundation
import PromiseCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// Child processes as promises. Each promise has its process attached (a package-level hook of
// PromiseCore), so `cancellize()` then `cancel()` terminates the process. Foundation's `Process`
// reaps its children itself, so a terminated child does not stay behind as a zombie.

/// What a process run with `run(.promise)` did: how it ended and everything it wrote.
public struct ProcessOutput: Sendable, Equatable {
    /// The exit status (`reason == .exit`) or the number of the signal that ended it.
    public let terminationStatus: Int32
    /// Whether the process exited or was ended by a signal.
    public let terminationReason: Process.TerminationReason
    /// Everything the process wrote to its standard output.
    public let standardOutput: Data
    /// Everything the process wrote to its standard error.
    public let standardError: Data

    /// Creates an output (the promise builds it; public for tests and mocks).
    public init(
        terminationStatus: Int32,
        terminationReason: Process.TerminationReason,
        standardOutput: Data,
        standardError: Data
    ) {
        self.terminationStatus = terminationStatus
        self.terminationReason = terminationReason
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    /// The standard output as UTF-8 text (invalid bytes replaced).
    public var outputString: String { String(decoding: standardOutput, as: UTF8.self) }

    /// The standard error as UTF-8 text (invalid bytes replaced).
    public var errorString: String { String(decoding: standardError, as: UTF8.self) }

    /// `true` when the process exited with status 0.
    public var succeeded: Bool { terminationReason == .exit && terminationStatus == 0 }
}

extension Process {
    /// PromiseKit's error for a process that did not succeed.
    public enum PMKError: Error, @unchecked Sendable {
        // @unchecked: `Process` is not declared `Sendable`; the error only carries a finished
        // process, read for its status and arguments.
        /// The process exited with a non-zero status or was ended by a signal; its output, if it
        /// could be read, is attached.
        case execution(process: Process, standardOutput: String?, standardError: String?)
        /// The executable could not be run; the associated value is its path.
        case notExecutable(String?)
    }

    /// Launches the process and returns a promise of everything it wrote and how it ended.
    ///
    /// Standard output and standard error are replaced by pipes that are read while the process
    /// runs (so it never blocks on a full pipe), and the promise is fulfilled once the process
    /// has exited and both pipes are closed, whatever the exit status: look at
    /// ``ProcessOutput/terminationStatus`` or ``ProcessOutput/succeeded``, or chain
    /// `validate()` to reject unsuccessful runs. If the process cannot be launched the promise
    /// is rejected with the launch error. The promise settles on a background queue; handlers
    /// run where their `on:` says. An existing `terminationHandler` is still called.
    ///
    /// Cancelling: the process is attached to the promise, so `run(.promise).cancellize()`
    /// gives a `CancellablePromise` whose `cancel()` sends the process `SIGTERM` (and `SIGKILL`
    /// if it is still running `killAfter` seconds later, on `scheduler`'s clock) and rejects at
    /// once with `CancellablePromiseError.cancelled`. The `SIGKILL` is unscheduled as soon as
    /// the process exits, so a process that ends on `SIGTERM` leaves nothing on `scheduler`. Foundation reaps the terminated process.
    /// Only the process itself is signalled: children it started itself keep running. An
    /// infinite or NaN `killAfter` never sends `SIGKILL`.
    ///
    /// ```swift
    /// let process = Process()
    /// process.executableURL = URL(fileURLWithPath: "/bin/sh")
    /// process.arguments = ["-c", "echo hello"]
    /// process.run(.promise).done { output in
    ///     print(output.terminationStatus, output.outputString)   // 0 "hello\n"
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - killAfter: how long a cancelled process has between `SIGTERM` and `SIGKILL`.
    ///   - scheduler: the clock of that wait (the wall clock by default); the `SIGKILL` is sent
    ///     where the scheduler runs its work.
    public func run(
        _: PMKNamespacer, killAfter: TimeInterval = 5, scheduler: any PromiseScheduler = DispatchScheduler.global
    ) -> Promise<ProcessOutput> {
        let promise = Promise<ProcessOutput>._makePending()
        let outPipe = Pipe(), errPipe = Pipe()
        standardOutput = outPipe
        standardError = errPipe
        let captured = CapturedOutput()
        let finished = DispatchGroup()
        finished.enter()  // termination
        let scheduledKill = ScheduledKill()
        let previousHandler = terminationHandler
        terminationHandler = { process in
            scheduledKill.processExited()
            previousHandler?(process)
            finished.leave()
        }
        do {
            try run()
        } catch {
            terminationHandler = previousHandler
            finished.leave()  // a group must not be released while entered
            return Promise(error: error)
        }
        for (pipe, isOutput) in [(outPipe, true), (errPipe, false)] {
            finished.enter()
            DispatchQueue.global().async {
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                captured.store(data, isOutput: isOutput)
                finished.leave()
            }
        }
        let process = UncheckedSendable(self)
        finished.notify(queue: .global()) {
            let (out, err) = captured.values
            promise.resolve(
                .fulfilled(
                    ProcessOutput(
                        terminationStatus: process.value.terminationStatus,
                        terminationReason: process.value.terminationReason,
                        standardOutput: out,
                        standardError: err)))
        }
        attachTermination(to: promise, scheduledKill: scheduledKill, killAfter: killAfter, scheduler: scheduler)
        return promise
    }

    /// Launches the process and returns a promise of its standard output and standard error
    /// pipes, fulfilled once it has exited with status 0 (PromiseKit's `launch(.promise)`).
    ///
    /// Otherwise the promise is rejected with `Process.PMKError.execution`, carrying what the
    /// process wrote. The pipes are read only after the process has exited, so a process that
    /// writes more than a pipe holds (64 KiB on Linux) blocks until then: use
    /// ``run(_:killAfter:scheduler:)``, which captures the output while the process runs. The promise
    /// settles on a background queue (Foundation's termination handler); handlers run where
    /// their `on:` says. An existing `terminationHandler` is still called.
    ///
    /// Cancelling, as for ``run(_:killAfter:scheduler:)``: `launch(.promise).cancellize()` then
    /// `cancel()` terminates the process (`SIGTERM`, then `SIGKILL` after `killAfter` seconds on
    /// `scheduler`'s clock, unscheduled if the process exits first) and rejects at once with
    /// `CancellablePromiseError.cancelled`.
    public func launch(
        _: PMKNamespacer, killAfter: TimeInterval = 5, scheduler: any PromiseScheduler = DispatchScheduler.global
    ) -> Promise<(out: Pipe, err: Pipe)> {
        let promise = Promise<(out: Pipe, err: Pipe)>._makePending()
        let outPipe = Pipe(), errPipe = Pipe()
        standardOutput = outPipe
        standardError = errPipe
        let scheduledKill = ScheduledKill()
        let previousHandler = terminationHandler
        terminationHandler = { process in
            scheduledKill.processExited()
            previousHandler?(process)
            guard process.terminationReason == .exit, process.terminationStatus == 0 else {
                let out = outPipe.fileHandleForReading.readDataToEndOfFile()
                let err = errPipe.fileHandleForReading.readDataToEndOfFile()
                promise.resolve(
                    .rejected(
                        PMKError.execution(
                            process: process,
                            standardOutput: String(data: out, encoding: .utf8),
                            standardError: String(data: err, encoding: .utf8))))
                return
            }
            promise.resolve(.fulfilled((outPipe, errPipe)))
        }
        do {
            try run()
        } catch {
            terminationHandler = previousHandler
            return Promise(error: error)
        }
        attachTermination(to: promise, scheduledKill: scheduledKill, killAfter: killAfter, scheduler: scheduler)
        return promise
    }

    /// Attaches this (running) process to `promise`: cancelling terminates it. `scheduledKill`
    /// is told by the termination handler when the process exits.
    private func attachTermination<T>(
        to promise: Promise<T>, scheduledKill: ScheduledKill, killAfter: TimeInterval, scheduler: any PromiseScheduler
    ) {
        let box = ProcessTerminator(
            process: self, promise: promise, scheduledKill: scheduledKill, killAfter: killAfter, scheduler: scheduler)
        promise.attachCancellation { box.terminate() }
    }
}

extension Process.PMKError: CustomStringConvertible, LocalizedError {
    /// Says how the process ended and what it wrote to standard error.
    public var description: String {
        switch self {
        case .execution(let process, _, let standardError):
            let name = process.executableURL?.lastPathComponent ?? "process"
            let how =
                process.terminationReason == .exit
                ? "exited with status \(process.terminationStatus)"
                : "was ended by signal \(process.terminationStatus)"
            let detail = standardError.map { $0.isEmpty ? "" : ": \($0)" } ?? ""
            return "\(name) \(how)\(detail)"
        case .notExecutable(let path):
            return "Not executable: \(path ?? "(no path)")"
        }
    }

    /// The same as `description`.
    public var errorDescription: String? { description }
}

/// The error `validate()` rejects a process's output with when it did not exit with status 0.
public struct ProcessExitError: Error, Sendable, Equatable {
    /// What the process did, its output included.
    public let output: ProcessOutput
}

extension ProcessExitError: CustomStringConvertible, LocalizedError {
    /// "exited with status 3: <standard error>" or "was ended by signal 15".
    public var description: String {
        let how =
            output.terminationReason == .exit
            ? "The process exited with status \(output.terminationStatus)"
            : "The process was ended by signal \(output.terminationStatus)"
        let err = output.errorString
        return err.isEmpty ? how : "\(how): \(err)"
    }

    /// The same as `description`.
    public var errorDescription: String? { description }
}

extension Promise where T == ProcessOutput {
    /// Rejects with ``ProcessExitError`` unless the process exited with status 0; otherwise
    /// passes the output on. Runs synchronously on the thread that settles this promise; the
    /// process stays attached, so `cancellize()` on the result still terminates it.
    public func validate() -> Promise<ProcessOutput> {
        let validated = map(on: nil) { output -> ProcessOutput in
            guard output.succeeded else { throw ProcessExitError(output: output) }
            return output
        }
        if let task = _attachedCancellation {
            validated.attachCancellation(task)
        }
        return validated
    }
}

extension CancellablePromise where T == ProcessOutput {
    /// Rejects with ``ProcessExitError`` unless the process exited with status 0. Same
    /// cancellable chain; runs synchronously on the settling thread, not once cancelled.
    public func validate() -> CancellablePromise<ProcessOutput> {
        map(on: nil) { output -> ProcessOutput in
            guard output.succeeded else { throw ProcessExitError(output: output) }
            return output
        }
    }
}

// MARK: - Printing a launched process's output

extension Promise where T == (out: Pipe, err: Pipe) {
    /// Prints what the process wrote, for debugging: once it has exited with status 0, the text
    /// of its standard output and of its standard error (UTF-8, invalid bytes replaced), each
    /// on a line of its own after `stdout:` and `stderr:`; if it failed, the error. The result is
    /// passed on unchanged.
    ///
    /// Printing reads both pipes to their end, so code after it finds them empty: read the text
    /// in the same handler instead when the program needs it. The pipes are read and the text
    /// printed synchronously on the thread that settles this promise (a background queue). The
    /// process stays attached: `launch(.promise).print().cancellize()` still terminates it.
    ///
    /// ```swift
    /// process.launch(.promise).print().done { _ in … }
    /// ```
    public func print() -> Promise<T> {
        _print { Swift.print($0) }
    }

    /// `print()` writing each line with `write` (tests pass a recorder).
    package func _print(_ write: @escaping @Sendable (String) -> Void) -> Promise<T> {
        let printed = tap(on: nil) { result in
            switch result {
            case .fulfilled(let pipes):
                let out = pipes.out.fileHandleForReading.readDataToEndOfFile()
                let err = pipes.err.fileHandleForReading.readDataToEndOfFile()
                write("stdout: " + String(decoding: out, as: UTF8.self))
                write("stderr: " + String(decoding: err, as: UTF8.self))
            case .rejected(let error):
                write("\(error)")
            }
        }
        if let task = _attachedCancellation {
            printed.attachCancellation(task)
        }
        return printed
    }
}

// MARK: - Internals

/// The output read from the two pipes, from two reading threads.
private final class CapturedOutput: Sendable {
    private let data = Locked((output: Data(), error: Data()))

    func store(_ data: Data, isOutput: Bool) {
        self.data.withLock { if isOutput { $0.output = data } else { $0.error = data } }
    }

    var values: (Data, Data) {
        data.withLock { ($0.output, $0.error) }
    }
}

/// Terminates a process for a cancelled promise. Holds the promise weakly (the promise holds
/// this through its attachment) and the process strongly until the promise settles.
private final class ProcessTerminator<T>: @unchecked Sendable {
    // @unchecked: the references are written once, in `init`; `Process`'s `isRunning`,
    // `terminate()` and `processIdentifier` are safe from any thread, and `Promise` is
    // thread-safe.
    private let process: Process
    private weak var promise: Promise<T>?
    private let scheduledKill: ScheduledKill
    private let killAfter: TimeInterval
    private let scheduler: any PromiseScheduler

    init(
        process: Process, promise: Promise<T>, scheduledKill: ScheduledKill, killAfter: TimeInterval,
        scheduler: any PromiseScheduler
    ) {
        self.process = process
        self.promise = promise
        self.scheduledKill = scheduledKill
        self.killAfter = killAfter
        self.scheduler = scheduler
    }

    func terminate() {
        promise?.resolve(.rejected(CancellablePromiseError.cancelled))
        guard process.isRunning else { return }
        process.terminate()
        // NaN counts as infinitely many seconds: never.
        guard let delay = scheduledDelaySeconds(killAfter) else { return }
        let weakProcess = WeakProcess(process)
        // Unscheduled when the process exits (see `ScheduledKill`), so a process that ended on
        // SIGTERM leaves nothing on the scheduler.
        let work = scheduler.schedule(after: delay) {
            // Still running (SIGTERM ignored or handled slowly): kill it. `isRunning` is only
            // true before Foundation reaped the process, so the pid cannot have been reused.
            guard let process = weakProcess.process, process.isRunning else { return }
            kill(process.processIdentifier, SIGKILL)
        }
        scheduledKill.scheduled(work)
    }
}

/// The `SIGKILL` a cancellation schedules, unscheduled when the process exits (the termination
/// handler reports it), whichever comes first: scheduled after the exit, it is unscheduled at
/// once.
private final class ScheduledKill: Sendable {
    private enum State {
        case idle
        case scheduled(any ScheduledWork)
        case exited
    }

    private let state = Locked(State.idle)

    /// The kill was scheduled as `work`.
    func scheduled(_ work: any ScheduledWork) {
        let exited = state.withLock { state -> Bool in
            guard case .idle = state else { return true }
            state = .scheduled(work)
            return false
        }
        if exited { work.cancel() }
    }

    /// The process exited: the kill, if scheduled, is unscheduled.
    func processExited() {
        let work = state.withLock { state -> (any ScheduledWork)? in
            defer { state = .exited }
            guard case .scheduled(let work) = state else { return nil }
            return work
        }
        work?.cancel()
    }
}

/// A `Process` held weakly: what a cancellation or a stop handler keeps of a process it may have
/// to signal but must not keep alive.
final class WeakProcess: @unchecked Sendable {
    // @unchecked: the reference is written once, in `init`, and only loaded afterwards (the
    // runtime loads weak references atomically); `Process` is used from any thread by the code
    // that holds this box only through its thread-safe members (`isRunning`,
    // `processIdentifier`).
    private(set) weak var process: Process?
    init(_ process: Process) { self.process = process }
}
