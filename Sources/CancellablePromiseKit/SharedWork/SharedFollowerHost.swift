/// What a follower's ticket reports to: the host of the shared work it follows.
///
/// A protocol, so that `SharedFollowerTicket` is not generic: a generic class would look up its
/// type metadata at run time for every follower, as the library runs unspecialized.
protocol SharedFollowerHost: AnyObject, Sendable {
    /// The follower `key` was cancelled (its cancellation rejected it already).
    func cancel(_ key: FollowerKey)
    /// The follower `key` was abandoned: nothing can cancel it any more.
    func abandon(_ key: FollowerKey)
}
