import Foundation
import LedgerCodec
import ReferralLedger
import ReferralRules
import XCTest

/// Runs a fixture history (Fixtures/NAME.jsonl) through a real ledger and checks its expectations.
///
/// A line with `type` is a command. String values may hold placeholders:
/// `{{code:USER:PROGRAM}}` (the code `invite.create` last gave USER in PROGRAM),
/// `{{old_code:USER:PROGRAM}}` (the one it gave before that) and
/// `{{reward:APP:PROGRAM:SIDE:RECIPIENT:SLOT}}` (the deterministic reward ID).
/// A line with `expect` checks something:
/// - `"result"`: the previous command's result contains `answer` (subset match);
/// - `"progress"`, `"rewards"`, `"program"`, `"balance"`, `"participants"`, `"deliveries"`: the query
///   answer, for `args`, contains `answer` (subset match; arrays must have the same length).
struct FixtureRunner {
    let ledger: Ledger
    var codes: [String: String] = [:]
    var lastResult: JSONValue = .null
    var failures: [String] = []
    var queries: [(String, JSONValue)] = []

    init(ledger: Ledger) { self.ledger = ledger }

    static func lines(of name: String) throws -> [JSONValue] {
        let url = ProjectPaths.fixtures.appendingPathComponent(name + ".jsonl")
        let text = try String(contentsOf: url, encoding: .utf8)
        return try text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty && !$0.hasPrefix("//") }
            .map { try JSONValue(parsing: String($0)) }
    }

    static var all: [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: ProjectPaths.fixtures.path)) ?? []
        return files.filter { $0.hasSuffix(".jsonl") && !$0.hasPrefix("bad-") }.map { String($0.dropLast(6)) }.sorted()
    }

    func substitute(_ value: JSONValue) -> JSONValue {
        switch value {
        case .string(let s) where s.contains("{{"):
            var out = ""
            var rest = Substring(s)
            while let open = rest.range(of: "{{"), let close = rest.range(of: "}}", range: open.upperBound..<rest.endIndex) {
                out += rest[..<open.lowerBound]
                out += placeholder(String(rest[open.upperBound..<close.lowerBound]))
                rest = rest[close.upperBound...]
            }
            return .string(out + rest)
        case .array(let a): return .array(a.map(substitute))
        case .object(let o): return .object(o.mapValues(substitute))
        default: return value
        }
    }

    func placeholder(_ body: String) -> String {
        let parts = body.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        if parts.first == "code", parts.count == 3 { return codes["\(parts[1]):\(parts[2])"] ?? "NO-CODE-FOR-\(parts[1])" }
        if parts.first == "old_code", parts.count == 3 { return codes["old:\(parts[1]):\(parts[2])"] ?? "NO-OLD-CODE-FOR-\(parts[1])" }
        if parts.first == "code_lower", parts.count == 3 { return "  " + (codes["\(parts[1]):\(parts[2])"] ?? "none").lowercased() + " " }
        if parts.first == "reward", parts.count >= 6, let side = Command.Side(rawValue: parts[3]) {
            let slot = parts[5...].joined(separator: ":")
            return LedgerState.rewardID(app: parts[1], program: parts[2], side: side, recipient: parts[4], slot: slot)
        }
        return "{{" + body + "}}"
    }

    /// Whether `actual` contains `expected`.
    static func contains(_ actual: JSONValue, _ expected: JSONValue, path: String = "$") -> String? {
        switch (actual, expected) {
        case (.object(let a), .object(let e)):
            for (k, v) in e {
                guard let av = a[k] else { return "\(path).\(k) is missing" }
                if let problem = contains(av, v, path: "\(path).\(k)") { return problem }
            }
            return nil
        case (.array(let a), .array(let e)):
            guard a.count == e.count else { return "\(path) has \(a.count) items, expected \(e.count): \(actual.text)" }
            for (i, (av, ev)) in zip(a, e).enumerated() {
                if let problem = contains(av, ev, path: "\(path)[\(i)]") { return problem }
            }
            return nil
        default:
            if actual == expected { return nil }
            if let x = actual.doubleValue, let y = expected.doubleValue, x == y { return nil }
            return "\(path) is \(actual.text), expected \(expected.text)"
        }
    }

    func query(_ kind: String, _ args: JSONValue) throws -> JSONValue {
        let app = args["app"].stringValue ?? ""
        let asOf = args["as_of"].intValue.map(UInt64.init)
        do {
            switch kind {
            case "progress": return try ledger.progress(app: app, program: args["program"].stringValue ?? "", user: args["user"].stringValue ?? "", asOf: asOf)
            case "rewards": return try ledger.rewards(app: app, user: args["user"].stringValue ?? "", program: args["program"].stringValue, asOf: asOf)
            case "program": return try ledger.program(app: app, program: args["program"].stringValue ?? "", asOf: asOf,
                                                      now: args["now"].stringValue.flatMap { Timestamp(rfc3339: $0) } ?? .now())
            case "programs": return try ledger.programs(app: app, limit: Int(args["limit"].intValue ?? 100), cursor: args["cursor"].stringValue, asOf: asOf,
                                                        now: args["now"].stringValue.flatMap { Timestamp(rfc3339: $0) } ?? .now())
            case "resolve": return try ledger.resolve(app: app, input: args["input"].stringValue ?? "", asOf: asOf)
            case "balance": return try ledger.balance(app: app, user: args["user"].stringValue ?? "", asOf: asOf)
            case "participants": return try ledger.participants(app: app, program: args["program"].stringValue ?? "", user: args["user"].stringValue,
                                                                userPrefix: args["user_prefix"].stringValue ?? "", status: args["status"].stringValue,
                                                                limit: Int(args["limit"].intValue ?? 100), cursor: args["cursor"].stringValue, asOf: asOf)
            case "deliveries": return try ledger.deliveries(app: app, program: args["program"].stringValue, user: args["user"].stringValue,
                                                            status: args["status"].stringValue, asOf: asOf)
            case "audit": return try ledger.audit(app: app, program: args["program"].stringValue, user: args["user"].stringValue, asOf: asOf)
            default: throw QueryError(code: "bad_fixture", message: "unknown query \(kind)", status: 400)
            }
        } catch let e as QueryError {
            return e.json
        }
    }

    mutating func run(_ name: String, lines range: Range<Int>? = nil) throws {
        let all = try Self.lines(of: name)
        for (n, raw) in all.enumerated() where range?.contains(n) ?? true {
            let line = substitute(raw)
            let label = "\(name).jsonl line \(n + 1)"
            if let kind = line["expect"].stringValue {
                let actual = kind == "result" ? lastResult : try query(kind, line["args"])
                if kind != "result" { queries.append((kind, line["args"])) }
                if let problem = Self.contains(actual, line["answer"]) {
                    failures.append("\(label) (\(kind)): \(problem)")
                }
            } else {
                lastResult = try ledger.submit(line, now: Timestamp(rfc3339: "2026-06-01T00:00:00Z")!).json
                if line["type"].stringValue == "invite.create", let code = lastResult["code"].stringValue,
                   let user = line["user"].stringValue, let program = line["program"].stringValue {
                    if let old = codes["\(user):\(program)"], old != code { codes["old:\(user):\(program)"] = old }
                    codes["\(user):\(program)"] = code
                }
            }
        }
    }
}
