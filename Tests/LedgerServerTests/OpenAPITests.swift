import Foundation
import LedgerCodec
@testable import LedgerServer
import ReferralRules
import XCTest

/// `docs/openapi.json`, the API's description for the backends that call it, says what the
/// server does: the same routes and methods, each route's query arguments as the server takes
/// them, and the command types the ledger knows.
final class OpenAPITests: XCTestCase {
    private var document: JSONValue!

    override func setUpWithError() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        document = try JSONValue(parsing: Array(try Data(contentsOf: root.appendingPathComponent("docs/openapi.json"))))
    }

    /// One of each route.
    private static let routes: [Route] = [
        .health, .commands, .events, .program(app: "a", program: "p"), .programs(app: "a"),
        .progress(app: "a", program: "p", user: "u"), .participants(app: "a", program: "p"), .rewards(app: "a", user: "u"),
        .balance(app: "a", user: "u"), .resolve(app: "a"), .deliveries(app: "a"), .audit(app: "a"), .revenueCat(app: "a"),
    ]

    private var paths: [String: JSONValue] {
        guard case .object(let paths) = document["paths"] else { return [:] }
        return Dictionary(uniqueKeysWithValues: paths.map { ($0.key, $0.value) })
    }

    func testItDescribesEveryRouteWithItsMethodAndNothingElse() throws {
        XCTAssertEqual(document["openapi"].stringValue, "3.1.0")
        XCTAssertEqual(Set(paths.keys), Set(Self.routes.map(\.template)))
        for route in Self.routes {
            let path = try XCTUnwrap(paths[route.template], route.template)
            let methods = Set(["get", "post", "put", "delete", "patch", "head", "options"].filter { path[$0] != .null })
            XCTAssertEqual(methods, [route.method.lowercased()], route.template)
        }
        // A route template matches the route it names, with its parameters filled in.
        for route in Self.routes {
            let sample = route.template.replacingOccurrences(of: "{app}", with: "a").replacingOccurrences(of: "{program}", with: "p")
                .replacingOccurrences(of: "{user}", with: "u")
            XCTAssertEqual(try Route.match(rawPath: sample), route, sample)
        }
    }

    func testEachRoutesQueryArgumentsAreTheOnesTheServerTakes() throws {
        let server = try ServerFixture()
        for route in Self.routes where route.method == "GET" && route != .health {
            let path = try XCTUnwrap(paths[route.template])
            let parameters = (path["parameters"].arrayValue ?? []) + (path["get"]["parameters"].arrayValue ?? [])
            var documented: Set<String> = []
            for parameter in parameters {
                var p = parameter
                if let reference = p["$ref"].stringValue {
                    let name = try XCTUnwrap(reference.split(separator: "/").last.map(String.init))
                    p = document["components"]["parameters"][name]
                }
                if p["in"].stringValue == "query" { documented.insert(try XCTUnwrap(p["name"].stringValue)) }
            }
            // The server names the arguments it takes when it refuses one it does not.
            let sample = route.template.replacingOccurrences(of: "{app}", with: "a").replacingOccurrences(of: "{program}", with: "p")
                .replacingOccurrences(of: "{user}", with: "u")
            let reply = try server.get(sample + "?zz_unknown=1")
            XCTAssertEqual(reply.status, 400, "\(sample): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "invalid_query", sample)
            let message = try XCTUnwrap(reply.json["error"]["message"].stringValue)
            let known = try XCTUnwrap(message.components(separatedBy: "known: ").last?.dropLast())
            XCTAssertEqual(documented, Set(known.components(separatedBy: ", ")), "\(route.template): \(message)")
        }
    }

    func testTheCommandTypesAreTheLedgersAndEveryErrorStatusIsDescribed() throws {
        let types = commandSchemas.map { $0["properties"]["type"]["const"].stringValue ?? "?" }
        XCTAssertEqual(types, Command.types)
        let mapping = document["components"]["schemas"]["Command"]["discriminator"]["mapping"]
        for type in Command.types { XCTAssertNotEqual(mapping[type], .null, type) }
        // The statuses SPEC §10 names for errors, each described where a route can answer it.
        let post = try XCTUnwrap(paths["/v1/commands"])["post"]["responses"]
        for status in ["200", "400", "401", "403", "409", "413", "500", "503"] { XCTAssertNotEqual(post[status], .null, status) }
        let query = try XCTUnwrap(paths["/v1/apps/{app}/programs/{program}"])["get"]["responses"]
        for status in ["200", "400", "401", "404", "503"] { XCTAssertNotEqual(query[status], .null, status) }
    }

    /// The documented values of a query argument are the ones the server takes: each listed
    /// status is answered, an unlisted one refused; `limit`'s pattern refuses what the server does.
    func testDocumentedArgumentValuesAreTheOnesTheServerTakes() throws {
        let server = try ServerFixture()
        for command in [Commands.configure(["friend_referrals_enabled": true]), Commands.createPointsProgram(), Commands.activate()] {
            XCTAssertEqual(try server.post(command, key: ServerFixture.ownerKey).status, 200)
        }
        func parameter(_ template: String, _ name: String) throws -> JSONValue {
            let operation = try XCTUnwrap(paths[template])["get"]
            var all = (paths[template]?["parameters"].arrayValue ?? []) + (operation["parameters"].arrayValue ?? [])
            all = all.map { p in p["$ref"].stringValue.map { document["components"]["parameters"][String($0.split(separator: "/").last!)] } ?? p }
            return try XCTUnwrap(all.first { $0["name"].stringValue == name }, "\(template) \(name)")
        }
        for (template, sample) in [("/v1/apps/{app}/deliveries", "/v1/apps/acme/deliveries"),
                                   ("/v1/apps/{app}/programs/{program}/participants", "/v1/apps/acme/programs/spring/participants")] {
            let values = try XCTUnwrap(try parameter(template, "status")["schema"]["enum"].arrayValue?.compactMap(\.stringValue))
            XCTAssertGreaterThan(values.count, 3)
            for value in values {
                let reply = try server.get(sample + "?status=" + value)
                XCTAssertEqual(reply.status, 200, "\(sample) status=\(value): \(reply.text)")
            }
            let bogus = try server.get(sample + "?status=bogus")
            XCTAssertEqual(bogus.status, 400, bogus.text)
        }
        let pattern = try XCTUnwrap(try parameter("/v1/events", "limit")["schema"]["pattern"].stringValue)
        let regex = try NSRegularExpression(pattern: pattern)
        for value in ["", "0", "00", "1", "007", "1000", "5000", "-1", "1.5", " 1", "x"] {
            let matches = regex.firstMatch(in: value, range: NSRange(value.startIndex..., in: value)) != nil
            let reply = try server.get("/v1/events?limit=" + (value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? value))
            XCTAssertEqual(reply.status == 200, matches, "limit=\"\(value)\": the pattern says \(matches), the server answered \(reply.status) \(reply.text)")
        }
    }

    /// The schema of each command type, in `Command`'s `oneOf` order.
    private var commandSchemas: [JSONValue] {
        (document["components"]["schemas"]["Command"]["oneOf"].arrayValue ?? []).map { reference in
            document["components"]["schemas"][String(reference["$ref"].stringValue?.split(separator: "/").last ?? "")]
        }
    }

    /// A value a property's schema allows, for a command the reader takes field by field.
    private func placeholder(_ schema: JSONValue) -> JSONValue {
        if let constant = schema["const"].stringValue { return .string(constant) }
        if let first = schema["enum"].arrayValue?.first { return first }
        if let first = schema["oneOf"].arrayValue?.first { return placeholder(first) }
        switch schema["type"].stringValue {
        case "integer": return 1
        case "object": return .object(JSONObject())
        case "array": return .array([])
        default:
            if schema["format"].stringValue == "date-time" { return "2026-03-01T00:00:00Z" }
            return schema["pattern"].isNull ? "x1" : "p1"
        }
    }

    /// The top-level field a refusal says is missing (`missing field command.user` → `user`), if any.
    private func topLevelMissingField(_ message: String) -> String? {
        guard let range = message.range(of: "missing field command.") else { return nil }
        let path = message[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "." || $0 == "[" }
        return path.contains(".") || path.contains("[") ? nil : String(path)
    }

    /// Each command type's fields are the ones the server reads: a command with the schema's
    /// required fields is never refused for a missing or unknown field, nor with its optional
    /// ones; one without any of its required fields is refused naming it; an extra field is refused.
    func testEachCommandTypesFieldsAreTheOnesTheServerReads() throws {
        let server = try ServerFixture()
        func answer(_ command: JSONObject) throws -> (status: Int, message: String) {
            let reply = try server.post(.object(command), key: ServerFixture.ownerKey)
            return (reply.status, reply.json["error"]["message"].stringValue ?? "")
        }
        XCTAssertEqual(commandSchemas.count, Command.types.count)
        for schema in commandSchemas {
            let type = try XCTUnwrap(schema["properties"]["type"]["const"].stringValue)
            XCTAssertEqual(schema["additionalProperties"], false, type)
            let required = try XCTUnwrap(schema["required"].arrayValue?.compactMap(\.stringValue))
            guard case .object(let properties) = schema["properties"] else { return XCTFail(type) }
            var full = JSONObject()
            for name in required { full[name] = placeholder(try XCTUnwrap(properties[name], "\(type).\(name)")) }
            full["app"] = "acme"
            let whole = try answer(full)
            // (A nested one, `command.benefit.type` of an empty placeholder object, is the nested schema's, SPEC's.)
            XCTAssertNil(topLevelMissingField(whole.message), "\(type): \(whole.message)")
            XCTAssertFalse(whole.message.contains("unknown field"), "\(type): \(whole.message)")
            var everything = full
            for (name, property) in properties where full[name] == nil { everything[name] = placeholder(property) }
            let all = try answer(everything)
            XCTAssertFalse(all.message.contains("unknown field"), "\(type) with its optional fields: \(all.message)")
            for name in required where name != "type" {
                var missing = full
                missing[name] = nil
                let refused = try answer(missing)
                XCTAssertEqual(refused.status, 400, "\(type) without \(name)")
                XCTAssertTrue(refused.message.contains("command.\(name)"), "\(type) without \(name): \(refused.message)")
            }
            // An unknown field is found once every known one has been read: where the placeholders
            // read as a whole command (a config or benefit placeholder does not).
            if whole.status != 400 {
                var extra = full
                extra["zz_unknown"] = 1
                let refused = try answer(extra)
                XCTAssertEqual(refused.status, 400, type)
                XCTAssertTrue(refused.message.contains("zz_unknown"), "\(type): \(refused.message)")
            }
        }
    }
}
