import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// The fixture of the state machine tests (ChainStateTests and the files beside it): chains whose
// members are listed by hand, probes that tell whether a closure was called or released, and
// assertions on what an event returned (its `ChainOutcome`, read through its `summary`, the same
// in debug and release builds). The machine's state is private: what a test knows of it, it
// learns from what an event returns, often sent to a copy (`ChainState` is a value) so that the
// chain itself does not change.

// MARK: - Fixture

/// An error a test cancels with, told apart by its number.
struct ChainError: Error, Equatable {
    let number: Int
}

/// Counts the calls of the closures it makes, and tells whether they were released: each
/// closure holds the only reference to an object the probe sees weakly.
final class Probe {
    private final class Capture {}

    private(set) var calls = 0
    private weak var capture: Capture?

    /// A closure that counts its calls here.
    func makeBody() -> () -> Void {
        let capture = Capture()
        self.capture = capture
        return { [self, capture] in
            withExtendedLifetime(capture) {}
            calls += 1
        }
    }

    /// Whether the closure `makeBody` made is gone.
    var isReleased: Bool { capture == nil }
}

/// An attachment that records the keys it is told settled.
final class RecordingAttachment: PromiseAttachment {
    private(set) var settledKeys: [UInt64] = []

    func promiseDidSettle(key: UInt64) { settledKeys.append(key) }

    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

/// Fulfils a promise when the test is done with it (if it is still pending), so that a promise
/// left pending on purpose is not reported by PromiseCore as one nothing can settle.
final class SettledAtTheEnd {
    let resolver: Resolver<Int>

    init(_ resolver: Resolver<Int>) { self.resolver = resolver }

    deinit { resolver.fulfill(0) }
}

/// A member listed by hand: its key, its pending promise and the resolver that settles it, and
/// the probe of its cancel closure (a step has none: the probe's closure is never made).
struct Member {
    let key: SlotKey
    let promise: Promise<Int>
    private let settlement: SettledAtTheEnd
    let cancel: Probe

    init(key: SlotKey, promise: Promise<Int>, resolver: Resolver<Int>, cancel: Probe) {
        self.key = key
        self.promise = promise
        self.settlement = SettledAtTheEnd(resolver)
        self.cancel = cancel
    }

    var resolver: Resolver<Int> { settlement.resolver }
    var index: Int { Int(key.slot) }
    /// The slot its running body names.
    var slot: UInt32 { key.slot }
}

/// A member listed by hand, and what listing it returned.
struct Listed: ~Copyable {
    let member: Member
    var outcome: ChainOutcome
}

extension ChainState {
    /// Reserves and lists a new member of `home` following `upstream`; returns it with what
    /// listing returned. `cancellable`: it has a cancel closure (a promise the chain adopted); a
    /// step or an observer has none.
    mutating func listMember(
        in home: MemberHome, after upstream: Member? = nil, isObserver: Bool = false, cancellable: Bool = true
    ) -> Listed {
        let (promise, resolver) = Promise<Int>.pending()
        let probe = Probe()
        let key = reserve(
            in: home, upstream: upstream?.key, isObserver: isObserver, cancelBody: cancellable ? probe.makeBody() : nil)
        let outcome = list(key, target: promise, in: home)
        return Listed(member: Member(key: key, promise: promise, resolver: resolver, cancel: probe), outcome: outcome)
    }

