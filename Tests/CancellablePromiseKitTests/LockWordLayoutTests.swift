import XCTest

@testable import CancellablePromiseKit
@testable import PromiseCore

/// The classes of this module that keep an inline lock word (the token, a bag's state, a shared
/// work's host, the chain storage) address it through the object pointer (see PromiseCore's
/// Lock.swift). PromiseCore's `LockWordTests` checks that the computed address is where Swift
/// stores the first stored property of a root class; these tests check that each class here is
/// such a class: no superclass, and its `LockWord` declared first (Swift lays a class's stored
/// properties out in declaration order), or, for the chain storage, a `ManagedBuffer` whose
/// header (the root class's one stored property) starts with its lock word.
final class LockWordLayoutTests: XCTestCase {
    func testCancellationTokenKeepsItsLockWordFirstInARootClass() {
        assertLockWordIsFirstStoredPropertyOfARootClass(CancellationRequest().token)
    }

    func testCancelBagStateKeepsItsLockWordFirstInARootClass() {
        assertLockWordIsFirstStoredPropertyOfARootClass(CancelBag().stateObject)
    }

    func testSharedWorkHostKeepsItsLockWordFirstInARootClass() {
        assertLockWordIsFirstStoredPropertyOfARootClass(SharedWorkHost<Int>())
    }

    func testCancelStorageKeepsItsLockWordFirstInItsHeader() {
        // A `ManagedBuffer` subclass: its header is the root class's one stored property, and the
        // lock word is the header's first field, so the address PromiseCore computes is the
        // header's lock word.
        let storage = CancelStorage.make()
        let header = storage.withUnsafeMutablePointerToHeader { UnsafeMutableRawPointer($0) }
        XCTAssertEqual(MemoryLayout<OwnFields>.offset(of: \.lock), 0, "the lock word is the header's first field")
        XCTAssertEqual(
            header, UnsafeMutableRawPointer(lockWordPointer(storage)), "the computed address is the header's")
        let mirror = Mirror(reflecting: storage)
        XCTAssertEqual(mirror.superclassMirror?.children.first?.label, "header", "the buffer's header is stored first")
    }

    func testACheckedClassWithAnotherFirstPropertyFailsTheRule() {
        final class FieldFirst {
            var count = 0
            var lockWord = LockWord()
        }
        let first = Mirror(reflecting: FieldFirst()).children.first
        XCTAssertNotEqual(first?.label, "lockWord", "the check tells a class whose lock word is not first")
    }

    private func assertLockWordIsFirstStoredPropertyOfARootClass(
        _ object: AnyObject, file: StaticString = #filePath, line: UInt = #line
    ) {
        let mirror = Mirror(reflecting: object)
        XCTAssertNil(mirror.superclassMirror, "\(type(of: object)) is a root class", file: file, line: line)
        let first = mirror.children.first
        // The rule names the property `lockWord`; on Linux `LockWord` is a plain `UInt32`, so the
        // label tells it from another first property of that type.
        XCTAssertEqual(
            first?.label, "lockWord", "\(type(of: object)) declares its lock word first", file: file, line: line)
        XCTAssertTrue(
            first?.value is LockWord, "\(type(of: object))'s first property is a LockWord", file: file, line: line)
    }
}
