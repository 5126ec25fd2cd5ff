/// Why a text is not JSON, and where.
public struct JSONParseError: CodedError, Sendable {
    public let offset: Int
    public let reason: String
    /// `invalid_json`.
    public var errorCode: String { "invalid_json" }
    public var message: String { "invalid JSON at byte \(offset): \(reason)" }
}

/// A strict RFC 8259 parser: one value, optional surrounding white space, no duplicate keys,
/// nesting at most 256 deep.
///
/// While parsing it also notes whether the text is in the canonical form `JSONWriter` writes
/// (compact, keys sorted by UTF-8 bytes, only the writer's escapes), so the verifier checks the
/// form of every stored value without writing it again.
public struct JSONParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    /// Members of the objects being parsed, innermost last: one buffer for all levels, so an
    /// object's array is made once at its final size, its members moved into it.
    private var members = MemberStack()
    /// Where each member's key starts, for error messages.
    private var memberOffsets: [Int] = []
    /// Cleared by anything `JSONWriter` would write differently.
    private var canonical = true
    /// Cleared by numbers that are not plain integers: their canonical text is not decided here.
    private var formDecided = true
    /// A member left out of the value: its key, and the depth of the objects it is left out of
    /// (1: the outermost). Its value is skipped over, not checked.
    private var omitted: (key: String, depth: Int)?

    private init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        memberOffsets.reserveCapacity(MemberStack.initialCapacity)
    }

    public static func parse(_ input: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        try parseNotingForm(input).value
    }

    /// Parses `input` and tells whether it is byte for byte what `JSONWriter` writes for the
    /// value: `true` or `false`, or `nil` when it holds a number that is not a plain integer
    /// (then only writing the value again can tell).
    public static func parseNotingForm(_ input: some Collection<UInt8>) throws(JSONParseError) -> (value: JSONValue, canonical: Bool?) {
        let result: Result<(JSONValue, Bool?), JSONParseError>? = input.withContiguousStorageIfAvailable { buffer in
            Self.parseBuffer(buffer)
        }
        if let result { return try result.get() }
        let copy = Array(input)
        return try copy.withUnsafeBufferPointer { Self.parseBuffer($0) }.get()
    }

    /// Parses `input` leaving out every member `key` of the objects `depth` levels deep (1: the
    /// outermost object), whose values are skipped over without being checked or made: for readers
    /// that never look at a large member. The value answered is not the whole text's.
    public static func parse(_ input: some Collection<UInt8>, omitting key: String, atDepth depth: Int) throws(JSONParseError) -> JSONValue {
        let omitted = (key: key, depth: depth)
        let result: Result<(JSONValue, Bool?), JSONParseError>? = input.withContiguousStorageIfAvailable { buffer in
            Self.parseBuffer(buffer, omitting: omitted)
        }
        if let result { return try result.get().0 }
        let copy = Array(input)
        return try copy.withUnsafeBufferPointer { Self.parseBuffer($0, omitting: omitted) }.get().0
    }

    private static func parseBuffer(_ buffer: UnsafeBufferPointer<UInt8>, omitting omitted: (key: String, depth: Int)? = nil) -> Result<(JSONValue, Bool?), JSONParseError> {
        var parser = JSONParser(buffer)
        defer { parser.members.release() }
        parser.omitted = omitted
        do {
            parser.skipWhitespace()
            let value = try parser.parseValue()
            parser.skipWhitespace()
            if parser.index != buffer.count { throw parser.error("unexpected data after the value") }
            return .success((value, parser.canonical ? (parser.formDecided ? true : nil) : false))
        } catch let e as JSONParseError {
            return .failure(e)
        } catch {
            return .failure(JSONParseError(offset: 0, reason: "\(error)"))
        }
    }

    private func error(_ reason: String) -> JSONParseError { JSONParseError(offset: index, reason: reason) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1; canonical = false
            default: return
            }
        }
    }

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        case 0xEF where index == 0 && bytes.count >= 3 && bytes[1] == 0xBB && bytes[2] == 0xBF:
            throw error("the text starts with a UTF-8 byte order mark (EF BB BF); send the JSON without it")
        default: throw error("unexpected character")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("unexpected end of input") }
        let p = literal.utf8Start
        for i in 0..<count where bytes[index + i] != p[i] { throw error("invalid literal") }
        index += count
    }

    private mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > 256 { throw error("nesting too deep") }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1; depth -= 1
            return .object(JSONObject())
        }
        let first = members.count
        var inOrder = true
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let keyOffset = index
            let key = try parseString()
            // The writer sorts keys by their UTF-8 bytes.
            if members.count > first, !JSONObject.precedes(members.lastKey, key) { inOrder = false }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            if let omitted, omitted.depth == depth, omitted.key == key {
                try skipValue()
            } else {
                let value = try parseValue()
                members.append(JSONObject.Member(key: consume key, value: consume value))
                memberOffsets.append(keyOffset)
            }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; break }
            throw error("expected ',' or '}'")
        }
        var object = members.take(from: first)
        if !inOrder {
            canonical = false
            var order = Array(object.indices)
            // Keys are compared by their bytes: Swift's `==` would call two spellings of one
            // canonical text (`e` + U+0301, U+00E9) a duplicate.
            func same(_ a: Int, _ b: Int) -> Bool { object[a].key.utf8.elementsEqual(object[b].key.utf8) }
            order.sort { JSONObject.precedes(object[$0].key, object[$1].key) || (same($0, $1) && $0 < $1) }
            for n in order.indices.dropFirst() where same(order[n], order[n - 1]) {
                throw JSONParseError(offset: memberOffsets[first + order[n]], reason: "duplicate key \"\(object[order[n]].key)\"")
            }
            object = order.map { object[$0] }
        }
        memberOffsets.removeLast(memberOffsets.count - first)
        depth -= 1
        return .object(JSONObject(sortedUniqueMembers: object))
    }

    /// Moves past one value without making it: strings to their closing quote (escapes
    /// included), arrays and objects to their closing bracket, anything else to the next `,`, `}`,
    /// `]` or white space.
    private mutating func skipValue() throws(JSONParseError) {
        var nesting = 0
        repeat {
            guard index < bytes.count else { throw error("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: "\""):
                index += 1
                while true {
                    guard index < bytes.count else { throw error("unterminated string") }
                    let b = bytes[index]
                    index += b == UInt8(ascii: "\\") ? 2 : 1
                    if b == UInt8(ascii: "\"") { break }
                }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                nesting += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                guard nesting > 0 else { throw error("unexpected character") }
                nesting -= 1
                index += 1
            default:
                if nesting == 0 {
                    // A scalar: up to what ends it.
                    let start = index
                    while index < bytes.count, ![UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x0A, 0x0D, 0x09].contains(bytes[index]) { index += 1 }
                    if index == start { throw error("unexpected character") }
                } else {
                    index += 1
                }
            }
        } while nesting > 0
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        index += 1
        var array: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1; depth -= 1
            return .array(array)
        }
        while true {
            skipWhitespace()
            array.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; break }
            throw error("expected ',' or ']'")
        }
        depth -= 1
        return .array(array)
    }

    private mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes. (`high` tells whether the text is all ASCII.)
        var high: UInt8 = 0
        while index < bytes.count {
            let b = bytes[index]
            high |= b
            if b == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                return try validatedString(slice, at: start, allASCII: high < 0x80)
            }
            if b == UInt8(ascii: "\\") { break }
            if b < 0x20 { throw error("control character in string") }
            index += 1
        }
        var out = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                index += 1
                return try out.withUnsafeBufferPointer { buffer throws(JSONParseError) in try validatedString(buffer, at: start) }
            }
            if b < 0x20 { throw error("control character in string") }
            if b != UInt8(ascii: "\\") { out.append(b); index += 1; continue }
            index += 1
            guard index < bytes.count else { break }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F); canonical = false
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                // The writer escapes with \u only control characters without a short escape, in lowercase hex.
                if canonical {
                    let digits = UnsafeBufferPointer(rebasing: bytes[index..<min(index + 4, bytes.count)])
                    if digits.contains(where: { (UInt8(ascii: "A")...UInt8(ascii: "F")).contains($0) }) { canonical = false }
                }
                var scalar = try parseHex4()
                if scalar >= 0x20 || [0x08, 0x09, 0x0A, 0x0C, 0x0D].contains(scalar) { canonical = false }
                if (0xD800...0xDBFF).contains(scalar) {
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw error("unpaired surrogate")
                    }
                    index += 2
                    let low = try parseHex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw error("unpaired surrogate")
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid escape") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default:
                throw error("invalid escape")
            }
        }
        throw error("unterminated string")
    }

    private func validatedString(_ buffer: UnsafeBufferPointer<UInt8>, at offset: Int, allASCII: Bool? = nil) throws(JSONParseError) -> String {
        // `String(decoding:as:)` is the stdlib's specialised fast path; it repairs bad UTF-8 rather
        // than refusing it, so text that is not all ASCII is checked against the bytes it came from.
        let s = String(decoding: buffer, as: UTF8.self)
        let ascii = allASCII ?? buffer.allSatisfy { $0 < 0x80 }
        if !ascii, !s.utf8.elementsEqual(buffer) {
            throw JSONParseError(offset: offset, reason: "string is not valid UTF-8")
        }
        return s
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("truncated \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            guard let d = Hex.value(ofDigit: bytes[index]) else { throw error("invalid \\u escape") }
            v = v << 4 | UInt32(d)
            index += 1
        }
        return v
    }

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        } else {
            throw error("invalid number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digits = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            if index == digits { throw error("invalid number") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let digits = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            if index == digits { throw error("invalid number") }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let i = Int64(text) {
            if i == 0 && index - start != 1 { canonical = false }  // "-0"
            return .int(i)
        }
        formDecided = false
        guard let d = Double(text), d.isFinite else { throw JSONParseError(offset: start, reason: "number out of range") }
        return .double(d)
    }
}