    /// `listMember` in an active chain, where listing returns nothing.
    mutating func addMember(
        in home: MemberHome, after upstream: Member? = nil, isObserver: Bool = false, cancellable: Bool = true,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Member {
        let listed = listMember(in: home, after: upstream, isObserver: isObserver, cancellable: cancellable)
        assertNone(listed.outcome, "listing in an active chain returns nothing", file: file, line: line)
        return listed.member
    }

    /// A step (no cancel closure) following `upstream`, as `then` or an observer adds one.
    mutating func addStep(in home: MemberHome, after upstream: Member, isObserver: Bool = false) -> Member {
        addMember(in: home, after: upstream, isObserver: isObserver, cancellable: false)
    }

    /// The phase of this root's chain, as listing a member with a cancel closure into a copy shows
    /// it: nothing to do (`active`), its closure released at once (`abandoned`), or its promise
    /// rejected (`cancelled`). `home` is the root's own.
    func phaseByListing(in home: MemberHome) -> PhaseName {
        var copy = self
        switch copy.listMember(in: home).outcome {
        case .none: return .active
        case .release: return .abandoned
        case .run: return .cancelled
        }
    }

    /// What settling slot `index` of `home` returns, sent to a copy: `.none` if the slot is free.
    func settlingCopy(_ index: Int, in home: MemberHome) -> ChainOutcome {
        var copy = self
        return copy.memberSettled(index, in: home)
    }

    /// The tokens that cancelling a copy of this root's chain completes (cancelled or not).
    func tokensCancelling(root: ObjectIdentifier) -> [Bool] {
        var copy = self
        return copy.cancel(with: ChainError(number: 0), at: .library, root: root).summary.tokens
    }

    /// The tokens that abandoning a copy of this root's chain completes: every token its tables
    /// keep (an active chain completes them all "not cancelled"). `home` is the root's own.
    func tokensAbandoning(in home: MemberHome) -> [Bool] {
        var copy = self
        return copy.handlesGone(of: home).summary.tokens
    }

    /// Whether a link for `key` of `home`, sent to a copy, is kept (the key names a member that is
    /// reserved or listed) rather than released or followed.
    func keepsLink(for key: SlotKey, in home: MemberHome, root: ObjectIdentifier) -> Bool {
        var copy = self
        return copy.link(key, .task {}, whileBodyRuns: false, in: home, reaching: nil, root: root).isNone
    }
}

/// A storage as the state machine knows it: an identity (the machine names storages only by
/// their identity) and, for a root, the machine that decides for its chain, held here as a value.
/// No `CancelStorage` is made: the machine is tested alone.
final class Node {
    var chain = ChainState()
    /// The nodes this root absorbed, kept alive as long as it is: the machine names them by their
    /// identity, which a new node must not take while they are named.
    private var absorbed: [Node] = []

    var id: ObjectIdentifier { ObjectIdentifier(self) }

    /// This storage as the home of members of the chain whose root is `root`.
    func home(under root: Node) -> MemberHome { MemberHome(storage: id, isRoot: self === root) }

    /// This storage as the home of its own members, as a root.
    var ownHome: MemberHome { home(under: self) }

    fileprivate func keep(_ absorbed: Node) { self.absorbed.append(absorbed) }

    /// The phase of the chain this storage is the root of (see `phaseByListing`).
    var phase: ChainState.PhaseName { chain.phaseByListing(in: ownHome) }

    /// Whether this root dropped the table of `storage` (idle: no member, no hold): reserving a
    /// slot there, in a copy of the machine, makes a table again.
    func dropped(_ storage: Node) -> Bool {
        var copy = chain
        _ = copy.reserve(in: storage.home(under: self), upstream: nil, isObserver: false, cancelBody: nil)
        return copy.absorbedCount == chain.absorbedCount + 1
    }
}

/// A node stands for the storage a promise of the chain is attached to (in the tests that attach
/// one): it is told nothing, as the machine is driven by hand.
extension Node: PromiseAttachment {
    func promiseDidSettle(key: UInt64) {}

    func errorBeforeBody(key: UInt32) -> (any Error)? { nil }
}

/// A chain with no join: a root storage (the home of its members; never locked here) and its
/// state machine, held beside it as a value so that a test can copy it to try one event and
/// restore it to try another.
struct Chain {
    let root = Node()
    var state = ChainState()
    var members: [Member] = []

    var home: MemberHome { root.ownHome }
    var phase: ChainState.PhaseName { state.phaseByListing(in: home) }

