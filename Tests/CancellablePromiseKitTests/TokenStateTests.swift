import Dispatch
import XCTest

@testable import CancellablePromiseKit

/// The rules of a token's state machine (`TokenState`), driven event by event on the value
/// itself: no token lock, no thread. Each test checks what an event decided (the `Added` or
/// `TokenActions` it returned) and the state it left. A bad transition is tried on a copy of the
/// machine, which is a value, so the original is checked unchanged afterwards.
final class TokenStateTests: XCTestCase {
    /// What the handlers the tests register have done, in order.
    private final class Log {
        var events: [String] = []
    }

    private var log = Log()
    /// The token a state belongs to (a derived token's state keeps it alive through it); only
    /// passed to `add`, never locked here.
    private var owner = CancellationToken()

    override func setUp() {
        super.setUp()
        log = Log()
        owner = CancellationToken()
    }

    // MARK: Registering while pending

    /// A registration on a pending token is listed under a new, increasing id, and nothing runs.
    func testRegisteringOnAPendingTokenListsTheEntryUnderIncreasingIDs() {
        var state = TokenState(phase: .pending, isDerived: false)
        state.add(onCancel("a"), owner: owner).assertListed(id: 0, sweep: false)
        state.add(onComplete("b"), owner: owner).assertListed(id: 1, sweep: false)
        state.add(onCancel("c"), owner: owner).assertListed(id: 2, sweep: false)
        XCTAssertNil(state.completedValue)
        XCTAssertEqual(state.liveEntryCount, 3)
        XCTAssertEqual(log.events, [])
    }

    // MARK: Completing

    /// Cancelling hands every entry to the actions once, in registration order, with the
    /// outcome `true`: `onCancel` and `onComplete` handlers both run.
    func testCancellingRunsEveryRegistrationOnceInRegistrationOrder() {
        var state = TokenState(phase: .pending, isDerived: false)
        for name in ["a", "b", "c"] { _ = state.add(onCancel(name), owner: owner) }
        _ = state.add(onComplete("d"), owner: owner)
        let actions = state.complete(cancelled: true)
        actions.assertRuns(ids: [0, 1, 2, 3], cancelled: true)
        actions?.perform()
        XCTAssertEqual(log.events, ["a", "b", "c", "d(true)"])
        XCTAssertEqual(state.completedValue, true)
    }

    /// A token completes once: completing it again (either way) decides nothing and leaves it
    /// as it was.
    func testCompletingACompletedTokenAgainDoesNothing() {
        var state = TokenState(phase: .pending, isDerived: false)
        _ = state.complete(cancelled: true)
        var copy = state
        XCTAssertNil(copy.complete(cancelled: false))
        XCTAssertNil(copy.complete(cancelled: true))
        XCTAssertEqual(copy.completedValue, true)
        XCTAssertEqual(state.completedValue, true)
    }

    /// Completing "not cancelled" skips `onCancel` handlers and runs `onComplete` handlers with
    /// `false`.
    func testCompletingNotCancelledRunsOnlyOnCompleteHandlersWithFalse() {
        var state = TokenState(phase: .pending, isDerived: false)
        _ = state.add(onCancel("a"), owner: owner)
        _ = state.add(onComplete("b"), owner: owner)
        let actions = state.complete(cancelled: false)
        actions.assertRuns(ids: [0, 1], cancelled: false)
        actions?.perform()
        XCTAssertEqual(log.events, ["b(false)"])
        XCTAssertEqual(state.completedValue, false)
    }

    /// Completing takes every entry out of the state: the completed token holds no handler, and
    /// once the actions are dropped, nothing a handler captured is alive.
    func testCompletingReleasesEveryRegistration() {
        var state = TokenState(phase: .pending, isDerived: false)
        weak var captured: Log?
        do {
            let capture = Log()
            captured = capture
            _ = state.add(.onCancel { capture.events.append("ran") }, queue: nil, owner: owner)
            _ = state.add(.onComplete { _ in capture.events.append("ran") }, queue: nil, owner: owner)
            let actions = state.complete(cancelled: false)
            actions.assertRuns(ids: [0, 1], cancelled: false)
        }
        XCTAssertNil(captured)
        XCTAssertEqual(state.liveEntryCount, 0)
        XCTAssertEqual(state.storedEntryCount, 0)
    }

