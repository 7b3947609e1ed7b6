/// What a follower's cancel closure captures: it reports the follower cancelled when the closure
/// is called, and abandoned when the closure is released uncalled while the work goes on (the
/// follower's chain has no cancel handle left); once the follower has left or settled, a report
/// does nothing.
///
/// Kept alive by the follower's cancel closure only (its chain releases the closure once the
/// follower settled, was cancelled, or has no cancel handle left); it keeps its host alive, and
/// the keeper it was given (a shared promise's handle), if any. Reports run on the thread that
/// calls or releases the closure.
final class SharedFollowerTicket: Sendable {
    private let host: any SharedFollowerHost
    private let key: FollowerKey
    /// Kept alive while the follower can be cancelled; never used.
    private let keeper: (AnyObject & Sendable)?

    init(_ host: any SharedFollowerHost, _ key: FollowerKey, keeping keeper: (AnyObject & Sendable)?) {
        self.host = host
        self.key = key
        self.keeper = keeper
    }

    func cancelled() {
        host.cancel(key)
    }

    deinit {
        host.abandon(key)
    }
}