    /// A chain with `count` members, each with a cancel closure and no upstream.
    init(members count: Int) {
        for _ in 0..<count { members.append(state.addMember(in: home)) }
    }

    mutating func cancel(with error: any Error) -> ChainOutcome {
        state.cancel(with: error, at: .library, root: root.id)
    }

    mutating func releaseLastHandle(file: StaticString = #filePath, line: UInt = #line) -> ChainOutcome {
        let outcome = state.handlesGone(of: home)
        let releasesHold = outcome.summary.releasesHold
        XCTAssertFalse(releasesHold, "a root holds no handle of another storage", file: file, line: line)
        return outcome
    }

    /// Fulfils `member`'s promise and reports it settled.
    mutating func settle(_ member: Member) -> ChainOutcome {
        member.resolver.fulfill(1)
        return state.memberSettled(member.index, in: home)
    }

    mutating func link(_ member: Member, _ link: CancelLink, whileBodyRuns: Bool) -> ChainOutcome {
        state.link(member.key, link, whileBodyRuns: whileBodyRuns, in: home, reaching: nil, root: root.id)
    }

    /// Links a new probe's task from the first member, once while its body runs and once not,
    /// each time from the state the chain has now; hands what linking returned and the probe to
    /// `check`.
    mutating func linkFromTheFirstMemberWhileItsBodyRunsAndNot(_ check: (inout ChainOutcome, Probe) -> Void) {
        let saved = state
        for whileBodyRuns in [true, false] {
            state = saved
            let linked = Probe()
            var outcome = link(members[0], .task(linked.makeBody()), whileBodyRuns: whileBodyRuns)
            check(&outcome, linked)
        }
    }

    /// Cancels `member` as the loser of a combinator whose winner is another member of this
    /// chain's root storage, or of a storage of another chain.
    mutating func cancelLoser(_ member: Member, sharesChainWithWinner: Bool) -> ChainOutcome {
        let winner = (storage: sharesChainWithWinner ? root.id : Node().id, key: SlotKey(slot: 99, generation: 99))
        return state.cancelLoser(member.key, in: home, winner: winner, root: root.id)
    }

    /// The tokens settling `member` (in a copy) completes.
    func tokensSettling(_ member: Member) -> [Bool] { state.settlingCopy(member.index, in: home).summary.tokens }

    /// The tokens cancelling a copy of the chain completes.
    var tokensCancelling: [Bool] { state.tokensCancelling(root: root.id) }
}

/// What a join returned, held by a type of the tests so that a test can take its outcome.
struct Joining: ~Copyable {
    let absorption: ChainState.Absorption?
    var outcome: ChainOutcome
}

/// Joins the chains of the roots `a` and `b`; the root that absorbs the other keeps it alive.
func join(_ a: Node, _ b: Node) -> Joining {
    var joined = ChainState.join(&a.chain, a.id, &b.chain, b.id)
    if let absorption = joined.absorption {
        absorption.root == a.id ? a.keep(b) : b.keep(a)
    }
    var outcome = ChainOutcome.none
    swap(&outcome, &joined.outcome)
    return Joining(absorption: joined.absorption, outcome: outcome)
}

/// A root that absorbed `count` storages with no members, one join at a time (each new storage
/// has the smaller group: it is the one absorbed).
func rootAbsorbing(_ count: Int) -> (root: Node, absorbed: [Node]) {
    let root = Node()
    var absorbed: [Node] = []
    for _ in 0..<count {
        let storage = Node()
        _ = join(storage, root)
        absorbed.append(storage)
    }
    return (root, absorbed)
}

// MARK: - Running an outcome

extension ChainOutcome {
    /// Whether the event returned `.none`.
    var isNone: Bool {
        switch self {
        case .none: return true
        case .release: return false
        case .run: return false
        }
    }

