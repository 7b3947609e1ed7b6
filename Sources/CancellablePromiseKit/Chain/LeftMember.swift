/// What a member that left its chain held: released after the lock (see
/// `ChainState.memberSettled`). (An attachment its promise had before it was listed, another
/// chain's storage, is told by the promise itself: it became a settle listener, see
/// PromiseCore's `replaceAttachment(with:key:)`.)
struct LeftMember {
    var contents = MemberContents()
    /// The token its running body read (see `ChainState.runningBodyToken`): it completes "not
    /// cancelled", the member having settled on its own.
    var token: CancellationToken?

    /// Releases what the member held; its link through `LinkRelease`, without recursing.
    mutating func release() {
        if let token {
            self.token = nil
            token.complete(cancelled: false)
        }
        if let link = contents.link {
            contents.link = nil
            var links = [link]
            LinkRelease.release(&links)
        }
    }
}