    /// A token freed while pending runs its entries as "not cancelled" (no continuation waits
    /// for ever); a completed token's teardown has nothing left to do.
    func testTearingDownAPendingTokenCompletesItsEntriesAsNotCancelled() {
        var state = TokenState(phase: .pending, isDerived: false)
        _ = state.add(onCancel("a"), owner: owner)
        _ = state.add(onComplete("b"), owner: owner)
        let actions = state.tearDown()
        Optional(actions).assertRuns(ids: [0, 1], cancelled: false)
        actions.perform()
        XCTAssertEqual(log.events, ["b(false)"])

        var completed = TokenState(phase: .completed(cancelled: true), isDerived: false)
        Optional(completed.tearDown()).assertNothingToDo()
    }

    // MARK: Registering after completion

    /// A registration on a completed token is not listed: `add` answers with the outcome, for
    /// the token to run the entry at once.
    func testRegisteringOnACompletedTokenAnswersWithTheOutcomeAndListsNothing() {
        var cancelled = TokenState(phase: .pending, isDerived: false)
        _ = cancelled.complete(cancelled: true)
        cancelled.add(onCancel("late"), owner: owner).assertCompleted(cancelled: true)
        XCTAssertEqual(cancelled.storedEntryCount, 0)

        var notCancelled = TokenState(phase: .completed(cancelled: false), isDerived: false)
        notCancelled.add(onComplete("late"), owner: owner).assertCompleted(cancelled: false)
        XCTAssertEqual(notCancelled.storedEntryCount, 0)
        XCTAssertEqual(log.events, [], "the state runs nothing itself")
    }

    // MARK: Removing a registration

    /// Removing an entry leaves a tombstone in its place (no later entry moves: O(1)), hands the
    /// handler to the actions to be released, and the handler never runs.
    func testRemovingARegistrationLeavesATombstoneAndItNeverRuns() {
        var state = TokenState(phase: .pending, isDerived: false)
        for name in ["a", "b", "c"] { _ = state.add(onCancel(name), owner: owner) }
        let (removed, actions) = state.remove(id: 1)
        XCTAssertTrue(removed)
        XCTAssertEqual(actions.drop.map(\.id), [1])
        XCTAssertEqual(state.liveEntryCount, 2)
        XCTAssertEqual(state.storedEntryCount, 3, "a tombstone: nothing shifted")
        state.complete(cancelled: true)?.perform()
        XCTAssertEqual(log.events, ["a", "c"])
    }

    /// An entry is removed once: removing it again, removing an id never given, or removing
    /// after completion decides nothing.
    func testRemovingTwiceUnknownOrAfterCompletionRemovesNothing() {
        var state = TokenState(phase: .pending, isDerived: false)
        _ = state.add(onCancel("a"), owner: owner)
        _ = state.add(onCancel("b"), owner: owner)
        _ = state.remove(id: 0)
        var copy = state
        XCTAssertFalse(copy.remove(id: 0).removed)
        XCTAssertFalse(copy.remove(id: 7).removed)
        XCTAssertEqual(copy.liveEntryCount, 1)
        _ = copy.complete(cancelled: true)
        let (removed, actions) = copy.remove(id: 1)
        XCTAssertFalse(removed)
        XCTAssertTrue(actions.drop.isEmpty)
        XCTAssertEqual(state.liveEntryCount, 1, "the original is unchanged")
    }

    // MARK: Compaction