    /// Runs what the outcome holds as the storage does after the lock, but follows no link (a test
    /// takes them with `nextLink`): calls the closures, completes the tokens, runs the released
    /// handlers and releases the rest. Leaves `.none`.
    mutating func run() {
        switch consume self {
        case .run(let effects): effects.run()
        case .release(let contents): contents.release()
        case .none: break
        }
        self = .none
    }

    /// Takes the next link to follow, if any.
    mutating func nextLink() -> (link: CancelLink, error: any Error)? {
        switch consume self {
        case .run(var effects):
            let next = effects.nextLink()
            self = .run(effects)
            return next
        case .release(let contents):
            self = .release(contents)
            return nil
        case .none:
            self = .none
            return nil
        }
    }
}

// MARK: - What an event returned

/// One thing an event left to do after the lock, in the tests' words. A list of them is compared
/// with the outcome's `summary`, which counts rejections and calls and keeps follows, tokens and
/// releases each in their own order: a list says nothing of the order between kinds.
enum Returned {
    /// A pending promise rejected under the lock.
    case rejected
    /// A cancel closure to call.
    case call
    /// A link to follow, with the error the chains it reaches are cancelled with.
    case follow(ChainOutcome.LinkShape, any Error)
    /// What a member held, released uncalled.
    case release(ChainOutcome.Held)
    /// A running body's token to complete.
    case completeToken(cancelled: Bool)
    /// An absorbed storage stops counting as a handle of the storage that absorbed it.
    case releasesHold

