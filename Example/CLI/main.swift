// `swift run Example [mirrors [--url U…] | subtasks | adopt | search | share | render]`: see ExampleSupport for the code
// of each scenario; this file only parses the arguments and waits.
import CancellablePromiseKit
import ExampleSupport
import Foundation

let command: Command
do {
    command = try Command.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("Example: \(error)\n\n\(Command.usage)\n".utf8))
    exit(64)
}

/// Writes a line to standard output at once (unbuffered, so a pipe sees the timeline live).
@Sendable func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

if command == .help {
    say(Command.usage)
    exit(0)
}

if command == .all {
    say("CancellablePromiseKit example: six scenarios, times in ms since each one started.")
    say("Run `swift run Example help` for the subcommands.\n")
}
// Every handler of the scenarios runs on a timer queue or synchronously (`on: nil`); `hang`
// keeps the main thread waiting (and its run loop turning) until the last scenario is over.
try hang(ExampleRunner.run(Scenario.scenarios(for: command)) { say($0) }.asPromise())
