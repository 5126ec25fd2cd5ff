import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The state shared between libmicrohttpd's worker threads (through the C
/// callbacks in `MHDCallbacks`), the handler tasks and `HTTPServer.shutdown`.
///
/// MHD holds an unretained pointer to it as callback closure; `HTTPServer`
/// keeps one retain on MHD's behalf until `MHD_stop_daemon` has returned.
final class ServerCore: @unchecked Sendable {
    enum Phase: Sendable {
        /// Serving normally.
        case running
        /// Quiesced: no new connections; in-flight requests finish.
        case draining
        /// The drain is over: no handler is started any more, so no connection
        /// gets suspended again before `MHD_stop_daemon` (which would abort on
        /// a suspended connection).
        case stopping
        case stopped
    }

    struct State {
        var phase = Phase.running
        /// Requests between the URI-log and request-completed callbacks.
        var openRequests = 0
        /// Suspended requests whose handler has not answered yet.
        var awaitingHandler: [ObjectIdentifier: RequestContext] = [:]
    }

    let configuration: HTTPServer.Configuration
    /// Called on the connection's worker thread once the request is in; answers through the
    /// responder, now or later, from any thread.
    let handler: @Sendable (HTTPRequest, HTTPResponder) -> Void
    let state = Locked(State())
    /// MHD's log lines while the daemon starts (they explain a failed start);
    /// nil once started, when lines go to `configuration.errorLog` instead.
    /// Separate from `state` because MHD may log while holding its own locks.
    private let startupLog = Locked<[String]?>([])

    /// Bytes of an oversized upload (chunked, or declared a little over the limit by a client that
    /// does not wait for "100 Continue") we read and drop so the client can still be answered 413;
    /// beyond this the connection is simply closed.
    static let discardAllowance = 8 << 20

    init(configuration: HTTPServer.Configuration,
         handler: @escaping @Sendable (HTTPRequest, HTTPResponder) -> Void) {
        self.configuration = configuration
        self.handler = handler
    }

    // MARK: - Callbacks from MHD worker threads

    /// The request line has been parsed: start a request context.
    func beginRequest(target: String) -> UnsafeMutableRawPointer {
        state.withLock { $0.openRequests += 1 }
        let context = RequestContext(target: RequestTarget(target))
        return Unmanaged.passRetained(context).toOpaque()
    }

    /// MHD's access handler, called once when the headers are in, once per
    /// chunk of body, then (repeatedly, until a response is queued) with no data.
    func handle(connection: OpaquePointer, method: String, version: UnsafePointer<CChar>?, context: RequestContext,
                upload: UnsafeRawPointer?, uploadSize: UnsafeMutablePointer<Int>) -> MHD_Result {
        let limit = configuration.maxBodyBytes

        if !context.sawHeaders {
            context.sawHeaders = true
            context.method = method
            context.headers = Self.headers(of: connection)
            let isHTTP10 = version.map { String(cString: $0) == "HTTP/1.0" } ?? false
            if let problem = Self.framingProblem(context.headers, isHTTP10: isHTTP10) {
                // Answered before the body is read, and the connection closed: what follows the
                // ambiguous body must never be read as another request (request smuggling).
                var refusal = HTTPResponse.error(400, code: "bad_request", message: problem)
                refusal.headers.append(("Connection", "close"))
                return queue(refusal, on: connection, for: context)
            }
            let declared = Self.contentLength(context.headers)
            if let screen = configuration.screen, let early = screen(makeRequest(context: context)) {
                // (A refused client's body is read as far as an oversized one would be.)
                let over = declared.map { $0 > UInt64(limit) ? $0 - UInt64(limit) : 0 } ?? 0
                return answerEarly(early, declared: declared, over: over, on: connection, for: context)
            }
            if let declared {
                if declared > UInt64(limit) {
                    return answerEarly(Self.bodyTooLarge(limit: limit), declared: declared, over: declared - UInt64(limit),
                                       on: connection, for: context)
                }
                // Room for what was declared, up to a mebibyte: a client that declares more must
                // send it before the buffer grows (a declaration alone costs the server nothing).
                context.body.reserveCapacity(Int(min(declared, 1 << 20)))
            }
            return .YES
        }

        let size = uploadSize.pointee
        if size > 0, let upload {
            uploadSize.pointee = 0  // everything consumed (kept or dropped)
            if context.earlyAnswer != nil {
                context.discardedBytes += size
                // Past what may be dropped an answer is not worth the bandwidth: close.
                return context.discardedBytes > context.discardLimit ? .NO : .YES
            }
            if context.body.count + size > limit {
                // A chunked upload (or one beyond its Content-Length check)
                // grew past the limit. MHD only lets us answer once the request
                // is complete, so drop the rest and answer 413 then.
                context.earlyAnswer = Self.bodyTooLarge(limit: limit)
                context.discardedBytes = context.body.count + size
                context.discardLimit = limit.addingClamped(Self.discardAllowance)
                context.body = []
                return .YES
            }
            context.body.append(contentsOf: UnsafeRawBufferPointer(start: upload, count: size))
            return .YES
        }

        // The whole request is in.
        if let early = context.earlyAnswer {
            return queue(early, on: connection, for: context)
        }
        if let response = state.withLock({ _ in context.pendingResponse.take() }) {
            // Resumed: the handler has answered.
            return queue(response, on: connection, for: context)
        }
        return startHandler(connection: connection, context: context)
    }

