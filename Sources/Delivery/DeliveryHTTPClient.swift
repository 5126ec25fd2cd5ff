import CCurl
import Dispatch
import Foundation

/// Makes the worker's outside calls with libcurl's easy interface, one blocking transfer per call
/// on its own thread: no redirects followed, no cookies or cache, and `timeout` bounds the whole
/// call (connecting, sending, and an answer that trickles in a byte at a time). A 2xx answer
/// fulfils; anything else is a failure whose text says what happened (`HTTP 500: …`, `timed out
/// after 10 s`, the network error).
///
/// (URLSession on Linux kept a core busy while a call waited for its answer, and its timeouts only
/// bound the silence between bytes.)
final class DeliveryHTTPClient: Sendable {
    let timeout: Double
    /// At most this many calls at once (the worker's `maxInFlight`): each holds a thread.
    private let slots: DispatchSemaphore

    /// What came back: a status (when an answer arrived), its first bytes, or what went wrong.
    struct Answer: Sendable, Equatable {
        var status: Int?
        var body: [UInt8] = []
        var timedOut = false
        var errorText: String?
    }

    /// Bytes of an answer's body kept for the error text; the rest is dropped as it arrives.
    static let keptBodyBytes = 512

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_ALL)) }()

    /// `timeout` in seconds, at least 1.
    init(timeout: Double, maxConnections: Int) {
        _ = Self.globalInit
        self.timeout = max(1, timeout)
        slots = DispatchSemaphore(value: max(1, maxConnections))
    }

    /// Sends the call and waits for its outcome, at most `timeout` seconds in all. Not cancelled
    /// with the calling task: a call once made runs to its answer or its timeout, so its outcome
    /// can be recorded.
    func send(_ call: OutgoingCall) async -> CallOutcome {
        let timeout = self.timeout
        let slots = self.slots
        let answer = await withCheckedContinuation { (continuation: CheckedContinuation<Answer, Never>) in
            let thread = Thread {
                slots.wait()
                let answer = Self.perform(call, timeout: timeout)
                slots.signal()
                continuation.resume(returning: answer)
            }
            thread.name = "delivery-call"
            thread.start()
        }
        return Self.outcome(answer, timeout: timeout, secrets: call.secrets)
    }

    /// One blocking transfer.
    static func perform(_ call: OutgoingCall, timeout: Double) -> Answer {
        guard let handle = curl_easy_init() else { return Answer(errorText: "libcurl could not start a transfer") }
        defer { curl_easy_cleanup(handle) }
        var headers: UnsafeMutablePointer<curl_slist>?
        for (name, value) in call.headers where name.lowercased() != "content-length" {
            headers = curl_slist_append(headers, "\(name): \(value)")
        }
        // Without this, curl asks the receiver to confirm bodies over 1 KiB first.
        headers = curl_slist_append(headers, "Expect:")
        defer { curl_slist_free_all(headers) }

        let sink = BodySink()
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let url = call.url.absoluteString
        let code: CURLcode = url.withCString { urlPointer in
            call.body.withUnsafeBufferPointer { body in
                errorBuffer.withUnsafeMutableBufferPointer { errors in
                    withExtendedLifetime(sink) {
                        _ = ccurl_setopt_pointer(handle, CURLOPT_URL, urlPointer)
                        _ = ccurl_setopt_long(handle, CURLOPT_POST, 1)
                        _ = ccurl_setopt_pointer(handle, CURLOPT_POSTFIELDS, body.baseAddress ?? UnsafePointer(bitPattern: 1))
                        _ = ccurl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count)
                        _ = ccurl_setopt_pointer(handle, CURLOPT_HTTPHEADER, headers)
                        _ = ccurl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
                        _ = ccurl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(timeout * 1000))
                        _ = ccurl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
                        _ = ccurl_setopt_long(handle, CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTP | CURLPROTO_HTTPS))
                        _ = ccurl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errors.baseAddress)
                        _ = ccurl_setopt_write_function(handle) { data, size, count, context in
                            let sink = Unmanaged<BodySink>.fromOpaque(context!).takeUnretainedValue()
                            let n = size * count
                            let room = DeliveryHTTPClient.keptBodyBytes - sink.bytes.count
                            if room > 0, let data {
                                data.withMemoryRebound(to: UInt8.self, capacity: n) {
                                    sink.bytes.append(contentsOf: UnsafeBufferPointer(start: $0, count: min(room, n)))
                                }
                            }
                            return n
                        }
                        _ = ccurl_setopt_pointer(handle, CURLOPT_WRITEDATA, Unmanaged.passUnretained(sink).toOpaque())
                        return curl_easy_perform(handle)
                    }
                }
            }
        }
        var status = 0
        _ = ccurl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var answer = Answer(status: status > 0 ? status : nil, body: sink.bytes)
        if code == CURLE_OPERATION_TIMEDOUT {
            answer.timedOut = true
        } else if code != CURLE_OK {
            let detail = String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            answer.errorText = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
        }
        return answer
    }

    /// The first bytes of an answer's body, filled by curl's write callback.
    private final class BodySink {
        var bytes: [UInt8] = []
    }

    static func outcome(_ answer: Answer, timeout: Double, secrets: [String] = []) -> CallOutcome {
        if answer.timedOut { return .failed("timed out after \(seconds(timeout)) s") }
        if let text = answer.errorText { return .failed("network error: " + Redaction.redact(text, secrets: secrets)) }
        guard let status = answer.status else { return .failed("network error: no HTTP answer") }
        if (200...299).contains(status) { return .fulfilled }
        var text = "HTTP \(status)"
        if (300...399).contains(status) { text += " (redirects are not followed: set the app's webhook_url or revenuecat_api_base to the final address)" }
        // Redacted whole, then cut: a secret cut by the cut would slip through in part.
        let snippet = printable(Array(Redaction.redact(String(decoding: answer.body.prefix(64 << 10), as: UTF8.self), secrets: secrets).utf8))
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
