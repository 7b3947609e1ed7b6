import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The HTTP server of `Server/server.py`, run by the tests on 127.0.0.1 with a free port.
///
/// Started once per test class (`start()` in `class func setUp`) and stopped by the tests
/// (`stop()`: terminate, then wait). The script also exits when its standard input closes, so
/// it cannot outlive a crashed test process.
final class TestServer: @unchecked Sendable {
    let port: Int
    private let process: Process
    private let input: Pipe

    private init(process: Process, input: Pipe, port: Int) {
        self.process = process
        self.input = input
        self.port = port
    }

    /// Launches the script and reads the port it prints.
    static func start() throws -> TestServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", try scriptURL().path]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        var line = Data()
        let reader = output.fileHandleForReading
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) else {
            process.terminate()
            process.waitUntilExit()
            throw TestServerError.noPort(text)
        }
        return TestServer(process: process, input: input, port: port)
    }

    /// Terminates the server and waits for it to exit.
    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? input.fileHandleForWriting.close()
    }

    var isRunning: Bool { process.isRunning }

    func url(_ pathAndQuery: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(pathAndQuery)")!
    }

    /// A server event (see the script): when the server saw a request start, finish or its
    /// connection close.
    struct Event: Decodable {
        let id: String
        let type: String
        let time: Double
        let bytes: Int
    }

    /// The events of request `id` of `type`, waiting up to `wait` seconds for one to exist.
    func events(id: String, type: String, wait: TimeInterval = 0) throws -> [Event] {
        let data = try syncGet(url("/events?id=\(id)&type=\(type)&wait=\(wait)"), timeout: wait + 10)
        return try JSONDecoder().decode([Event].self, from: data)
    }

    /// The first event of request `id` of `type`, waiting up to `wait` seconds for it.
    func event(id: String, type: String, wait: TimeInterval) throws -> Event? {
        try events(id: id, type: type, wait: wait).first
    }

    private static func scriptURL() throws -> URL {
        if let url = Bundle.module.url(forResource: "server", withExtension: "py", subdirectory: "Server") {
            return url
        }
        let nearby = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Server/server.py")
        guard FileManager.default.fileExists(atPath: nearby.path) else {
            throw TestServerError.noScript
        }
        return nearby
    }
}

enum TestServerError: Error {
    case noPort(String)
    case noScript
    case request(String)
}

/// A blocking GET through its own ephemeral session (no main queue needed).
func syncGet(_ url: URL, timeout: TimeInterval = 10) throws -> Data {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.timeoutIntervalForRequest = timeout
    let session = URLSession(configuration: configuration)
    defer { session.finishTasksAndInvalidate() }
    let box = SendableBox<(Data?, Error?)>((nil, nil))
    let done = Handshake()
    session.dataTask(with: url) { data, _, error in
        box.value = (data, error)
        done.signal()
    }.resume()
    guard done.wait(seconds: timeout + 1) else {
        throw TestServerError.request("timed out: \(url)")
    }
    let (data, error) = box.value
    if let error { throw error }
    return data ?? Data()
}
