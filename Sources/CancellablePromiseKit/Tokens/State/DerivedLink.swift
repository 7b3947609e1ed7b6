/// An operand's entry for a token derived from it: holds that token weakly, and what the
/// operand's completion does to it (with the combinator's closures and their captures).
final class DerivedLink: @unchecked Sendable {
    // @unchecked: `hasRun` is guarded by the target token's lock; `body` is only called by the
    // operand that runs the link, once.
    weak var target: CancellationToken?
    let body: (CancellationToken, Bool) -> Void
    /// Set under the target's lock once the operand has started running the link.
    var hasRun = false

    init(target: CancellationToken, body: @escaping (CancellationToken, Bool) -> Void) {
        self.target = target
        self.body = body
    }
}
