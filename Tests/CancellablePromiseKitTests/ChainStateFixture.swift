import PromiseCore
import XCTest

@testable import CancellablePromiseKit

// Debug builds only: these tests read what the chain machine records (`recorded`, `ChainAction`)
// or `forwardingHops`, which exist only in debug builds of the library.
#if DEBUG

// The fixture of the state machine tests (ChainStateTests, ChainStateCancelTests): chains whose
// members are listed by hand, probes that tell whether a closure was called or released, and
// assertions on what an event recorded (`ChainActions.recorded`, kept in debug builds).

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
    /// The slot an event records for this member.
    var slot: UInt32 { key.slot }
}

extension ChainState {
    /// Reserves and lists a new member of `home` following `upstream`, recording what listing
    /// leaves to do into `actions`. `cancellable`: it has a cancel closure (a promise the chain
    /// adopted); a step or an observer has none.
    mutating func listMember(
        in home: MemberHome, after upstream: Member? = nil, isObserver: Bool = false, cancellable: Bool = true,
        into actions: inout ChainActions
    ) -> Member {
        let (promise, resolver) = Promise<Int>.pending()
        let probe = Probe()
        let key = reserve(
            in: home, upstream: upstream?.key, isObserver: isObserver, cancelBody: cancellable ? probe.makeBody() : nil)
        list(key, target: promise, in: home, into: &actions)
        return Member(key: key, promise: promise, resolver: resolver, cancel: probe)
    }

    /// `listMember` in an active chain, where listing records nothing.
    mutating func addMember(
        in home: MemberHome, after upstream: Member? = nil, isObserver: Bool = false, cancellable: Bool = true,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Member {
        var actions = ChainActions()
        let member = listMember(
            in: home, after: upstream, isObserver: isObserver, cancellable: cancellable, into: &actions)
        assertNothingRecorded(actions, "listing in an active chain records nothing", file: file, line: line)
        return member
    }

    /// `addMember` if the chain is active (listing elsewhere records actions); `nil` otherwise.
    mutating func addMemberIfActive(in home: MemberHome) -> Member? {
        isActive ? addMember(in: home) : nil
    }

    /// A step (no cancel closure) following `upstream`, as `then` or an observer adds one.
    mutating func addStep(
        in home: MemberHome, after upstream: Member, isObserver: Bool = false
    ) -> Member {
        addMember(in: home, after: upstream, isObserver: isObserver, cancellable: false)
    }

    var isActive: Bool {
        if case .active = phase { return true }
        return false
    }

    var isAbandoned: Bool {
        if case .abandoned = phase { return true }
        return false
    }

    var isAbsorbed: Bool {
        if case .absorbed = phase { return true }
        return false
    }
}

/// A storage as the state machine knows it: an identity (the machine names storages only by
/// their identity) and, for a root, the machine that decides for its chain, held here as a value.
/// No `CancelStorage` is made: the machine is tested alone.
final class Node {
    var chain = ChainState()

    var id: ObjectIdentifier { ObjectIdentifier(self) }

    /// This storage as the home of members of the chain whose root is `root`.
    func home(under root: Node) -> MemberHome { MemberHome(storage: id, isRoot: self === root) }

    /// This storage as the home of its own members, as a root.
    var ownHome: MemberHome { home(under: self) }

    /// The table of this storage in the machine of `root`.
    func table(under root: Node) -> MemberTable { root.chain.readTable(home(under: root)) { $0 } }
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
    var table: MemberTable { state.table }

    /// A chain with `count` members, each with a cancel closure and no upstream.
    init(members count: Int) {
        for _ in 0..<count { members.append(state.addMember(in: home)) }
    }

    /// Cancels the chain with `error`; returns whether it changed anything, and the actions.
    mutating func cancel(with error: any Error) -> (cancelled: Bool, actions: ChainActions) {
        var actions = ChainActions()
        let cancelled = state.cancel(with: error, at: .library, root: root.id, into: &actions)
        return (cancelled, actions)
    }

    mutating func releaseLastHandle() -> ChainActions {
        var actions = ChainActions()
        XCTAssertFalse(state.handlesGone(of: home, into: &actions), "a root holds no handle of another storage")
        return actions
    }

    /// Fulfils `member`'s promise and reports it settled.
    mutating func settle(_ member: Member) -> ChainActions {
        member.resolver.fulfill(1)
        return afterTheLock(state.memberSettled(member.index, in: home))
    }

    mutating func link(_ member: Member, _ link: CancelLink, whileBodyRuns: Bool) -> ChainActions {
        var actions = ChainActions()
        state.link(
            member.key, link, whileBodyRuns: whileBodyRuns, in: home, reaching: nil, root: root.id, into: &actions)
        return actions
    }

