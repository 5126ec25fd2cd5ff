/// The verb's flags and positional arguments, read strictly: an unknown flag, or a word the verb
/// takes no place for, is a usage error (an unquoted `--user a b` must not query user "a").
struct Arguments {
    var flags: [String: String] = [:]
    var switches: Set<String> = []
    var positional: [String] = []

    struct UsageError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// `valued` flags take a value (`--app A` or `--app=A`), never an empty one unless named in
    /// `mayBeEmpty` (a script's unset variable must not widen a query or name a user ""); `boolean`
    /// ones take none; `files` is how many positional arguments (FILE) the verb takes at most.
    init(_ args: [String], valued: Set<String>, boolean: Set<String> = [], mayBeEmpty: Set<String> = [], files: Int = 0) throws {
        var i = 0
        while i < args.count {
            let a = args[i]
            if a.hasPrefix("--") {
                var name = String(a.dropFirst(2))
                var value: String?
                if let eq = name.firstIndex(of: "=") {
                    value = String(name[name.index(after: eq)...])
                    name = String(name[..<eq])
                }
                if boolean.contains(name) {
                    guard value == nil else { throw UsageError(message: "--\(name) takes no value") }
                    guard switches.insert(name).inserted else { throw UsageError(message: "--\(name) is given more than once") }
                } else if valued.contains(name) {
                    if value == nil {
                        i += 1
                        guard i < args.count else { throw UsageError(message: "--\(name) needs a value") }
                        // `--user --app acme`: the value was left out, not a user named "--app"
                        // (a value that starts like an option of this verb goes as `--user=--app`).
                        let next = args[i]
                        if next.hasPrefix("--"), valued.union(boolean).contains(String(next.dropFirst(2).prefix { $0 != "=" })) {
                            throw UsageError(message: "--\(name) needs a value (\(next) is an option; write --\(name)=\(next) for a value that starts with --)")
                        }
                        value = next
                    }
                    if value == "", !mayBeEmpty.contains(name) {
                        throw UsageError(message: "--\(name) needs a value, not an empty one")
                    }
                    // Which of two values would be meant? (HTTP answers a repeated argument 400 too.)
                    guard flags[name] == nil else { throw UsageError(message: "--\(name) is given more than once") }
                    flags[name] = value
                } else {
                    throw UsageError(message: "unknown option --\(name)")
                }
            } else {
                positional.append(a)
            }
            i += 1
        }
        if positional.count > files {
            let extra = positional[files]
            throw UsageError(message: files == 0
                ? "unexpected argument \"\(extra)\": this verb takes only options (quote a value that holds spaces)"
                : "unexpected argument \"\(extra)\": give at most \(files == 1 ? "one FILE" : "\(files) files")")
        }
    }

    func required(_ name: String) throws -> String {
        guard let v = flags[name], !v.isEmpty else { throw UsageError(message: "--\(name) is required") }
        return v
    }

    /// A page size: 1 or more (a query answers at most 1,000 a page), like HTTP's `limit`.
    func limit() throws -> Int? {
        guard let i = try integer("limit") else { return nil }
        guard i >= 1 else { throw UsageError(message: "--limit must be at least 1") }
        return i
    }

    /// A duration of whole seconds from 1 to 600 (`--timeout`, `--mail-timeout`).
    func seconds(_ name: String) throws -> Double? {
        guard let text = flags[name] else { return nil }
        guard text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let seconds = Int(text), (1...600).contains(seconds) else {
            throw UsageError(message: "--\(name) must be a whole number of seconds from 1 to 600, not \"\(text)\"")
        }
        return Double(seconds)
    }

    func integer(_ name: String) throws -> Int? {
        guard let v = flags[name] else { return nil }
        // Digits only (no sign), as the HTTP API reads its numbers; one past Int's range reads as
        // the largest (a position past the head is the head, a limit past 1,000 is 1,000).
        guard !v.isEmpty, v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw UsageError(message: "--\(name) must be a whole number (digits only), not \"\(v.prefix(50))\"")
        }
        return Int(v) ?? Int.max
    }
}
