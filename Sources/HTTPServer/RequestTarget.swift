/// The request target from the request line (`/a%20b/c?x=1&y=2`), split into
/// path and query and percent-decoded.
///
/// We decode it ourselves from the raw target (libmicrohttpd's URI log
/// callback hands it over before MHD unescapes anything), so `rawPath` is
/// exactly what was sent and decoding rules are ours.
struct RequestTarget: Sendable {
    /// The path as sent, without the query.
    let rawPath: String
    /// Everything after the first `?`, as sent; nil when there was no `?`.
    let rawQuery: String?

    init(_ target: String) {
        var pathPart = Substring(target)
        var queryPart: Substring?
        if let mark = target.firstIndex(of: "?") {
            pathPart = target[..<mark]
            queryPart = target[target.index(after: mark)...]
        }
        // Absolute form ("http://host/path") is legal in a request line: keep the path only.
        if !pathPart.hasPrefix("/"), let scheme = pathPart.firstRange(of: "://") {
            let authorityAndPath = pathPart[scheme.upperBound...]
            pathPart = authorityAndPath.firstIndex(of: "/").map { authorityAndPath[$0...] } ?? "/"
        }
        rawPath = String(pathPart)
        rawQuery = queryPart.map(String.init)
    }

    /// The percent-decoded path (`+` stays a plus in paths).
    var path: String {
        Self.percentDecoded(rawPath.utf8, plusAsSpace: false)
    }

    /// Decoded query arguments, form-style (`+` is a space); the first value of
    /// a repeated name wins, a bare `name` maps to `""`, empty pieces are skipped.
    var query: [String: String] { queryArguments().arguments }

    /// The decoded query arguments and the names that came more than once.
    func queryArguments() -> (arguments: [String: String], repeated: Set<String>) {
        guard let rawQuery, !rawQuery.isEmpty else { return ([:], []) }
        var arguments: [String: String] = [:]
        var repeated: Set<String> = []
        for piece in rawQuery.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let name: Substring.UTF8View.SubSequence
            let value: Substring.UTF8View.SubSequence
            if let equals = piece.firstIndex(of: UInt8(ascii: "=")) {
                name = piece[..<equals]
                value = piece[piece.index(after: equals)...]
            } else {
                name = piece
                value = piece[piece.endIndex...]
            }
            let key = Self.percentDecoded(name, plusAsSpace: true)
            if arguments[key] == nil {
                arguments[key] = Self.percentDecoded(value, plusAsSpace: true)
            } else {
                repeated.insert(key)
            }
        }
        return (arguments, repeated)
    }

    /// Decodes `%XX` escapes (malformed escapes are kept literally) and reads
    /// the resulting bytes as UTF-8, replacing invalid sequences with U+FFFD.
    static func percentDecoded<Bytes: Collection>(_ bytes: Bytes, plusAsSpace: Bool) -> String
    where Bytes.Element == UInt8 {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                let first = bytes.index(after: index)
                if first != bytes.endIndex {
                    let second = bytes.index(after: first)
                    if second != bytes.endIndex,
                       let high = hexValue(bytes[first]), let low = hexValue(bytes[second]) {
                        decoded.append(high << 4 | low)
                        index = bytes.index(after: second)
                        continue
                    }
                }
                decoded.append(byte)
            } else if byte == UInt8(ascii: "+") && plusAsSpace {
                decoded.append(UInt8(ascii: " "))
            } else {
                decoded.append(byte)
            }
            index = bytes.index(after: index)
        }
        return String(decoding: decoded, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
