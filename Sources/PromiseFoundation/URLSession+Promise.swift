import CancellablePromiseKit
import Foundation
import PromiseCore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// URLSession tasks as promises, in PromiseKit's spelling. Each promise has its URLSessionTask
// attached (a package-level hook of PromiseCore), so `cancellize()` cancels the real request.

/// What a URLSession promise sends: a `URL` or a `URLRequest` (PromiseKit's protocol).
public protocol URLRequestConvertible {
    /// The request to send.
    var pmkRequest: URLRequest { get }
}

extension URLRequest: URLRequestConvertible {
    /// The request itself.
    public var pmkRequest: URLRequest { self }
}

extension URL: URLRequestConvertible {
    /// A `GET` request for this URL.
    public var pmkRequest: URLRequest { URLRequest(url: self) }
}

extension URLSession {
    /// Starts a data task for `convertible` and returns a promise of its body and response.
    ///
    /// The task is resumed at once. The promise settles on the session's delegate queue (a
    /// background queue for `URLSession.shared`); handlers run where their `on:` says. It is
    /// fulfilled for every response the server sends, whatever the HTTP status: chain
    /// `validate()` to reject non-2xx statuses.
    ///
    /// Cancelling: the task is attached to the promise, so `dataTask(.promise, with:)
    /// .cancellize()` gives a `CancellablePromise` whose `cancel()` cancels the `URLSessionTask`
    /// (the connection is closed) and rejects the promise at once with
    /// `CancellablePromiseError.cancelled`.
    ///
    /// ```swift
    /// let request = URLSession.shared.dataTask(.promise, with: url)
    ///     .cancellize()
    ///     .validate()
    ///     .map { try JSONDecoder().decode(Foo.self, from: $0.data) }
    /// // …
    /// request.cancel()   // the HTTP request stops; `request` rejects with .cancelled
    /// ```
    public func dataTask(
        _: PMKNamespacer,
        with convertible: URLRequestConvertible
    ) -> Promise<(data: Data, response: URLResponse)> {
        startTask { complete in
            dataTask(with: convertible.pmkRequest) { data, response, error in
                complete(Self.result(data, response, error))
            }
        }.promise
    }

    /// Starts an upload task sending `data` as the body of `convertible` (usually a `POST` or
    /// `PUT` request) and returns a promise of the response body and response.
    ///
    /// Queues, HTTP statuses and cancellation as ``dataTask(_:with:)``: `cancellize()` then
    /// `cancel()` cancels the upload and rejects with `CancellablePromiseError.cancelled`.
    public func uploadTask(
        _: PMKNamespacer,
        with convertible: URLRequestConvertible,
        from data: Data
    ) -> Promise<(data: Data, response: URLResponse)> {
        startTask { complete in
            uploadTask(with: convertible.pmkRequest, from: data) { data, response, error in
                complete(Self.result(data, response, error))
            }
        }.promise
    }

    /// Starts an upload task sending the contents of the file at `file` as the body of
    /// `convertible` and returns a promise of the response body and response.
    ///
    /// Queues, HTTP statuses and cancellation as ``dataTask(_:with:)``.
    public func uploadTask(
        _: PMKNamespacer,
        with convertible: URLRequestConvertible,
        fromFile file: URL
    ) -> Promise<(data: Data, response: URLResponse)> {
        startTask { complete in
            uploadTask(with: convertible.pmkRequest, fromFile: file) { data, response, error in
                complete(Self.result(data, response, error))
            }
        }.promise
    }

