import Foundation
import PromiseFoundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Counts its deinitialisations (through `onDeinit`), to observe what a closure released.
final class DeinitFlag: @unchecked Sendable {
    let deinitialised: SendableBox<Bool>
    init(_ flag: SendableBox<Bool>) { deinitialised = flag }
    deinit { deinitialised.value = true }
}

/// A fresh id for server events.
func freshID() -> String {
    UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
}

/// Median of measurements.
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// A test case against the local HTTP server on 127.0.0.1 (`Server/server.py`): the server is
/// started once for each subclass and stopped in its class `tearDown()`; every test gets a
/// `server` and an ephemeral `session`, invalidated after it.
class LocalServerTestCase: XCTestCase {
    /// The running servers, by test class (class set-up and tear-down run on the test thread).
    private static let servers = SendableBox<[ObjectIdentifier: TestServer]>([:])

    override class func setUp() {
        super.setUp()
        if let server = try? TestServer.start() { servers.value[ObjectIdentifier(self)] = server }
    }

    override class func tearDown() {
        servers.value.removeValue(forKey: ObjectIdentifier(self))?.stop()
        super.tearDown()
    }

    var server: TestServer!
    var session: URLSession!

    override func setUpWithError() throws {
        server = try XCTUnwrap(
            Self.servers.value[ObjectIdentifier(type(of: self))],
            "the test server did not start (is python3 installed?)")
        session = URLSession(configuration: .ephemeral)
    }

    override func tearDown() {
        session.invalidateAndCancel()
        session = nil
        server = nil
    }
}
