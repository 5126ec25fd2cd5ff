import LedgerCodec

/// Strict percent-decoding of one path segment: `%XY` must be two hex digits and the result
/// valid UTF-8; `+` is a plus (only query strings read it as a space).
enum PercentDecoding {
    static func segment(_ bytes: Substring.UTF8View.SubSequence) throws(APIError) -> String {
        try segment(Array(bytes))
    }

    static func segment(_ bytes: [UInt8]) throws(APIError) -> String {
        guard bytes.contains(UInt8(ascii: "%")) else {
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw APIError.invalidPath("a path segment is not valid UTF-8")
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
                    throw APIError.invalidPath("the path has a \"%\" that is not followed by two hex digits")
                }
                decoded.append(high << 4 | low)
                i += 3
            } else {
                decoded.append(byte)
                i += 1
            }
        }
        guard let text = String(validating: decoded, as: UTF8.self) else {
            throw APIError.invalidPath("a percent-encoded path segment is not valid UTF-8")
        }
        return text
    }
}