    /// Starts a download task for `convertible`; once downloaded, the file is moved to
    /// `saveLocation` and the promise is fulfilled with that location and the response.
    ///
    /// The session deletes its temporary file as soon as the task completes, hence the required
    /// `to:` (as in PromiseKit). Moving fails, rejecting the promise, if a file already exists
    /// at `saveLocation`. Queues, HTTP statuses and cancellation as ``dataTask(_:with:)``: a
    /// cancelled download stops transferring and leaves no file at `saveLocation`.
    public func downloadTask(
        _: PMKNamespacer,
        with convertible: URLRequestConvertible,
        to saveLocation: URL
    ) -> Promise<(saveLocation: URL, response: URLResponse)> {
        startTask { complete in
            downloadTask(with: convertible.pmkRequest) { temporary, response, error in
                if let error {
                    complete(.rejected(error))
                } else if let temporary, let response {
                    do {
                        try FileManager.default.moveItem(at: temporary, to: saveLocation)
                        complete(.fulfilled((saveLocation, response)))
                    } catch {
                        complete(.rejected(error))
                    }
                } else {
                    complete(.rejected(PMKError.invalidCallingConvention))
                }
            }
        }.promise
    }

    /// Creates a task with `makeTask`, attaches it to a new promise that its completion handler
    /// settles, and resumes it. Returns the task too (tests observe its lifetime).
    func startTask<T>(
        _ makeTask: (_ complete: @escaping @Sendable (Result<T>) -> Void) -> URLSessionTask
    ) -> (promise: Promise<T>, task: URLSessionTask) {
        let promise = Promise<T>._makePending()
        // The completion handler holds the promise: nothing else may (`dataTask(…).done {…}`).
        let task = makeTask { result in promise.resolve(result) }
        let box = WeakTaskBox(task: task, promise: promise)
        promise.attachCancellation { box.cancel() }
        task.resume()
        return (promise, task)
    }

    private static func result(
        _ data: Data?, _ response: URLResponse?, _ error: Error?
    ) -> Result<(data: Data, response: URLResponse)> {
        if let error { return .rejected(error) }
        guard let response else { return .rejected(PMKError.invalidCallingConvention) }
        return .fulfilled((data ?? Data(), response))
    }
}

/// What a URLSession promise's attached cancellation reaches: held weakly, so that the
/// attachment keeps neither the task nor the promise alive.
private final class WeakTaskBox<T>: @unchecked Sendable {
    // @unchecked: both references are written once, in `init`, and only loaded afterwards;
    // `URLSessionTask` and `Promise` are thread-safe.
    weak var task: URLSessionTask?
    weak var promise: Promise<T>?
    private let resumed = DispatchTime.now()

    init(task: URLSessionTask, promise: Promise<T>) {
        self.task = task
        self.promise = promise
    }

    /// Rejects the promise at once, and cancels the task.
    func cancel() {
        promise?.resolve(.rejected(CancellablePromiseError.cancelled))
        guard let task else { return }
        #if canImport(FoundationNetworking)
        // FoundationNetworking can stop the process ("Trying to access a behaviour for a task
        // that in not in the registry") when `cancel()` comes soon after `resume()` while the
        // response arrives. A task cancelled that early is cancelled 20 ms after its
        // `resume()` instead: the promise is already rejected at once all the same.
        let earliest = resumed + .milliseconds(20)
        if DispatchTime.now() < earliest {
            let box = UncheckedSendable(task)
            DispatchQueue.global().asyncAfter(deadline: earliest) { box.value.cancel() }
            return
        }
        #endif
        task.cancel()
    }
}

// MARK: - Validating HTTP responses

/// The error `validate()` rejects with when the server answers with a status outside 200…299.
///
/// It carries the status code, the response body and the response (PromiseKit's
/// `PMKHTTPError`, so code catching `PMKHTTPError.badStatusCode(code, data, response)` compiles
/// unchanged). It is not a cancellation error: a default `catch` receives it.
///
/// ```swift
/// URLSession.shared.dataTask(.promise, with: url).validate().catch { error in
///     if let http = error as? PMKHTTPError {
///         print(http.statusCode, http.bodyString ?? "")
///     }
/// }
/// ```
public enum PMKHTTPError: Error, @unchecked Sendable {
    // @unchecked: `HTTPURLResponse` is not declared `Sendable` on every platform, but is
    // immutable once received.
    /// The response had status `code`; `data` is its body.
    case badStatusCode(Int, Data, HTTPURLResponse)

    /// The HTTP status code, for example 404.
    public var statusCode: Int {
        switch self {
        case .badStatusCode(let code, _, _): return code
        }
    }