    /// A listed member released uncalled: its cancel closure and its promise (abandoned, or
    /// settled before it was rejected).
    static var releasedMember: Returned { .release([.closure, .promise]) }
}

extension ChainOutcome.Summary {
    /// The summary of an outcome that holds exactly `returned`.
    init(_ returned: [Returned]) {
        self.init()
        for entry in returned {
            switch entry {
            case .rejected: rejected += 1
            case .call: calls += 1
            case .follow(let shape, let error): follows.append(.init(link: shape, error: String(describing: error)))
            case .release(let held): released.append(held)
            case .completeToken(let cancelled): tokens.append(cancelled)
            case .releasesHold: releasesHold = true
            }
        }
    }
}

/// What cancelling `members` returns when each is pending with a cancel closure, no link and no
/// handler waiting on its promise: its promise rejected under the lock (and released after it),
/// its closure called after the lock.
func rejectedAndCalled(_ members: [Member]) -> [Returned] {
    members.flatMap { _ in [Returned.rejected, .call, .release(.promise)] }
}

/// `outcome` holds exactly `expected` (by kind, see `Returned`), and leaves nothing to do exactly
/// when that is nothing. A `.release` of empty contents (a member that left holding nothing, as
/// `memberSettled` returns for a detached member) counts as nothing to do: `assertNone` and
/// `assertLeft` tell it from `.none`.
func assertReturned(
    _ outcome: borrowing ChainOutcome, _ expected: [Returned], _ message: String = "",
    file: StaticString = #filePath, line: UInt = #line
) {
    let summary = outcome.summary
    XCTAssertEqual(summary, ChainOutcome.Summary(expected), message, file: file, line: line)
    let leavesNothing: Bool
    switch outcome {
    case .none: leavesNothing = true
    case .release(let contents): leavesNothing = contents.isEmpty
    case .run: leavesNothing = false
    }
    XCTAssertEqual(
        leavesNothing, expected.isEmpty, "nothing to do exactly when nothing is expected", file: file, line: line)
}

/// The event returned `.none`: it changed nothing that leaves work, not even a member leaving.
func assertNone(
    _ outcome: borrowing ChainOutcome, _ message: String = "nothing to do after the lock",
    file: StaticString = #filePath, line: UInt = #line
) {
    let (isNone, summary) = (outcome.isNone, outcome.summary)
    XCTAssertTrue(isNone, "\(message): returned \(summary)", file: file, line: line)
}

/// `memberSettled` returned that a member left its slot (not `.none`), holding exactly `expected`.
func assertLeft(
    _ outcome: borrowing ChainOutcome, holding expected: [Returned] = [], _ message: String = "",
    file: StaticString = #filePath, line: UInt = #line
) {
    let isNone = outcome.isNone
    XCTAssertFalse(isNone, "a member left its slot", file: file, line: line)
    assertReturned(outcome, expected, message, file: file, line: line)
}

// MARK: - Assertions on members

/// Slot `index` of `home` is free: settling it, in a copy, finds no member.
func assertSlotFree(
    _ index: Int, in state: ChainState, at home: MemberHome, _ message: String = "the slot is free",
    file: StaticString = #filePath, line: UInt = #line
) {
    assertNone(state.settlingCopy(index, in: home), message, file: file, line: line)
}

/// The member's slot is free (its key names nothing any more).
func assertFreed(
    _ member: Member, in state: ChainState, at home: MemberHome, file: StaticString = #filePath, line: UInt = #line
) {
    assertSlotFree(member.index, in: state, at: home, "the member left its slot", file: file, line: line)
}

func assertFreed(_ member: Member, in chain: Chain, file: StaticString = #filePath, line: UInt = #line) {
    assertFreed(member, in: chain.state, at: chain.home, file: file, line: line)
}

/// The member left the chain, holding nothing, but its slot waits for its settle notification:
/// settling it, in a copy, frees the slot and releases nothing.
func assertDetached(_ member: Member, in chain: Chain, file: StaticString = #filePath, line: UInt = #line) {
    let settling = chain.state.settlingCopy(member.index, in: chain.home)
    let (isNone, released) = (settling.isNone, settling.summary.released)
    XCTAssertFalse(isNone, "the slot waits for the notification", file: file, line: line)
    XCTAssertEqual(released, [], "what it held was taken when it left", file: file, line: line)
}

func assertPending(_ member: Member, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertTrue(member.promise.isPending, "pending", file: file, line: line)
}

func assertRejected<E: Error & Equatable>(
    _ member: Member, with expected: E, file: StaticString = #filePath, line: UInt = #line
) {
    guard case .rejected(let error)? = member.promise.result else {
        return XCTFail(
            "expected rejected with \(expected), got \(String(describing: member.promise.result))", file: file,
            line: line)
    }
    XCTAssertEqual(error as? E, expected, file: file, line: line)
}

func assertCalledOnce(_ probe: Probe, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(probe.calls, 1, "called exactly once", file: file, line: line)
}

func assertNotCalled(_ probe: Probe, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(probe.calls, 0, "not called", file: file, line: line)
}

func assertReleasedUncalled(_ probe: Probe, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(probe.calls, 0, "not called", file: file, line: line)
    XCTAssertTrue(probe.isReleased, "released", file: file, line: line)
}

/// `outcome` follows exactly the one link whose closure `probe` made, with `expected`: takes it
/// and runs it (a task link's closure is what following it calls).
func assertFollowed<E: Error & Equatable>(
    _ outcome: inout ChainOutcome, _ probe: Probe, with expected: E, file: StaticString = #filePath,
    line: UInt = #line
) {
    guard let (link, error) = outcome.nextLink() else { return XCTFail("no link followed", file: file, line: line) }
    XCTAssertNil(outcome.nextLink(), "one link followed", file: file, line: line)
    XCTAssertEqual(error as? E, expected, "followed with this error", file: file, line: line)
    guard case .task(let body) = link else { return XCTFail("expected a task link", file: file, line: line) }
    body()
    assertCalledOnce(probe, file: file, line: line)
}

/// `outcome` follows no link; run, it releases the one `probe`'s closure is, uncalled.
func assertLinkReleased(
    _ outcome: inout ChainOutcome, _ probe: Probe, file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertNil(outcome.nextLink(), "no link followed", file: file, line: line)
    outcome.run()
    assertReleasedUncalled(probe, file: file, line: line)
}
