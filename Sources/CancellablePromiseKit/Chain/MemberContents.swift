import PromiseCore

/// What a member holds, released outside the lock (closures may own objects whose `deinit`
/// runs user code).
struct MemberContents {
    /// Stops the promise's task; called at most once, only while the promise is pending.
    var cancelBody: (() -> Void)?
    /// Chains this step waits on: cancelled with it.
    var link: CancelLink?
    /// The promise to reject when the chain is cancelled.
    var target: (any CancelTarget)?
    /// The token its running body read (`CancellationToken.current`), if any: cancelled with the
    /// member while it is pending, completed "not cancelled" when it leaves on its own.
    var token: CancellationToken?

    var isEmpty: Bool { cancelBody == nil && link == nil && target == nil && token == nil }

    /// Releases what a member that left the chain held, after the lock: its running body's
    /// token is completed "not cancelled", its link released through `LinkRelease` (without
    /// recursing), the rest as it goes.
    @inline(never)
    consuming func release() {
        if let token = token.take() { token.complete(cancelled: false) }
        guard let link = link.take() else { return }
        var links = [link]
        LinkRelease.release(&links)
    }
}