    /// Gives an answer decided from the headers. Queued at once (MHD then sends no "100 Continue",
    /// skips the body and closes the connection) when the client waits for "100 Continue", sends
    /// no body, or declared a body more than the allowance (8 MiB) over the size limit; else once
    /// the body the client is already sending (Python's http.client does, say) has been read and
    /// dropped: closing under its upload would give it a broken pipe, not the answer. `over`: how
    /// far the declared body passes the limit.
    private func answerEarly(_ response: HTTPResponse, declared: UInt64?, over: UInt64,
                             on connection: OpaquePointer, for context: RequestContext) -> MHD_Result {
        let waits = context.headers["expect"]?.lowercased().contains("100-continue") == true
        // (`framingProblem` left no transfer coding but `chunked`.)
        let sending = (declared ?? 0) > 0 || context.headers["transfer-encoding"] != nil
        if waits || !sending || over > UInt64(Self.discardAllowance) {
            return queue(response, on: connection, for: context)
        }
        context.earlyAnswer = response
        // A declared body is dropped whole; a chunked one as far as the allowance past the limit.
        context.discardLimit = declared.map { Int(clamping: $0) } ?? configuration.maxBodyBytes.addingClamped(Self.discardAllowance)
        return .YES
    }

    /// Suspends the connection and calls the handler; its responder hands the
    /// answer back in `deliver` (at once, or later from another thread) and
    /// resumes the connection, after which MHD calls `handle` again and the
    /// answer is queued.
    private func startHandler(connection: OpaquePointer, context: RequestContext) -> MHD_Result {
        let request = makeRequest(context: context)
        context.body = []
        let suspended = state.withLock { state -> Bool in
            guard state.phase == .running || state.phase == .draining else { return false }
            context.connection = connection
            state.awaitingHandler[ObjectIdentifier(context)] = context
            // Under the lock, so `shutdown` sees every suspended connection.
            MHD_suspend_connection(connection)
            return true
        }
        guard suspended else {
            return queue(Self.shuttingDown, on: connection, for: context)
        }
        // Suspended first: the handler may answer from another thread before it returns.
        handler(request, HTTPResponder(core: self, context: context))
        return .YES
    }

    /// Called through a request's responder (any thread) with its answer; the first answer counts.
    func deliver(_ response: HTTPResponse, to context: RequestContext) {
        state.withLock { state in
            // Absent when `shutdown` already answered this request with a 503:
            // the connection may be gone, so it must not be touched.
            guard state.awaitingHandler.removeValue(forKey: ObjectIdentifier(context)) != nil,
                  let connection = context.connection.take() else { return }
            context.pendingResponse = response
            // Under the lock, so the daemon cannot be stopped in between.
            MHD_resume_connection(connection)
        }
    }

    /// MHD's request-completed callback: the response was sent (or the
    /// request died). Releases the context retained in `beginRequest`.
    func endRequest(connection: OpaquePointer?, contextSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>,
                    termination: MHD_RequestTerminationCode) {
        guard let pointer = contextSlot.pointee else { return }
        contextSlot.pointee = nil
        let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue()
        if let accessLog = configuration.accessLog {
            var status = context.queuedStatus ?? 0
            if status == 0, let connection {
                status = Int(cmhd_connection_http_status(connection))
            }
            accessLog(context.accessLogLine(status: status, termination: termination))
        }
        state.withLock { $0.openRequests -= 1 }
    }

    /// MHD's external logger.
    func log(_ message: String) {
        let forward = startupLog.withLock { lines -> Bool in
            guard lines != nil else { return true }
            lines!.append(message)
            return false
        }
        if forward { configuration.errorLog?(message) }
    }

    // MARK: - Start and shutdown, called by HTTPServer

    /// Ends start-up log collection and returns what MHD logged meanwhile.
    func finishStartup() -> [String] {
        startupLog.withLock { lines in
            defer { lines = nil }
            return lines ?? []
        }
    }

    /// Moves from running to draining; false if a shutdown already began.
    func beginDrain() -> Bool {
        state.withLock { state in
            guard state.phase == .running else { return false }
            state.phase = .draining
            return true
        }
    }

    /// Waits until no request is open or `deadline` passes; true if none is open.
    func waitForOpenRequests(until deadline: ContinuousClock.Instant) -> Bool {
        // Polling is plenty for a once-per-process event and keeps the handler
        // path free of condition-variable signalling.
        while true {
            if state.withLock({ $0.openRequests }) == 0 { return true }
            if ContinuousClock.now >= deadline { return false }
            Self.nap()
        }
    }

