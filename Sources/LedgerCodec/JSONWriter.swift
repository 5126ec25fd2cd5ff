/// Writes compact JSON with object keys sorted by their UTF-8 bytes: the canonical form of
/// every value in the event log. Non-ASCII text is written as UTF-8, not escaped.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: writeNull()
        case .bool(let b): writeBool(b)
        case .int(let i): writeInteger(i)
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

    // MARK: Member by member
    //
    // An object written straight to bytes, without making its tree: `beginObject()`, then each
    // member as `key(_:)` and its value, then `endObject()`. The keys must come in canonical order
    // (UTF-8 bytes ascending), which debug builds check; the bytes are then exactly what writing
    // the same value as a tree gives.

    public mutating func beginObject() {
        bytes.append(UInt8(ascii: "{"))
        #if DEBUG
        keys.append(nil)
        #endif
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        #if DEBUG
        keys.removeLast()
        #endif
    }

    /// Writes a member's key (and the comma before it, after the object's first member).
    public mutating func key(_ key: StaticString) {
        #if DEBUG
        let text = String(describing: key)
        if let previous = keys[keys.count - 1] {
            assert(JSONObject.precedes(previous, text), "key \(text) after \(previous): members must come in canonical order")
        }
        keys[keys.count - 1] = text
        #endif
        if bytes.last != UInt8(ascii: "{") { bytes.append(UInt8(ascii: ",")) }
        bytes.append(0x22)
        bytes.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
        bytes.append(0x22)
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func writeNull() { append("null") }
    public mutating func writeBool(_ b: Bool) { append(b ? "true" : "false") }
    /// The string, or null.
    public mutating func writeString(_ s: String?) {
        if let s { writeString(s) } else { writeNull() }
    }
    /// The integer, or null.
    public mutating func writeInteger(_ i: Int?) {
        if let i { writeInteger(Int64(i)) } else { writeNull() }
    }

    #if DEBUG
    /// The last key written at each open object (debug builds check their order).
    private var keys: [String?] = []
    #endif

    /// Appends pre-encoded JSON bytes as they are (used for values already in canonical form).
    public mutating func appendRaw(_ raw: some Sequence<UInt8>) { bytes.append(contentsOf: raw) }
    public mutating func append(_ text: String) { bytes.append(contentsOf: text.utf8) }

    /// Decimal digits, `-` first when negative (what `String(i)` spells), without making a String.
    public mutating func writeInteger(_ i: Int64) {
        if i >= 0 && i < 10 {
            bytes.append(UInt8(ascii: "0") + UInt8(i))
            return
        }
        if i < 0 { bytes.append(UInt8(ascii: "-")) }
        var v = i.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
            } while v > 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    private mutating func writeDouble(_ d: Double) {
        if d.rounded() == d, abs(d) < 9.0e15 {
            writeInteger(Int64(d))
        } else {
            append("\(d)")
        }
    }

    public mutating func writeString(_ s: String) {
        var s = s
        s.withUTF8 { writeString(utf8: $0) }
    }

    /// Writes a time as the JSON string of its canonical text (`Timestamp.description`), made on
    /// the stack.
    public mutating func writeTimestamp(_ t: Timestamp) {
        t.withText { writeString(utf8: $0) }
    }

    /// A time, or `null`.
    public mutating func writeTimestamp(_ t: Timestamp?) {
        if let t { writeTimestamp(t) } else { writeNull() }
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