    /// The response body.
    public var body: Data {
        switch self {
        case .badStatusCode(_, let data, _): return data
        }
    }

    /// The response body decoded as UTF-8, or `nil` if it is not UTF-8 text.
    public var bodyString: String? {
        String(data: body, encoding: .utf8)
    }

    /// The response.
    public var response: HTTPURLResponse {
        switch self {
        case .badStatusCode(_, _, let response): return response
        }
    }

    /// The response body decoded from JSON as `type` with `decoder`, or `nil` if it does not
    /// decode (an API's error document, for example). Runs synchronously on the calling thread.
    ///
    /// ```swift
    /// .catch { error in
    ///     if let problem = (error as? PMKHTTPError)?.decodeResponse(Problem.self) { show(problem) }
    /// }
    /// ```
    public func decodeResponse<T: Decodable>(_ type: T.Type, decoder: JSONDecoder = JSONDecoder()) -> T? {
        try? decoder.decode(type, from: body)
    }

    /// The response body parsed with `JSONSerialization` (a `[String: Any]` for a JSON object,
    /// an `[Any]` for an array), or `nil` if it is not JSON. PromiseKit's name: the value need
    /// not be a dictionary, so cast it (`as? [String: Any]`).
    public var jsonDictionary: Any? {
        try? JSONSerialization.jsonObject(with: body)
    }
}

extension PMKHTTPError: CustomStringConvertible, LocalizedError {
    /// "HTTP status 404 (not found) from http://…: <the start of the body>".
    public var description: String {
        var text = "HTTP status \(statusCode) (\(HTTPURLResponse.localizedString(forStatusCode: statusCode)))"
        if let url = response.url { text += " from \(url.absoluteString)" }
        if let bodyString, !bodyString.isEmpty {
            let limit = 500
            text += ": " + (bodyString.count > limit ? bodyString.prefix(limit) + "…" : bodyString)
        }
        return text
    }

    /// The same as `description`.
    public var errorDescription: String? { description }
}

/// Throws `PMKHTTPError.badStatusCode` for an HTTP response outside 200…299. Non-HTTP responses
/// (for example `file:` URLs) pass.
private func validateStatus(of response: URLResponse, body: @autoclosure () -> Data) throws {
    guard let http = response as? HTTPURLResponse else { return }
    guard (200..<300).contains(http.statusCode) else {
        throw PMKHTTPError.badStatusCode(http.statusCode, body(), http)
    }
}

extension Promise where T == (data: Data, response: URLResponse) {
    /// Rejects with ``PMKHTTPError`` when the response's HTTP status is not 2xx; otherwise
    /// passes the body and response on.
    ///
    /// The check runs synchronously on the thread that settles this promise (the session's
    /// delegate queue). The task attached to this promise stays attached to the validated one:
    /// `dataTask(.promise, with: url).validate().cancellize()` still cancels the request.
    public func validate() -> Promise<T> {
        let validated = map(on: nil) { result -> T in
            try validateStatus(of: result.response, body: result.data)
            return result
        }
        if let task = _attachedCancellation {
            validated.attachCancellation(task)
        }
        return validated
    }
}

extension CancellablePromise where T == (data: Data, response: URLResponse) {
    /// Rejects with ``PMKHTTPError`` when the response's HTTP status is not 2xx; otherwise
    /// passes the body and response on. The result is in the same cancellable chain: cancelling
    /// it cancels the request.
    ///
    /// The check runs synchronously on the thread that settles this promise (the session's
    /// delegate queue); it does not run once the chain is cancelled.
    public func validate() -> CancellablePromise<T> {
        map(on: nil) { result -> T in
            try validateStatus(of: result.response, body: result.data)
            return result
        }
    }
}

extension Promise where T == (saveLocation: URL, response: URLResponse) {
    /// Rejects with ``PMKHTTPError`` (its body read from the downloaded file, which is then
    /// removed) when the response's HTTP status is not 2xx; otherwise passes the location and
    /// response on. Runs synchronously on the thread that settles this promise; the attached
    /// download task stays attached, as for the data task's `validate()`.
    public func validate() -> Promise<T> {
        let validated = map(on: nil) { result -> T in
            try validateDownload(result)
            return result
        }
        if let task = _attachedCancellation {
            validated.attachCancellation(task)
        }
        return validated
    }
}

