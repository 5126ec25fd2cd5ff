/// One HTTP request as the server hands it to the application handler.
///
/// The body has been fully received (and is at most `maxBodyBytes` long)
/// by the time a handler sees the request.
public struct HTTPRequest: Sendable {
    /// The request method as sent, e.g. `"GET"` or `"POST"`.
    public var method: String
    /// The percent-decoded path without the query, e.g. `"/v1/apps/a b/rewards"`.
    public var path: String
    /// The path as sent (still percent-encoded), without the query.
    public var rawPath: String
    /// Decoded query arguments; `+` reads as a space and the first value of a
    /// repeated name wins. A name without `=` maps to `""`.
    public var query: [String: String]
    /// Query argument names that came more than once (only the first value is in `query`).
    public var repeatedQueryNames: Set<String>
    /// The query as sent (still percent-encoded), without the `?`; nil when there was none. For
    /// applications that read it more strictly than `query` does.
    public var rawQuery: String?
    /// Request headers keyed by lowercased name. Repeated headers are joined
    /// with `", "` in the order they were sent.
    public var headers: [String: String]
    /// The request body (empty when none was sent).
    public var body: [UInt8]

    public init(
        method: String,
        path: String,
        rawPath: String,
        query: [String: String] = [:],
        repeatedQueryNames: Set<String> = [],
        rawQuery: String? = nil,
        headers: [String: String] = [:],
        body: [UInt8] = []
    ) {
        self.method = method
        self.path = path
        self.rawPath = rawPath
        self.query = query
        self.repeatedQueryNames = repeatedQueryNames
        self.rawQuery = rawQuery
        self.headers = headers
        self.body = body
    }

    /// The value of the header called `name`, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers[name.lowercased()]
    }

    /// The field value of the header called `name`: its bytes without the spaces and tabs around
    /// them, which are not part of it (RFC 9110 §5.5). Spaces inside stay.
    public func fieldValue(_ name: String) -> [UInt8]? {
        header(name).map { Self.trimmingSpacesAndTabs($0.utf8) }
    }

    /// `bytes` without leading and trailing spaces and tabs.
    public static func trimmingSpacesAndTabs(_ bytes: some BidirectionalCollection<UInt8>) -> [UInt8] {
        let isSpace = { (b: UInt8) in b == UInt8(ascii: " ") || b == UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) }) else { return [] }
        return Array(bytes[first...last])
    }
}
