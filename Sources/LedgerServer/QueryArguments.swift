/// A query string's arguments, read strictly: an unknown name is a 400 (a typo must not widen
/// an answer silently), an empty value counts as absent.
struct QueryArguments {
    let values: [String: String]
    let repeated: Set<String>

    init(_ values: [String: String], repeated: Set<String> = []) {
        self.values = values
        self.repeated = repeated
    }

    /// Reads a query string as sent (`a=1&b=x+y`), strictly: a bad `%` escape or bytes that are
    /// not UTF-8 are a 400, as in a path (a lenient reading would look up another user).
    init(rawQuery: String?) throws(APIError) {
        var values: [String: String] = [:]
        var repeated: Set<String> = []
        for piece in (rawQuery ?? "").utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let equals = piece.firstIndex(of: UInt8(ascii: "="))
            let name = try PercentDecoding.queryComponent(Array(piece[..<(equals ?? piece.endIndex)]))
            let value = try equals.map { e throws(APIError) in try PercentDecoding.queryComponent(Array(piece[piece.index(after: e)...])) } ?? ""
            if values[name] == nil { values[name] = value } else { repeated.insert(name) }
        }
        self.init(values, repeated: repeated)
    }

    /// 400 when an argument is not one of `names`, or comes twice (which one would be meant?).
    func allow(_ names: Set<String>) throws(APIError) {
        if let name = repeated.sorted().first {
            throw APIError.invalidQuery("the query argument \"\(name.prefix(50))\" is given more than once")
        }
        for name in values.keys.sorted() where !names.contains(name) {
            let known = names.isEmpty ? "this route takes no query arguments" : "known: " + names.sorted().joined(separator: ", ")
            throw APIError.invalidQuery("unknown query argument \"\(name.prefix(50))\" (\(known))")
        }
    }

    func string(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    func required(_ name: String) throws(APIError) -> String {
        guard let value = values[name] else { throw APIError.invalidQuery("the query argument \"\(name)\" is required") }
        return value
    }

    /// A whole number of at least `minimum`, in digits; one past 64 bits reads as the largest (as the
    /// CLI reads its numbers: a position past the head is the head).
    func integer(_ name: String, minimum: UInt64) throws(APIError) -> UInt64? {
        guard let text = string(name) else { return nil }
        let digits = !text.isEmpty && text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 })
        guard digits, UInt64(text) ?? .max >= minimum else {
            throw APIError.invalidQuery("\(name) must be a whole number of at least \(minimum), not \"\(text.prefix(50))\"")
        }
        return UInt64(text) ?? .max
    }

    /// `limit`: 1 or more; more than 1,000 reads as 1,000 (the largest page).
    func limit() throws(APIError) -> Int? {
        try integer("limit", minimum: 1).map { Int(min($0, 1000)) }
    }
}
