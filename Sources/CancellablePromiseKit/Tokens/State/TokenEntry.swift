import Dispatch
import PromiseCore

struct TokenEntry {
    let id: UInt64
    let queue: DispatchQueue?
    let action: TokenAction

    /// Runs (or skips) the handler for a token completed with `cancelled`. Outside every lock.
    func run(cancelled: Bool) {
        switch action {
        case .onCancel(let body):
            guard cancelled else { return }
            perform(body)
        case .onComplete(let body):
            perform { body(cancelled) }
        case .cancel(let weak):
            guard cancelled else { return }
            perform { weak.cancel() }
        case .derived(let link):
            guard let target = link.target else { return }  // freed: nobody can observe it
            target.linkDidRun(link)
            TokenCompletions.runLink { link.body(target, cancelled) }
        case .removed:
            return
        }
    }

    private func perform(_ body: @escaping () -> Void) {
        guard let queue else {
            body()
            return
        }
        let boxed = UncheckedSendable(body)
        queue.async { boxed.value() }
    }
}
