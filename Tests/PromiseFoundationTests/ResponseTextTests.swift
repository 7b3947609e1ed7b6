import Foundation
import PromiseFoundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// PromiseKit's helpers for reading a response: `String(data:urlResponse:)` and
/// `PMKHTTPError`'s `decodeResponse(_:decoder:)` and `jsonDictionary`, against the test server
/// (`/text` answers with a body in the charset asked for) and with responses made here.
final class ResponseTextTests: LocalServerTestCase {
    private func textURL(_ text: String, charset: String? = nil, type: String? = nil, status: Int? = nil) -> URL {
        var components = URLComponents(url: server.url("/text"), resolvingAgainstBaseURL: false)!
        components.queryItems =
            [URLQueryItem(name: "text", value: text)]
            + [("charset", charset), ("type", type), ("status", status.map(String.init))]
            .compactMap { name, value in value.map { URLQueryItem(name: name, value: $0) } }
        return components.url!
    }

    private func response(contentType: String?) -> HTTPURLResponse {
        HTTPURLResponse(
            url: URL(string: "http://127.0.0.1/")!, statusCode: 200, httpVersion: "HTTP/1.1",
            headerFields: contentType.map { ["Content-Type": $0] } ?? [:])!
    }

    // MARK: String(data:urlResponse:)

    /// A body is decoded with the charset its response names: ISO-8859-1 bytes of a server
    /// answering `charset=ISO-8859-1` read back as the text sent.
    func testStringDecodesABodyInTheCharsetTheServerNamed() throws {
        let text = session.dataTask(.promise, with: textURL("café crème", charset: "ISO-8859-1"))
            .compactMap(on: nil) { String(data: $0.data, urlResponse: $0.response) }
        XCTAssertEqual(waitForValue(text), "café crème")
        let latin1 = try XCTUnwrap(waitForValue(session.dataTask(.promise, with: textURL("é", charset: "iso-8859-1"))))
        XCTAssertEqual(Array(latin1.data), [0xE9], "the server sent one ISO-8859-1 byte")
    }

    /// Every charset name of the documented list decodes: windows-1251, Shift_JIS, ISO-2022-JP
    /// and UTF-16BE bodies from the server read back as the text sent.
    func testStringDecodesTheOtherListedCharsets() {
        let samples = [("windows-1251", "кафе"), ("shift_jis", "日本"), ("iso-2022-jp", "日本"), ("UTF-16BE", "é")]
        for (charset, sent) in samples {
            let url = textURL(sent, charset: charset)
            let received = session.dataTask(.promise, with: url).map(on: nil) {
                String(data: $0.data, urlResponse: $0.response)
            }
            XCTAssertEqual(waitForValue(received), sent, charset)
        }
    }

    /// Without a charset, and with one the table does not know, the body is decoded as UTF-8.
    func testStringDecodesAsUTF8WithoutAKnownCharset() {
        let utf8 = Data("café".utf8)
        XCTAssertEqual(String(data: utf8, urlResponse: response(contentType: "text/plain")), "café")
        XCTAssertEqual(String(data: utf8, urlResponse: response(contentType: nil)), "café")
        XCTAssertEqual(String(data: utf8, urlResponse: response(contentType: "text/plain; charset=x-unknown")), "café")
        let plain = URLResponse(
            url: URL(fileURLWithPath: "/tmp/a.txt"), mimeType: "text/plain", expectedContentLength: 5,
            textEncodingName: nil)
        XCTAssertEqual(String(data: utf8, urlResponse: plain), "café")
    }

    /// Charset names are matched whatever their case, and a known alias is honoured.
    func testStringMatchesCharsetNamesInAnyCase() {
        let latin1 = Data([0x63, 0x61, 0x66, 0xE9])
        for charset in ["ISO-8859-1", "iso-8859-1", "Latin1", "ISO_8859-1"] {
            XCTAssertEqual(
                String(data: latin1, urlResponse: response(contentType: "text/plain; charset=\(charset)")), "café",
                charset)
        }
        XCTAssertEqual(
            String(data: Data([0xE1, 0xE2]), urlResponse: response(contentType: "text/plain; charset=WINDOWS-1253")),
            "αβ")
    }

    /// Bytes that are not text in the named encoding give `nil`.
    func testStringIsNilForBytesInvalidInTheEncoding() {
        XCTAssertNil(String(data: Data([0xC3, 0x28]), urlResponse: response(contentType: "text/plain; charset=utf-8")))
        XCTAssertNil(String(data: Data([0xE9]), urlResponse: response(contentType: "text/plain; charset=us-ascii")))
    }

    // MARK: PMKHTTPError

    private struct Problem: Decodable, Equatable {
        let code: Int
        let reason: String
    }

    /// `decodeResponse(_:decoder:)` decodes the JSON body of an error status with the decoder given.
    func testDecodeResponseDecodesTheErrorBody() throws {
        let url = textURL(#"{"code": 7, "reason": "quota"}"#, type: "application/json", status: 422)
        let error = try XCTUnwrap(waitForError(session.dataTask(.promise, with: url).validate()) as? PMKHTTPError)
        XCTAssertEqual(error.statusCode, 422)
        XCTAssertEqual(error.decodeResponse(Problem.self), Problem(code: 7, reason: "quota"))

        let snake = JSONDecoder()
        snake.keyDecodingStrategy = .convertFromSnakeCase
        struct Named: Decodable, Equatable { let errorName: String }
        let named = PMKHTTPError.badStatusCode(400, Data(#"{"error_name": "x"}"#.utf8), response(contentType: nil))
        XCTAssertEqual(named.decodeResponse(Named.self, decoder: snake), Named(errorName: "x"))
    }

    /// `decodeResponse` is `nil` when the body does not decode as the type.
    func testDecodeResponseIsNilForABodyOfAnotherShape() {
        let error = PMKHTTPError.badStatusCode(500, Data("status 500 body".utf8), response(contentType: nil))
        XCTAssertNil(error.decodeResponse(Problem.self))
    }

    /// `jsonDictionary` is the body parsed as JSON, a dictionary for an object, and `nil` for a
    /// body that is not JSON.
    func testJSONDictionaryParsesTheBody() throws {
        let url = textURL(#"{"code": 7, "tags": ["a"]}"#, type: "application/json", status: 400)
        let error = try XCTUnwrap(waitForError(session.dataTask(.promise, with: url).validate()) as? PMKHTTPError)
        let json = try XCTUnwrap(error.jsonDictionary as? [String: Any])
        XCTAssertEqual(json["code"] as? Int, 7)
        XCTAssertEqual(json["tags"] as? [String], ["a"])
        let notJSON = PMKHTTPError.badStatusCode(500, Data("oops".utf8), response(contentType: nil))
        XCTAssertNil(notJSON.jsonDictionary)
    }
}