    /// Removing registrations in any order keeps the list within twice its live entries plus 16:
    /// tombstones are dropped once they are half of the list, and the old storage is handed to
    /// the actions to be released outside the lock.
    func testRemovalsKeepTheListWithinTwiceItsLiveEntriesPlusSixteen() {
        var state = TokenState(phase: .pending, isDerived: false)
        let count = 1_000
        for _ in 0..<count { _ = state.add(.onCancel {}, queue: nil, owner: owner) }
        var compactions = 0
        // Oldest first, then the rest newest first.
        let order = Array(0..<UInt64(count / 2)) + Array((UInt64(count / 2)..<UInt64(count)).reversed())
        for id in order {
            let (removed, actions) = state.remove(id: id)
            XCTAssertTrue(removed)
            if !actions.dropStorage.isEmpty { compactions += 1 }
            XCTAssertLessThanOrEqual(state.storedEntryCount, 2 * state.liveEntryCount + 16)
        }
        XCTAssertEqual(state.liveEntryCount, 0)
        XCTAssertEqual(state.storedEntryCount, 0)
        XCTAssertGreaterThan(compactions, 0)
        XCTAssertLessThanOrEqual(compactions, 2 * Int(log2(Double(count))) + 2, "each compaction is paid for")
    }

    /// The entries left after a compaction keep their ids and order: later removals still find
    /// them, and completion runs them in registration order.
    func testCompactionKeepsTheOrderAndIDsOfTheEntriesLeft() {
        var state = TokenState(phase: .pending, isDerived: false)
        for i in 0..<40 { _ = state.add(onCancel("\(i)"), owner: owner) }
        for id in 0..<UInt64(30) { _ = state.remove(id: id) }
        XCTAssertEqual(state.storedEntryCount, 20, "compacted once, when half of 40 were tombstones")
        XCTAssertTrue(state.remove(id: 35).removed)
        state.complete(cancelled: true)?.perform()
        XCTAssertEqual(log.events, ["30", "31", "32", "33", "34", "36", "37", "38", "39"])
    }

    // MARK: Sweeps

    /// A list of handlers only never asks for a sweep; once it may hold what a sweep drops (a
    /// registered object), reaching the threshold (16 entries, then twice the list) asks for one.
    func testAddingAsksForASweepOnlyWhenTheListMayHoldSweepableEntries() {
        var handlers = TokenState(phase: .pending, isDerived: false)
        for id in 0..<UInt64(64) {
            handlers.add(.onCancel {}, queue: nil, owner: owner).assertListed(id: id, sweep: false)
        }

        var objects = TokenState(phase: .pending, isDerived: false)
        let object = Probe()
        var sweeps: [UInt64] = []
        for id in 0..<UInt64(64) {
            guard case .listed(let listed, let sweep) = objects.add(register(object), owner: owner) else {
                return XCTFail("a pending token lists the entry")
            }
            XCTAssertEqual(listed, id)
            if sweep { sweeps.append(id) }
        }
        XCTAssertEqual(sweeps, [15, 31, 63], "at 16 entries, then each time the list doubled")
    }

    /// A sweep drops the registrations whose object is gone (to be released after the lock),
    /// keeps the live ones and the handlers, and visits a token once per pass.
    func testASweepDropsRegistrationsWhoseObjectIsGoneOncePerPass() {
        var state = TokenState(phase: .pending, isDerived: false)
        let kept = Probe()
        _ = state.add(register(kept), owner: owner)
        do {
            let gone = Probe()
            _ = state.add(register(gone), owner: owner)
        }
        _ = state.add(onCancel("handler"), owner: owner)
        _ = state.remove(id: 0)
        _ = state.add(register(kept), owner: owner)

        guard let (derived, actions) = state.sweep(pass: 1) else { return XCTFail("a pending token is swept") }
        XCTAssertTrue(derived.isEmpty)
        XCTAssertEqual(actions.drop.map(\.id), [1])
        XCTAssertEqual(state.liveEntryCount, 2)
        XCTAssertEqual(state.storedEntryCount, 2, "the tombstone went too")

        var copy = state
        XCTAssertNil(copy.sweep(pass: 1), "a pass visits a token once")
        _ = copy.complete(cancelled: true)
        XCTAssertNil(copy.sweep(pass: 2), "a completed token is not swept")
    }