    /// After the drain: answer every request still waiting for its handler
    /// with 503 and resume it (MHD aborts if a connection is still suspended
    /// at stop), and start no handler from now on. Returns how many there were.
    func abandonWaitingRequests() -> Int {
        state.withLock { state in
            state.phase = .stopping
            let abandoned = state.awaitingHandler.values
            for context in abandoned {
                guard let connection = context.connection.take() else { continue }
                context.pendingResponse = Self.shuttingDown
                MHD_resume_connection(connection)
            }
            state.awaitingHandler.removeAll()
            return abandoned.count
        }
    }

    func markStopped() {
        state.withLock { $0.phase = .stopped }
    }

    /// For a second, concurrent `shutdown` call: wait for the first to finish.
    func waitUntilStopped() {
        while state.withLock({ $0.phase }) != .stopped { Self.nap() }
    }

    var isDraining: Bool {
        state.withLock { $0.phase != .running }
    }

    // MARK: - Helpers

    private static func nap() {
        var pause = timespec(tv_sec: 0, tv_nsec: 2_000_000)
        _ = nanosleep(&pause, nil)
    }

    static func bodyTooLarge(limit: Int) -> HTTPResponse {
        .error(413, code: "body_too_large", message: "request body exceeds \(limit) bytes")
    }

    static let shuttingDown = HTTPResponse.error(
        503, code: "shutting_down", message: "the server is shutting down")

    /// Queues `response` on the connection (copying the body into MHD).
    private func queue(_ response: HTTPResponse, on connection: OpaquePointer,
                       for context: RequestContext) -> MHD_Result {
        let status = (200...599).contains(response.status) ? response.status : 500
        let created: OpaquePointer? = response.body.withUnsafeBytes { bytes in
            bytes.isEmpty
                ? MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)
                : MHD_create_response_from_buffer(
                    bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress!), .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse = created else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }  // the queue keeps its own reference

        for (name, value) in response.headers {
            let lowered = name.lowercased()
            if lowered == "content-length" || lowered == "transfer-encoding" { continue }
            if MHD_add_response_header(mhdResponse, name, value) == .NO {
                configuration.errorLog?("dropped invalid response header \(Self.quoted(name))")
            }
        }
        if isDraining {
            // Tell keep-alive clients not to reuse a connection that is about to go.
            _ = MHD_add_response_header(mhdResponse, "Connection", "close")
        }
        context.queuedStatus = status
        return MHD_queue_response(connection, UInt32(status), mhdResponse)
    }

    private static func quoted(_ text: String) -> String {
        "\"" + String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }.map(Character.init)) + "\""
    }

    /// A request whose body length is ambiguous (RFC 9112 §6.3): two `Content-Length` headers, or
    /// one with `Transfer-Encoding` (libmicrohttpd would read the first and take the rest for the
    /// next request on the connection); or a transfer coding other than exactly `chunked` (in any
    /// case, as libmicrohttpd compares it), whose body libmicrohttpd cannot frame (it would wait for
    /// a body it never reads).
    /// An HTTP/1.0 request with `Transfer-Encoding` is faulty framing too (RFC 9112 §6.1).
    private static func framingProblem(_ headers: [String: String], isHTTP10: Bool) -> String? {
        let coding = headers["transfer-encoding"]
        if let coding {
            if isHTTP10 { return "an HTTP/1.0 request cannot use Transfer-Encoding; send the body with Content-Length" }
            if coding.lowercased() != "chunked" {
                return "Transfer-Encoding \(quoted(coding)) is not supported; send the body with Content-Length or Transfer-Encoding: chunked"
            }
        }
        guard let length = headers["content-length"] else { return nil }
        if length.contains(",") { return "the request has more than one Content-Length header; send exactly one" }
        if coding != nil { return "the request has both Content-Length and Transfer-Encoding; send one of them" }
        return nil
    }

    /// Every header of the request: names lowercased, the values of a repeated name joined by ", ".
    private static func headers(of connection: OpaquePointer) -> [String: String] {
        var headers: [String: String] = [:]
        withUnsafeMutablePointer(to: &headers) { pointer in
            _ = MHD_get_connection_values_n(connection, .HEADER_KIND, MHDCallbacks.collectHeader, UnsafeMutableRawPointer(pointer))
        }
        return headers
    }

    /// The declared Content-Length, if any (MHD has already rejected malformed ones, and
    /// `framingProblem` a repeated one).
    private static func contentLength(_ headers: [String: String]) -> UInt64? {
        headers["content-length"].flatMap { UInt64(String(decoding: HTTPRequest.trimmingSpacesAndTabs($0.utf8), as: UTF8.self)) }
    }

    private func makeRequest(context: RequestContext) -> HTTPRequest {
        let (query, repeated) = context.target.queryArguments()
        return HTTPRequest(
            method: context.method ?? "GET",
            path: context.target.path,
            rawPath: context.target.rawPath,
            query: query,
            repeatedQueryNames: repeated,
            rawQuery: context.target.rawQuery,
            headers: context.headers,
            body: context.body)
    }
}

extension Optional {
    /// Returns the value and leaves nil behind.
    fileprivate mutating func take() -> Wrapped? {
        defer { self = nil }
        return self
    }
}

fileprivate extension Int {
    /// Addition that stops at `Int.max`.
    func addingClamped(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }
}