extension CancellablePromise where T == (saveLocation: URL, response: URLResponse) {
    /// Rejects with ``PMKHTTPError`` when the download's HTTP status is not 2xx (see
    /// `Promise.validate()` for downloads). Same cancellable chain; runs synchronously on the
    /// settling thread, and not once the chain is cancelled.
    public func validate() -> CancellablePromise<T> {
        map(on: nil) { result -> T in
            try validateDownload(result)
            return result
        }
    }
}

private func validateDownload(_ result: (saveLocation: URL, response: URLResponse)) throws {
    do {
        try validateStatus(of: result.response, body: (try? Data(contentsOf: result.saveLocation)) ?? Data())
    } catch {
        try? FileManager.default.removeItem(at: result.saveLocation)
        throw error
    }
}

// MARK: - A response's text

extension String {
    /// Decodes `data`, a response body, with the text encoding the response names (the
    /// `charset` of its `Content-Type`, read by Foundation into `textEncodingName`), or as UTF-8
    /// when it names none or one this initialiser does not know. `nil` if `data` is not valid
    /// text in that encoding. Available on Linux and Apple platforms alike.
    ///
    /// The names known, in any case and with their usual aliases: UTF-8, UTF-16 and UTF-32 (and
    /// their `BE`/`LE` forms), US-ASCII, ISO-8859-1 and -2, windows-1250 to -1254, Shift_JIS,
    /// ISO-2022-JP, macintosh, and EUC-JP (which Foundation decodes on Apple platforms only:
    /// `nil` on Linux for anything but ASCII text).
    ///
    /// ```swift
    /// URLSession.shared.dataTask(.promise, with: url)
    ///     .compactMap { String(data: $0.data, urlResponse: $0.response) }
    ///     .done { text in print(text) }
    /// ```
    public init?(data: Data, urlResponse: URLResponse) {
        let encoding = urlResponse.textEncodingName.flatMap(stringEncoding(ianaName:)) ?? .utf8
        self.init(data: data, encoding: encoding)
    }
}

/// The `String.Encoding` of an IANA character set name (RFC 2978), case-insensitive; `nil` for a
/// name not in the table. Foundation's own lookup of these names is Core Foundation's on Apple
/// platforms and not public on Linux, so the package carries the common ones.
func stringEncoding(ianaName name: String) -> String.Encoding? {
    let key = name.trimmingCharacters(in: CharacterSet(charactersIn: "\"' ")).lowercased()
    switch key {
    case "utf-8", "utf8": return .utf8
    case "utf-16": return .utf16
    case "utf-16be": return .utf16BigEndian
    case "utf-16le": return .utf16LittleEndian
    case "utf-32": return .utf32
    case "utf-32be": return .utf32BigEndian
    case "utf-32le": return .utf32LittleEndian
    case "us-ascii", "ascii", "iso646-us", "ansi_x3.4-1968": return .ascii
    case "iso-8859-1", "iso_8859-1", "iso8859-1", "latin1", "l1", "cp819": return .isoLatin1
    case "iso-8859-2", "iso_8859-2", "iso8859-2", "latin2", "l2": return .isoLatin2
    case "windows-1250", "cp1250": return .windowsCP1250
    case "windows-1251", "cp1251": return .windowsCP1251
    case "windows-1252", "cp1252": return .windowsCP1252
    case "windows-1253", "cp1253": return .windowsCP1253
    case "windows-1254", "cp1254": return .windowsCP1254
    case "shift_jis", "shift-jis", "sjis", "ms_kanji", "windows-31j", "cp932": return .shiftJIS
    case "euc-jp": return .japaneseEUC
    case "iso-2022-jp": return .iso2022JP
    case "macintosh", "mac", "macroman", "x-mac-roman": return .macOSRoman
    default: return nil
    }
}
