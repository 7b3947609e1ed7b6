/// What `ChainState.runningBodyToken` answers.
enum RunningBodyToken: Equatable {
    /// The member's token, pending (made by this read, or an earlier one).
    case token(CancellationToken)
    /// The member was cancelled (with its chain, or alone): a token already cancelled.
    case cancelled
    /// Nothing can cancel the member any more (its chain was abandoned): a token that never is.
    case none

    static func == (a: RunningBodyToken, b: RunningBodyToken) -> Bool {
        switch (a, b) {
        case (.token(let x), .token(let y)): return x === y
        case (.cancelled, .cancelled), (.none, .none): return true
        default: return false
        }
    }
}