    /// Links a new probe's task from the first member, once while its body runs and once not,
    /// each time from the state the chain has now; hands the actions and the probe to `check`.
    mutating func linkFromTheFirstMemberWhileItsBodyRunsAndNot(_ check: (inout ChainActions, Probe) -> Void) {
        let saved = state
        for whileBodyRuns in [true, false] {
            state = saved
            let linked = Probe()
            var actions = link(members[0], .task(linked.makeBody()), whileBodyRuns: whileBodyRuns)
            check(&actions, linked)
        }
    }

    /// Cancels `member` as the loser of a combinator whose winner is another member of this
    /// chain's root storage, or of a storage of another chain.
    mutating func cancelLoser(_ member: Member, sharesChainWithWinner: Bool) -> ChainActions {
        var actions = ChainActions()
        let winner = (storage: sharesChainWithWinner ? root.id : Node().id, key: SlotKey(slot: 99, generation: 99))
        state.cancelLoser(member.key, in: home, winner: winner, root: root.id, into: &actions)
        return actions
    }
}

/// Joins the chains of the roots `a` and `b`.
func join(_ a: Node, _ b: Node) -> (absorption: ChainState.Absorption?, actions: ChainActions) {
    var actions = ChainActions()
    let absorption = ChainState.join(&a.chain, a.id, &b.chain, b.id, into: &actions)
    return (absorption, actions)
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

// MARK: - Assertions

func assertDetached(
    _ member: Member, in table: MemberTable, file: StaticString = #filePath, line: UInt = #line
) {
    guard let index = table.index(of: member.key) else {
        return XCTFail("expected detached, the slot is free", file: file, line: line)
    }
    XCTAssertEqual(table.state(index), .detached, file: file, line: line)
}

/// The member's slot is free: its key names nothing any more.
func assertFreed(
    _ member: Member, in table: MemberTable, file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertNil(table.index(of: member.key), "the key is stale", file: file, line: line)
    XCTAssertNil(table.listedIndex(of: member.key), file: file, line: line)
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

/// What a member that left holds, as the actions that release it after the lock (what the
/// storage does with `memberSettled`'s result).
func afterTheLock(_ left: LeftMember) -> ChainActions {
    var actions = ChainActions()
    actions.release(left.contents)
    return actions
}

/// `actions` recorded exactly `expected`, in order (and is empty exactly when that is nothing).
func assertRecorded(
    _ actions: ChainActions, _ expected: [ChainAction], _ message: String = "", file: StaticString = #filePath,
    line: UInt = #line
) {
    XCTAssertEqual(actions.recorded, expected, message, file: file, line: line)
    XCTAssertEqual(actions.isEmpty, expected.isEmpty, "isEmpty agrees with what was recorded", file: file, line: line)
}

/// `actions` recorded nothing: nothing to do after the lock.
func assertNothingRecorded(
    _ actions: ChainActions, _ message: String = "nothing to do after the lock", file: StaticString = #filePath,
    line: UInt = #line
) {
    assertRecorded(actions, [], message, file: file, line: line)
}

extension ChainAction {
    /// `.follow` with `error`, compared by its description.
    static func follow(_ shape: LinkShape, _ error: any Error) -> ChainAction {
        .follow(shape, error: String(describing: error))
    }

    /// A listed member released uncalled: its cancel closure and its promise (abandoned, or
    /// settled before it was rejected).
    static let releasedMember = ChainAction.release([.closure, .promise])
}

/// What cancelling `members` records, in order, when each is pending with a cancel closure and
/// no link: its promise rejected under the lock, its closure called after it.
func rejectedAndCalled(_ members: [Member]) -> [ChainAction] {
    members.flatMap { [.reject(slot: $0.slot, wasPending: true), .call] }
}

/// `actions` follows exactly the one link whose closure `probe` made, with `expected`: takes it
/// and runs it (a task link's closure is what following it calls).
func assertFollowed<E: Error & Equatable>(
    _ actions: inout ChainActions, _ probe: Probe, with expected: E, file: StaticString = #filePath, line: UInt = #line
) {
    guard let (link, error) = actions.nextLink() else { return XCTFail("no link followed", file: file, line: line) }
    XCTAssertNil(actions.nextLink(), "one link followed", file: file, line: line)
    XCTAssertEqual(error as? E, expected, "followed with this error", file: file, line: line)
    guard case .task(let body) = link else { return XCTFail("expected a task link", file: file, line: line) }
    body()
    assertCalledOnce(probe, file: file, line: line)
}

/// `actions` follows no link; run, they release the one `probe`'s closure is, uncalled.
func assertLinkReleased(
    _ actions: inout ChainActions, _ probe: Probe, file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertNil(actions.nextLink(), "no link followed", file: file, line: line)
    actions.run()
    assertReleasedUncalled(probe, file: file, line: line)
}
#endif
