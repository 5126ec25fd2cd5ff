import LedgerCodec

/// Strict percent-decoding of one path segment or query component: `%XY` must be two hex digits
/// and the result valid UTF-8; `+` is a plus in a path and a space in a query (form encoding).
enum PercentDecoding {
    static func segment(_ bytes: Substring.UTF8View.SubSequence) throws(APIError) -> String {
        try segment(Array(bytes))
    }

    static func segment(_ bytes: [UInt8]) throws(APIError) -> String {
        try decode(bytes, plusAsSpace: false, APIError.invalidPath, "path")
    }

    /// A query argument's name or value.
    static func queryComponent(_ bytes: [UInt8]) throws(APIError) -> String {
        try decode(bytes, plusAsSpace: true, APIError.invalidQuery, "query")
    }

    private static func decode(_ bytes: [UInt8], plusAsSpace: Bool, _ problem: (String) -> APIError, _ part: String) throws(APIError) -> String {
        guard bytes.contains(UInt8(ascii: "%")) || (plusAsSpace && bytes.contains(UInt8(ascii: "+"))) else {
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw problem("a \(part) component is not valid UTF-8")
            }
            return text
        }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            let byte = bytes[i]
            if byte == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let high = Hex.value(ofDigit: bytes[i + 1]), let low = Hex.value(ofDigit: bytes[i + 2]) else {
                    throw problem("the \(part) has a \"%\" that is not followed by two hex digits")
                }
                decoded.append(high << 4 | low)
                i += 3
            } else if plusAsSpace, byte == UInt8(ascii: "+") {
                decoded.append(UInt8(ascii: " "))
                i += 1
            } else {
                decoded.append(byte)
                i += 1
            }
        }
        guard let text = String(validating: decoded, as: UTF8.self) else {
            throw problem("a percent-encoded \(part) component is not valid UTF-8")
        }
        return text
    }
}