    /// A sweep hands back the derived tokens still linked (for the pass to visit) and drops the
    /// links whose derived token is gone; after it, the next sweep waits until the list, with the
    /// entries below, has doubled.
    func testASweepFollowsLiveLinksDropsDeadOnesAndSetsTheNextThreshold() {
        var state = TokenState(phase: .pending, isDerived: false)
        let alive = CancellationToken()
        _ = state.add(.derived(DerivedLink(target: alive, body: { _, _ in })), queue: nil, owner: owner)
        do {
            let gone = CancellationToken()
            _ = state.add(.derived(DerivedLink(target: gone, body: { _, _ in })), queue: nil, owner: owner)
        }
        guard let (derived, actions) = state.sweep(pass: 1) else { return XCTFail("a pending token is swept") }
        XCTAssertEqual(derived.count, 1)
        XCTAssertTrue(derived.first === alive)
        XCTAssertEqual(actions.drop.map(\.id), [1])
        XCTAssertEqual(state.sweepFinished(below: 20), 21, "one entry here, twenty below")
        // The next sweep waits for 2 × 1 + 20 = 22 entries.
        var asked: [UInt64] = []
        for _ in 0..<30 {
            if case .listed(let id, true) = state.add(register(Probe()), owner: owner) { asked.append(id) }
        }
        XCTAssertEqual(asked.first, 22)
    }

    // MARK: Derived tokens

    /// A derived token keeps itself alive while it has entries of its own (handlers, registered
    /// objects), not for links to tokens derived from it, and gives itself up with its last own
    /// entry.
    func testADerivedTokenKeepsItselfAliveExactlyWhileItHasEntriesOfItsOwn() {
        var state = TokenState(phase: .pending, isDerived: true)
        _ = state.add(.derived(DerivedLink(target: owner, body: { _, _ in })), queue: nil, owner: owner)
        XCTAssertNil(state.remove(id: 0).actions.release, "a link is not an entry of its own")

        _ = state.add(onCancel("a"), owner: owner)
        _ = state.add(onCancel("b"), owner: owner)
        XCTAssertNil(state.remove(id: 1).actions.release, "one own entry is left")
        XCTAssertTrue(state.remove(id: 2).actions.release === owner)

        var plain = TokenState(phase: .pending, isDerived: false)
        _ = plain.add(onCancel("a"), owner: owner)
        XCTAssertNil(plain.remove(id: 0).actions.release, "a request's token never keeps itself")
    }

    /// Completing a derived token gives up its reference to itself and hands the links it still
    /// has on its operands to the actions, to be removed from them after the lock.
    func testCompletingADerivedTokenGivesUpItselfAndLeavesItsOperands() {
        let operand = CancellationToken()
        let operandLink = link(to: owner)
        var state = TokenState(phase: .pending, isDerived: true)
        _ = state.add(onCancel("a"), owner: owner)
        XCTAssertTrue(state.recordLink(OperandLink(token: operand, id: 4, link: operandLink)))
        let actions = state.complete(cancelled: true)
        XCTAssertTrue(actions?.release === owner)
        var leave = actions?.leave
        let left = leave?.remove(operandLink)
        XCTAssertTrue(left?.token === operand, "the link on the operand is left")
        XCTAssertEqual(left?.id, 4)
    }

    /// A derived token records its link on an operand only while pending and before the link
    /// ran; otherwise the caller removes the link from the operand at once.
    func testALinkIsRecordedOnlyWhilePendingAndBeforeItRan() {
        let operand = CancellationToken()
        var state = TokenState(phase: .pending, isDerived: true)
        let ran = link(to: owner)
        ran.hasRun = true
        XCTAssertFalse(state.recordLink(OperandLink(token: operand, id: 0, link: ran)))
        XCTAssertTrue(state.recordLink(OperandLink(token: operand, id: 1, link: link(to: owner))))

        var completed = TokenState(phase: .completed(cancelled: false), isDerived: true)
        XCTAssertFalse(completed.recordLink(OperandLink(token: operand, id: 2, link: link(to: owner))))
    }