/// The parser's stack of members: storage of its own, so that the members of a finished object
/// move into the object's array (no copy, no reference counting) and leave the stack by a count.
/// Released by its owner (`JSONParser.parseBuffer`), members left in it too.
private struct MemberStack {
    static let initialCapacity = 32
    private var base = UnsafeMutablePointer<JSONObject.Member>.allocate(capacity: initialCapacity)
    private var capacity = initialCapacity
    private(set) var count = 0

    @inline(__always)
    mutating func append(_ member: consuming JSONObject.Member) {
        if count == capacity { grow() }
        (base + count).initialize(to: member)
        count += 1
    }

    private mutating func grow() {
        let grown = UnsafeMutablePointer<JSONObject.Member>.allocate(capacity: capacity * 2)
        grown.moveInitialize(from: base, count: count)
        base.deallocate()
        base = grown
        capacity *= 2
    }

    /// The key of the last member (there is one).
    var lastKey: String { base[count - 1].key }

    /// The members from `first` on, moved out in order.
    mutating func take(from first: Int) -> [JSONObject.Member] {
        let n = count - first
        let source = base + first
        let taken = [JSONObject.Member](unsafeUninitializedCapacity: n) { buffer, initialized in
            buffer.baseAddress?.moveInitialize(from: source, count: n)
            initialized = n
        }
        count = first
        return taken
    }

    func release() {
        base.deinitialize(count: count)
        base.deallocate()
    }
}
