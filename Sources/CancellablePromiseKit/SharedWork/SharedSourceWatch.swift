import PromiseCore

/// What the completion handler of a piece of shared work's source captures: it reports the
/// result, and from its `deinit` that the handler was released (after the source settled, or
/// unsettled when nothing can settle the source any more).
///
/// Kept alive by the source's completion handler only; it keeps its host alive, and with it
/// the resolvers of the followers waiting (abandoned ones included). Reports run on the thread
/// that settles the source or releases its handler.
final class SharedSourceWatch<T>: Sendable {
    private let host: SharedWorkHost<T>

    init(_ host: SharedWorkHost<T>) {
        self.host = host
    }

    func settled(_ result: Result<T>) {
        host.sourceSettled(result)
    }

    deinit {
        host.sourceLost()
    }
}
