import LedgerCodec

/// Reads the fields of a JSON object strictly: wrong types, missing fields and (at `finish`)
/// unknown fields are refused with `invalid_command` and a message naming the field.
public struct FieldReader {
    public let object: JSONObject
    /// `object` with each time that was read written in canonical UTC (SPEC §12: "Timestamps with
    /// an offset are converted to UTC"): what a command records and what its `id` is compared by.
    public private(set) var normalized: JSONObject
    public let context: String
    /// Whether identifiers of only white space are refused: in new commands (`Command`), not in
    /// configs and benefits read back from the log, which are read with the rules that accepted them.
    public var refusesBlankIdentifiers = false
    /// Which members were read, by their index in `object` (objects have few members).
    private var used: [Bool]

    public init(_ value: JSONValue, context: String) throws {
        guard case .object(let o) = value else {
            throw Rejection.invalid("\(context) must be a JSON object, not \(value.typeName)")
        }
        object = o
        normalized = o
        used = Array(repeating: false, count: o.count)
        self.context = context
    }

    private func name(_ key: String) -> String { "\(context).\(key)" }

    public func has(_ key: String) -> Bool { object[key] != nil }

    /// The raw value, if present (null included).
    public mutating func value(_ key: String) -> JSONValue? {
        guard let i = object.index(forKey: key) else { return nil }
        used[i] = true
        return object.members[i].value
    }

    public mutating func string(_ key: String) throws -> String {
        guard let v = value(key) else { throw Rejection.invalid("missing field \(name(key))") }
        guard case .string(let s) = v else { throw Rejection.invalid("\(name(key)) must be a string, not \(v.typeName)") }
        guard !s.isEmpty else { throw Rejection.invalid("\(name(key)) must not be empty") }
        return s
    }

    /// An identifier: 1–128 bytes of UTF-8, no control characters. (LMDB keys are built from app,
    /// program and user IDs and must stay under 511 bytes.)
    public mutating func identifier(_ key: String) throws -> String {
        let s = try string(key)
        try checkIdentifier(s, key)
        return s
    }

    /// `checkIdentifier`, and `checkNotBlank` when this reader reads a new command.
    private func checkIdentifier(_ s: String, _ key: String) throws {
        try Self.checkIdentifier(s, name(key))
        if refusesBlankIdentifiers { try Self.checkNotBlank(s, name(key)) }
    }

    /// (`label` is made only for a message: most identifiers pass.)
    static func checkIdentifier(_ s: String, _ label: @autoclosure () -> String) throws {
        guard s.utf8.count <= 128 else { throw Rejection.invalid("\(label()) is longer than 128 bytes") }
        // An ASCII text is checked byte by byte (C0 controls and DEL); any other scalar by scalar.
        var ascii = true
        for b in s.utf8 {
            if b >= 0x80 { ascii = false; break }
            if b < 0x20 || b == 0x7F { throw Rejection.invalid("\(label()) must not contain control characters") }
        }
        guard ascii || !s.unicodeScalars.contains(where: isControl) else {
            throw Rejection.invalid("\(label()) must not contain control characters")
        }
    }

    /// " " would be a user nobody can tell from "" or "  " when reading a dashboard. A check of new
    /// commands only (added after ledgers holding such IDs in configs were written).
    static func checkNotBlank(_ s: String, _ label: @autoclosure () -> String) throws {
        if let first = s.utf8.first, first.isASCIIAndNotWhiteSpace { return }  // most IDs: no property lookup
        guard s.isEmpty || !s.unicodeScalars.allSatisfy(\.properties.isWhitespace) else {
            throw Rejection.invalid("\(label()) is only white space")
        }
    }

