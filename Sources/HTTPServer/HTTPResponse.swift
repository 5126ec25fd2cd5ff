import LedgerCodec

/// What a handler answers. The server adds `Content-Length` itself.
public struct HTTPResponse: Sendable {
    /// The status code; values outside 200...599 are sent as 500.
    public var status: Int
    /// Response headers in the order given, e.g. `("Content-Type", "application/json")`.
    /// `Content-Length` and `Transfer-Encoding` are managed by the server and ignored here.
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A response with `Content-Type: application/json`.
    public static func json(_ status: Int, _ body: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: body)
    }

    /// The server's own error answers: `{"error":{"code":"...","message":"..."}}`.
    static func error(_ status: Int, code: String, message: String) -> HTTPResponse {
        json(status, JSONValue.object(["error": ["code": .string(code), "message": .string(message)]]).bytes)
    }
}
