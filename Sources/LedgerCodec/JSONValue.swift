/// A JSON value, as read from commands and written into the event log.
///
/// Objects keep their members sorted by key (`JSONObject`), the order `JSONWriter` writes, so
/// the same value always gives the same bytes (the hash chain depends on it).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// An object of these members.
    public static func object(_ members: [String: JSONValue]) -> JSONValue { .object(JSONObject(members)) }
}

extension JSONValue {
    public var isNull: Bool { if case .null = self { return true } else { return false } }
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.rounded() == d && abs(d) < 9.0e15: return Int64(d)
        default: return nil
        }
    }
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }

    /// Member lookup on objects; `.null` for anything else or a missing key.
    public subscript(key: String) -> JSONValue {
        get { objectValue?[key] ?? .null }
        set {
            guard case .object(var o) = self else { return }
            o[key] = newValue
            self = .object(o)
        }
    }

    /// Element lookup on arrays; `.null` for anything else or an index out of range.
    public subscript(index: Int) -> JSONValue {
        guard case .array(let a) = self, a.indices.contains(index) else { return .null }
        return a[index]
    }

    /// Whether arrays and objects nest more than `limit` levels deep (a scalar is 0 deep, `[]` 1).
    /// Stops descending past the limit, so a value of any depth is measured in bounded stack.
    public func nests(deeperThan limit: Int) -> Bool {
        guard limit >= 0 else { return true }
        switch self {
        case .array(let a): return limit == 0 || a.contains { $0.nests(deeperThan: limit - 1) }
        case .object(let o): return limit == 0 || o.members.contains { $0.value.nests(deeperThan: limit - 1) }
        default: return false
        }
    }

    /// The name of the value's JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    /// Compact, key-sorted UTF-8 bytes.
    public var bytes: [UInt8] {
        var w = JSONWriter()
        w.write(self)
        return w.bytes
    }

    /// Compact, key-sorted text.
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    public init(parsing bytes: some Collection<UInt8>) throws(JSONParseError) {
        self = try JSONParser.parse(bytes)
    }

    public init(parsing text: String) throws(JSONParseError) {
        self = try JSONParser.parse(Array(text.utf8))
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(literal: elements))
    }
    public init(nilLiteral: ()) { self = .null }
    public init(floatLiteral value: Double) { self = .double(value) }
}

/// `["user": "friend-\(n)"]`: an interpolated string literal is a JSON string.
extension JSONValue: ExpressibleByStringInterpolation {
    public init(stringInterpolation: DefaultStringInterpolation) {
        self = .string(String(stringInterpolation: stringInterpolation))
    }
}

extension JSONValue {
    /// `.string` or `.null`.
    public static func optional(_ s: String?) -> JSONValue { s.map { .string($0) } ?? .null }
    public static func optional(_ i: Int?) -> JSONValue { i.map { .int(Int64($0)) } ?? .null }
    public static func int(_ i: Int) -> JSONValue { .int(Int64(i)) }
}
/// `print(json)` and `"\(json)"` give the value's compact JSON text (`text`), not the enum's cases.
extension JSONValue: CustomStringConvertible {
    public var description: String { text }
}
