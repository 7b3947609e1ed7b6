import ExampleSupport
import Foundation
import XCTest

final class CommandTests: XCTestCase {
    func testNoArgumentsRunsEveryScenario() throws {
        XCTAssertEqual(try Command.parse([]), .all)
        XCTAssertEqual(
            Scenario.scenarios(for: .all).map(\.name), ["mirrors", "subtasks", "adopt", "search", "share", "render"])
    }

    func testSubcommands() throws {
        XCTAssertEqual(try Command.parse(["mirrors"]), .mirrors)
        XCTAssertEqual(try Command.parse(["subtasks"]), .subtasks)
        XCTAssertEqual(try Command.parse(["adopt"]), .adopt)
        XCTAssertEqual(try Command.parse(["search"]), .search)
        XCTAssertEqual(try Command.parse(["share"]), .share)
        XCTAssertEqual(Scenario.scenarios(for: .share).map(\.name), ["share"])
        XCTAssertEqual(try Command.parse(["render"]), .render)
        XCTAssertEqual(Scenario.scenarios(for: .render).map(\.name), ["render"])
        XCTAssertEqual(try Command.parse(["--help"]), .help)
        XCTAssertTrue(Scenario.scenarios(for: .help).isEmpty)
    }

    func testMirrorsWithURLs() throws {
        let command = try Command.parse(["mirrors", "--url", "https://a.example/f", "--url", "http://b.example/f"])
        XCTAssertEqual(command, .mirrorURLs([URL(string: "https://a.example/f")!, URL(string: "http://b.example/f")!]))
    }

    func testBadArgumentsAreUsageErrors() {
        let bad: [[String]] = [
            ["mirror"], ["mirrors", "--url"], ["mirrors", "--url", "ftp://a.example/f"], ["mirrors", "--url", "nope"],
            ["mirrors", "--fast"], ["adopt", "now"], ["search", "swift"], ["share", "now"], ["render", "--rows", "10"],
            ["subtasks", "--url", "https://a.example"],
            ["help", "me"],
        ]
        for arguments in bad {
            XCTAssertThrowsError(try Command.parse(arguments), "\(arguments)") { error in
                XCTAssertTrue(error is Command.UsageError)
            }
        }
    }
}
