import CMicroHTTPD

/// Per-request state. Created in MHD's URI-log callback (as soon as the
/// request line is parsed), stored as a retained pointer in MHD's per-request
/// `req_cls` slot, and released exactly once in the request-completed callback.
///
/// Thread discipline (hence `@unchecked Sendable`):
/// - the fields marked *MHD thread* are only touched from the MHD worker
///   thread that owns the connection (MHD never processes one connection on
///   two threads at once);
/// - `connection` and `pendingResponse` cross between that thread and the
///   handler task and are only touched while holding `ServerCore.state`.
final class RequestContext: @unchecked Sendable {
    let target: RequestTarget
    let started = ContinuousClock.now

    // MHD thread.
    var method: String?
    var sawHeaders = false
    /// The request's headers (names lowercased, repeats joined by ", "), read once when they are in.
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    /// An answer decided before the body is in (401, 403, 413 from the headers; 413 once a body
    /// grew past the limit): the rest of the upload is read and dropped, then it is given.
    var earlyAnswer: HTTPResponse?
    var discardedBytes = 0
    /// How many body bytes may be dropped before the connection is simply closed.
    var discardLimit = ServerCore.discardAllowance
    /// Status of the response this server queued (nil if MHD answered by itself).
    var queuedStatus: Int?

    // Guarded by ServerCore.state.
    /// The suspended connection while the handler runs.
    var connection: OpaquePointer?
    /// The handler's answer, waiting for the resumed connection to pick it up.
    var pendingResponse: HTTPResponse?

    init(target: RequestTarget) {
        self.target = target
    }

    /// The access-log line: method, raw path (no query: it may carry secrets),
    /// status and duration. Headers and bodies never appear.
    func accessLogLine(status: Int, termination: MHD_RequestTerminationCode) -> String {
        let elapsed = started.duration(to: .now).components
        let micros = elapsed.seconds * 1_000_000 + elapsed.attoseconds / 1_000_000_000_000
        let tenthsOfMillis = (micros + 50) / 100
        var line = Self.printable(method ?? "-") + " " + Self.printable(target.rawPath) + " "
        line += status > 0 ? String(status) : "-"
        line += " \(tenthsOfMillis / 10).\(tenthsOfMillis % 10)ms"
        switch termination {
        case .REQUEST_TERMINATED_COMPLETED_OK: break
        case .REQUEST_TERMINATED_TIMEOUT_REACHED: line += " (timed out)"
        case .REQUEST_TERMINATED_CLIENT_ABORT: line += " (client closed)"
        case .REQUEST_TERMINATED_DAEMON_SHUTDOWN: line += " (server stopped)"
        case .REQUEST_TERMINATED_READ_ERROR: line += " (read error)"
        case .REQUEST_TERMINATED_WITH_ERROR: line += " (aborted)"
        }
        return line
    }

    /// Escapes control characters and spaces so one request is always one
    /// well-formed log line, whatever the client sent.
    private static func printable(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            if scalar.value <= 0x20 || scalar.value == 0x7F {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                result += hex.count == 1 ? "%0" + hex : "%" + hex
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