    /// When an operand runs its link, the derived token marks the link as run and forgets that
    /// operand (released after the lock): completing afterwards leaves only the other operand.
    func testALinkThatRanForgetsItsOperand() {
        let left = CancellationToken()
        let right = CancellationToken()
        let leftLink = link(to: owner)
        let rightLink = link(to: owner)
        var state = TokenState(phase: .pending, isDerived: true)
        XCTAssertTrue(state.recordLink(OperandLink(token: left, id: 0, link: leftLink)))
        XCTAssertTrue(state.recordLink(OperandLink(token: right, id: 1, link: rightLink)))
        let actions = state.linkDidRun(leftLink)
        XCTAssertTrue(leftLink.hasRun)
        XCTAssertTrue(actions.forgotten?.token === left)
        var leave = state.complete(cancelled: false)?.leave
        XCTAssertNil(leave?.remove(leftLink))
        XCTAssertTrue(leave?.remove(rightLink)?.token === right)
    }

    /// `&&` and `||`: an operand that completes without deciding is counted, and the second one
    /// is reported, so the combination completes with the other outcome only then.
    func testTheSecondUndecidedOperandIsReported() {
        var state = TokenState(phase: .pending, isDerived: true)
        XCTAssertFalse(state.undecidedOperandCompleted())
        XCTAssertTrue(state.undecidedOperandCompleted())
    }

    // MARK: Helpers

    private func onCancel(_ name: String) -> TokenAction {
        let log = log
        return .onCancel { log.events.append(name) }
    }

    private func onComplete(_ name: String) -> TokenAction {
        let log = log
        return .onComplete { log.events.append("\(name)(\($0))") }
    }

    private func register(_ object: Probe) -> TokenAction {
        .cancel(WeakCancellable(object))
    }

    private func link(to target: CancellationToken) -> DerivedLink {
        DerivedLink(target: target, body: { _, _ in })
    }

    private final class Probe: Cancellable {
        var isCancelled = false
        func cancel() { isCancelled = true }
    }
}

extension TokenState {
    /// `add` with no queue.
    fileprivate mutating func add(_ action: TokenAction, owner: CancellationToken) -> Added {
        add(action, queue: nil, owner: owner)
    }
}

extension TokenState.Added {
    fileprivate func assertListed(id: UInt64, sweep: Bool, file: StaticString = #filePath, line: UInt = #line) {
        guard case .listed(let listedID, let listedSweep) = self else {
            return XCTFail("expected the entry to be listed, got \(self)", file: file, line: line)
        }
        XCTAssertEqual(listedID, id, "id", file: file, line: line)
        XCTAssertEqual(listedSweep, sweep, "sweep", file: file, line: line)
    }

    fileprivate func assertCompleted(cancelled: Bool, file: StaticString = #filePath, line: UInt = #line) {
        guard case .completed(let outcome) = self else {
            return XCTFail("expected the token to answer completed, got \(self)", file: file, line: line)
        }
        XCTAssertEqual(outcome, cancelled, file: file, line: line)
    }
}

extension Optional where Wrapped == TokenActions {
    /// The actions run exactly the entries `ids`, in that order, with the outcome `cancelled`.
    fileprivate func assertRuns(
        ids: [UInt64], cancelled: Bool, file: StaticString = #filePath, line: UInt = #line
    ) {
        guard let actions = self else { return XCTFail("the event decided nothing", file: file, line: line) }
        XCTAssertEqual(actions.run.map(\.id), ids, file: file, line: line)
        XCTAssertEqual(actions.cancelled, cancelled, file: file, line: line)
    }

    /// The actions run, leave, drop and release nothing.
    fileprivate func assertNothingToDo(file: StaticString = #filePath, line: UInt = #line) {
        guard let actions = self else { return }
        XCTAssertTrue(actions.run.isEmpty, "run", file: file, line: line)
        XCTAssertTrue(actions.drop.isEmpty, "drop", file: file, line: line)
        XCTAssertNil(actions.release, "release", file: file, line: line)
        XCTAssertNil(actions.forgotten, "forgotten", file: file, line: line)
    }
}
