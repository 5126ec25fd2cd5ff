/// Writes compact JSON with object keys sorted by their UTF-8 bytes: the canonical form of
/// every value in the event log. Non-ASCII text is written as UTF-8, not escaped.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: append("null")
        case .bool(let b): append(b ? "true" : "false")
        case .int(let i): append(String(i))
        case .double(let d): writeDouble(d)
        case .string(let s): writeString(s)
        case .array(let a):
            bytes.append(UInt8(ascii: "["))
            for (n, element) in a.enumerated() {
                if n > 0 { bytes.append(UInt8(ascii: ",")) }
                write(element)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let o):
            bytes.append(UInt8(ascii: "{"))
            // Members are kept in canonical order (see JSONObject).
            var first = true
            for member in o.members {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                writeString(member.key)
                bytes.append(UInt8(ascii: ":"))
                write(member.value)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// Appends pre-encoded JSON bytes as they are (used for values already in canonical form).
    public mutating func appendRaw(_ raw: some Sequence<UInt8>) { bytes.append(contentsOf: raw) }
    public mutating func append(_ text: String) { bytes.append(contentsOf: text.utf8) }

    private mutating func writeDouble(_ d: Double) {
        if d.rounded() == d, abs(d) < 9.0e15 {
            append(String(Int64(d)))
        } else {
            append("\(d)")
        }
    }

    public mutating func writeString(_ s: String) {
        var s = s
        s.withUTF8 { writeString(utf8: $0) }
    }

    /// Writes UTF-8 text as a JSON string: escaped where JSON requires it, the rest as it is.
    public mutating func writeString(utf8 text: UnsafeBufferPointer<UInt8>) {
        bytes.append(0x22)
        // Fast path: nothing to escape (the usual case) is copied in one go.
        guard text.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) else {
            bytes.append(contentsOf: text)
            bytes.append(0x22)
            return
        }
        for b in text {
            switch b {
            case 0x22: bytes.append(0x5C); bytes.append(0x22)
            case 0x5C: bytes.append(0x5C); bytes.append(0x5C)
            case 0x0A: bytes.append(0x5C); bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(0x5C); bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(0x5C); bytes.append(UInt8(ascii: "t"))
            case 0x08: bytes.append(0x5C); bytes.append(UInt8(ascii: "b"))
            case 0x0C: bytes.append(0x5C); bytes.append(UInt8(ascii: "f"))
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(b >> 4)], hex[Int(b & 0xF)]])
            default: bytes.append(b)
            }
        }
        bytes.append(0x22)
    }
}
