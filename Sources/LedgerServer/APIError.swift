import HTTPServer
import LedgerCodec
import LedgerStore
import ReferralLedger

/// An error answer of the HTTP API: `{"error": {"code", "message"}}` with its status (SPEC §10).
struct APIError: Error, Sendable {
    var status: Int
    var code: String
    var message: String
    var headers: [(String, String)] = []

    var response: HTTPResponse {
        let body: JSONValue = ["error": ["code": .string(code), "message": .string(message)]]
        var response = HTTPResponse.json(status, body.bytes)
        response.headers += headers
        return response
    }

    // 400
    static func invalidCommand(_ message: String) -> APIError { APIError(status: 400, code: "invalid_command", message: message) }
    static func invalidQuery(_ message: String) -> APIError { APIError(status: 400, code: "invalid_query", message: message) }
    static func invalidPath(_ message: String) -> APIError { APIError(status: 400, code: "invalid_path", message: message) }
    // 401
    static func unauthorized(_ message: String) -> APIError {
        APIError(status: 401, code: "unauthorized", message: message, headers: [("WWW-Authenticate", "Bearer")])
    }
    static func webhookUnauthorized(_ app: String) -> APIError {
        // The same answer whether the app is unknown, has no webhook secret, or the header differs.
        APIError(status: 401, code: "unauthorized",
                 message: "the Authorization header does not match the revenuecat_webhook_auth setting of app \"\(app)\"")
    }
    // 403
    static func forbidden(_ message: String) -> APIError { APIError(status: 403, code: "forbidden", message: message) }
    // 404
    static func unknownRoute(_ method: String, _ path: String) -> APIError {
        APIError(status: 404, code: "not_found", message: "there is no route \(method) \(path.prefix(200)); see SPEC §10 for the routes")
    }
    // 405
    static func methodNotAllowed(_ method: String, allowed: String) -> APIError {
        APIError(status: 405, code: "method_not_allowed", message: "this route answers \(allowed), not \(method.prefix(20))",
                 headers: [("Allow", allowed)])
    }
    // 500, 503
    static func internalError(_ message: String) -> APIError { APIError(status: 500, code: "internal_error", message: message) }
    static func shuttingDown() -> APIError {
        APIError(status: 503, code: "shutting_down", message: "the server is shutting down; retry shortly", headers: [("Retry-After", "1")])
    }

    static func replaysBusy(_ waiting: Int) -> APIError {
        APIError(status: 503, code: "replays_busy",
                 message: "\(waiting) as_of queries are already replaying the log or waiting to; retry later (each replays the log up to its position, one at a time)",
                 headers: [("Retry-After", "5")])
    }

    /// LMDB could not read or write (a full disk, an I/O error): 503 `storage_error`, the same
    /// code the CLI gives, with LMDB's message of what to do. Nothing of the request was recorded;
    /// the client may retry it as it is once the operator has made room.
    static func storage(_ error: LMDBError) -> APIError {
        APIError(status: 503, code: "storage_error", message: "the ledger's storage failed: \(error.message)", headers: [("Retry-After", "5")])
    }

    /// A ledger failure while deciding (not a rejection: the command was not decided).
    static func ledger(_ error: Error) -> APIError {
        if let e = error as? LedgerError, e.code == "shutting_down" { return shuttingDown() }
        if let e = error as? LMDBError { return storage(e) }
        return internalError("the ledger could not decide the command: \(error)")
    }

    /// A query's own error: 404 for unknown entities, 400 for bad arguments.
    static func query(_ error: QueryError) -> APIError {
        APIError(status: error.status, code: error.code, message: error.message)
    }
}
