import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Makes the worker's outside calls with URLSession: no redirects followed, no cookies or
/// cache, a bounded time per call. A 2xx answer fulfils; anything else is a failure whose
/// text says what happened (`HTTP 500: …`, `timed out after 10 s`, the network error).
final class DeliveryHTTPClient: Sendable {
    let timeout: Double
    private let session: URLSession
    private let delegate: RedirectRefusingDelegate

    /// `timeout` is rounded up to whole seconds, at least 1: FoundationNetworking on Linux
    /// truncates its timeouts to whole seconds (0.5 would time out at once).
    init(timeout: Double, maxConnections: Int) {
        let timeout = max(1, timeout.rounded(.up))
        self.timeout = timeout
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpMaximumConnectionsPerHost = max(1, maxConnections)
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        delegate = RedirectRefusingDelegate()
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    deinit { session.finishTasksAndInvalidate() }

    /// Sends the call and waits for its outcome. Not cancelled with the calling task: a call
    /// once made runs to its answer or its timeout, so its outcome can be recorded.
    func send(_ call: OutgoingCall) async -> CallOutcome {
        var request = URLRequest(url: call.url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = "POST"
        for (name, value) in call.headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = Data(call.body)
        let answer = await withCheckedContinuation { (continuation: CheckedContinuation<RedirectRefusingDelegate.Answer, Never>) in
            let task = session.dataTask(with: request)
            delegate.register(task, continuation)
            task.resume()
        }
        return Self.outcome(answer, timeout: timeout)
    }

    static func outcome(_ answer: RedirectRefusingDelegate.Answer, timeout: Double) -> CallOutcome {
        if let error = answer.error {
            switch error.code {
            case .timedOut: return .failed("timed out after \(seconds(timeout)) s")
            default: return .failed("network error: \(answer.errorText ?? error.localizedDescription)")
            }
        }
        if let text = answer.errorText { return .failed("network error: \(text)") }
        guard let status = answer.status else { return .failed("network error: no HTTP answer") }
        if (200...299).contains(status) { return .fulfilled }
        var text = "HTTP \(status)"
        if (300...399).contains(status) { text += " (redirects are not followed: set the app's webhook_url or revenuecat_api_base to the final address)" }
        let snippet = printable(answer.body)
        if !snippet.isEmpty { text += ": " + snippet }
        return .failed(text)
    }

    /// The start of an answer's body on one line, for the error text.
    static func printable(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes.prefix(200), as: UTF8.self)
        let oneLine = text.map { $0.isNewline || $0 == "\t" ? " " : $0 }.filter { !($0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } ?? false) }
        return String(oneLine).trimmingCharacters(in: .whitespaces)
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