    /// C0 and C1 controls, and the Unicode line and paragraph separators: none belongs in an ID,
    /// and each would break a line-oriented reader of the log.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
    }

    /// An identifier that may be absent or null; when given, it is held to `identifier`'s rules
    /// (an empty one is refused, not read as "none").
    public mutating func optionalIdentifier(_ key: String) throws -> String? {
        guard let s = try optionalString(key) else { return nil }
        guard !s.isEmpty else { throw Rejection.invalid("\(name(key)) must not be empty (leave it out, or null, when there is none)") }
        try checkIdentifier(s, key)
        return s
    }

    public mutating func optionalString(_ key: String) throws -> String? {
        guard let v = value(key), !v.isNull else { return nil }
        guard case .string(let s) = v else { throw Rejection.invalid("\(name(key)) must be a string or null, not \(v.typeName)") }
        return s
    }

    /// The largest whole number a command may carry unless a field says otherwise: large enough for
    /// any real program, small enough that no sum or product of them can overflow.
    public static let maximum: Int64 = 1_000_000_000

    public mutating func int(_ key: String, min: Int64? = nil, max: Int64 = FieldReader.maximum) throws -> Int64 {
        guard let v = value(key) else { throw Rejection.invalid("missing field \(name(key))") }
        return try Self.integer(v, name(key), min: min, max: max)
    }

    public mutating func optionalInt(_ key: String, min: Int64? = nil, max: Int64 = FieldReader.maximum) throws -> Int64? {
        guard let v = value(key), !v.isNull else { return nil }
        return try Self.integer(v, name(key), min: min, max: max)
    }

    /// What else a time must be, said with every refusal of one (a valid RFC 3339 text can still be
    /// outside what the ledger records).
    static let timeBounds = " (in years 0000–9999 once converted to UTC; a leap second only as 23:59:60 UTC, read as 23:59:59)"

    static func integer(_ v: JSONValue, _ label: String, min: Int64?, max: Int64 = FieldReader.maximum) throws -> Int64 {
        guard case .int(let i) = v else {
            if case .double(let d) = v {
                // 1e2, 1.0 or a number past 64 bits: whole numbers are written as plain integers here,
                // and the range is said first.
                let why: String
                if d.rounded() != d { why = "a whole number, not a fraction" }
                else if let min, d < Double(min) { why = "at least \(min)" }
                else if d > Double(max) { why = "at most \(max)" }
                else if let whole = Int64(exactly: d) { why = "written as a plain integer such as \(whole), without a fraction or exponent" }
                else { why = "at least \(Int64.min)" }  // past 64 bits below, where no `min` is given
                throw Rejection.invalid("\(label) must be \(why)")
            }
            throw Rejection.invalid("\(label) must be a whole number, not \(v.typeName)")
        }
        if let min, i < min { throw Rejection.invalid("\(label) must be at least \(min)") }
        if i > max { throw Rejection.invalid("\(label) must be at most \(max)") }
        return i
    }

    public mutating func bool(_ key: String) throws -> Bool {
        guard let v = value(key) else { throw Rejection.invalid("missing field \(name(key))") }
        guard case .bool(let b) = v else { throw Rejection.invalid("\(name(key)) must be true or false, not \(v.typeName)") }
        return b
    }

    public mutating func optionalBool(_ key: String) throws -> Bool? {
        guard let v = value(key), !v.isNull else { return nil }
        guard case .bool(let b) = v else { throw Rejection.invalid("\(name(key)) must be true or false, not \(v.typeName)") }
        return b
    }

    public mutating func timestamp(_ key: String) throws -> Timestamp {
        let s = try string(key)
        guard let t = Timestamp(rfc3339: s) else {
            throw Rejection.invalid("\(name(key)) must be an RFC 3339 time such as 2026-01-15T10:00:00Z, not \"\(s)\"\(Self.timeBounds)")
        }
        normalized[key] = .string(t.description)
        return t
    }

    public mutating func optionalTimestamp(_ key: String) throws -> Timestamp? {
        guard let v = value(key), !v.isNull else { return nil }
        guard case .string(let s) = v else {
            throw Rejection.invalid("\(name(key)) must be an RFC 3339 time such as 2026-01-15T10:00:00Z, not \(v.typeName)\(Self.timeBounds)")
        }
        guard let t = Timestamp(rfc3339: s) else {
            throw Rejection.invalid("\(name(key)) must be an RFC 3339 time such as 2026-01-15T10:00:00Z, not \"\(s)\"\(Self.timeBounds)")
        }
        normalized[key] = .string(t.description)
        return t
    }

    public mutating func object(_ key: String) throws -> JSONValue {
        guard let v = value(key) else { throw Rejection.invalid("missing field \(name(key))") }
        guard case .object = v else { throw Rejection.invalid("\(name(key)) must be an object, not \(v.typeName)") }
        return v
    }

    public mutating func array(_ key: String) throws -> [JSONValue] {
        guard let v = value(key) else { throw Rejection.invalid("missing field \(name(key))") }
        guard case .array(let a) = v else { throw Rejection.invalid("\(name(key)) must be an array, not \(v.typeName)") }
        return a
    }

    public mutating func oneOf(_ key: String, _ allowed: [String]) throws -> String {
        let s = try string(key)
        guard allowed.contains(s) else {
            throw Rejection.invalid("\(name(key)) must be one of \(allowed.map { "\"\($0)\"" }.joined(separator: ", ")), not \"\(s)\"")
        }
        return s
    }

    /// Refuses any field that was not read.
    public func finish() throws {
        let unknown = object.members.indices.filter { !used[$0] }.map { object.members[$0].key }
        if !unknown.isEmpty {
            throw Rejection.invalid("unknown field\(unknown.count > 1 ? "s" : "") \(unknown.map { "\(context).\($0)" }.joined(separator: ", "))")
        }
    }
}
