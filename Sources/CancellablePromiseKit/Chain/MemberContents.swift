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

    var isEmpty: Bool { cancelBody == nil && link == nil && target == nil }
}
