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
        json(status, Array(#"{"error":{"code":"\#(jsonEscaped(code))","message":"\#(jsonEscaped(message))"}}"#.utf8))
    }

    /// `text` as the inside of a JSON string: quotes, backslashes and control characters escaped.
    static func jsonEscaped(_ text: String) -> String {
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"", "\\": escaped += "\\" + String(scalar)
            case "\n": escaped += "\\n"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                escaped += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }
}
