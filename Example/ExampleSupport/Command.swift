import Foundation

/// What the command line asked for.
public enum Command: Equatable, Sendable {
    /// No subcommand: every scenario, one after the other.
    case all
    /// `mirrors`: the simulated race.
    case mirrors
    /// `mirrors --url U --url U…`: the race over real URLs.
    case mirrorURLs([URL])
    /// `subtasks`.
    case subtasks
    /// `adopt`.
    case adopt
    /// `search`.
    case search
    /// `share`.
    case share
    /// `render`.
    case render
    /// `help`, `--help`, `-h`.
    case help

    /// Why the arguments were not understood.
    public struct UsageError: Error, CustomStringConvertible, Equatable {
        /// The problem, in one line.
        public let description: String
    }

    /// The usage text.
    public static let usage = """
        usage: Example [mirrors [--url URL --url URL ...] | subtasks | adopt | search | share | render | help]

          (none)     run the six scenarios below, one after the other (no network)
          mirrors    race simulated mirrors with autoCancel: the first answer wins, the
                     others are stopped; with --url, race real URLs instead
          subtasks   a task built from sub-promises (cancelPromise, when(_:while:)),
                     cancelled half-way
          adopt      existing Promise code made cancellable with cancellize() and
                     asCancellable(), cancelled from another thread
          search     search-as-you-type: each keystroke cancels the previous search
                     (LatestWins); a flaky backend is retried with exponential backoff
          share      two screens load the same image through one download
                     (InFlightCoalescer): the first closes and the download goes on,
                     the second closes and the download stops
          render     a CPU-bound map(on: .global()) step is running when its screen
                     closes: it checks CancellationToken.current and stops at its next row
        """

    /// Parses the arguments that follow the program name.
    public static func parse(_ arguments: [String]) throws -> Command {
        guard let first = arguments.first else { return .all }
        let rest = Array(arguments.dropFirst())
        switch first {
        case "help", "--help", "-h":
            guard rest.isEmpty else { throw UsageError(description: "help takes no arguments") }
            return .help
        case "subtasks", "adopt", "search", "share", "render":
            guard rest.isEmpty else { throw UsageError(description: "\(first) takes no arguments") }
            switch first {
            case "subtasks": return .subtasks
            case "adopt": return .adopt
            case "search": return .search
            case "share": return .share
            default: return .render
            }
        case "mirrors":
            return try parseMirrors(rest)
        default:
            throw UsageError(description: "unknown subcommand '\(first)'")
        }
    }

    private static func parseMirrors(_ arguments: [String]) throws -> Command {
        var urls: [URL] = []
        var remaining = arguments[...]
        while let option = remaining.popFirst() {
            guard option == "--url" else { throw UsageError(description: "unknown option '\(option)'") }
            guard let value = remaining.popFirst() else { throw UsageError(description: "--url needs a value") }
            guard let url = URL(string: value), let scheme = url.scheme?.lowercased(),
                scheme == "http" || scheme == "https", url.host != nil
            else { throw UsageError(description: "not an http(s) URL: '\(value)'") }
            urls.append(url)
        }
        return urls.isEmpty ? .mirrors : .mirrorURLs(urls)
    }
}
