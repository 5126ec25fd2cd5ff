import HTTPTestSupport
import Foundation
import HTTPServer
import LedgerCodec
import LedgerServer
import ReferralLedger
import XCTest

/// A real `LedgerServer` on 127.0.0.1 and a free port, over a real ledger in a fresh temporary
/// folder; shut down and removed when the fixture goes.
final class ServerFixture {
    static let appendKey = "test-append-key-0123456789"
    static let ownerKey = "test-owner-key-0123456789"
    static let readKey = "test-read-key-0123456789"

    let folder: String
    private(set) var ledger: Ledger!
    private(set) var server: LedgerServer!
    let accessLog = Collector<String>()
    var port: UInt16 { server.port }

    /// `deliver`: run the delivery worker inside, as `serve` does (off by default: no outside calls).
    init(maxBodyBytes: Int = 1 << 20, deliver: Bool = false, drainTimeout: Double = 10) throws {
        signal(SIGPIPE, SIG_IGN)  // a client writing to a closed socket must fail, not kill the runner
        folder = NSTemporaryDirectory() + "ledger-server-test-" + UUID().uuidString
        ledger = try Ledger(folder: folder)
        let keys = try APIKeys([Self.appendKey: .append, Self.ownerKey: .owner, Self.readKey: .read])
        let log = accessLog
        var configuration = LedgerServer.Configuration(
            http: HTTPServer.Configuration(host: "127.0.0.1", port: 0, maxBodyBytes: maxBodyBytes, threads: 2), keys: keys)
        if !deliver { configuration.delivery = nil }
        configuration.drainTimeout = drainTimeout
        configuration.http.accessLog = { log.append($0) }
        server = try LedgerServer(ledger: ledger, configuration: configuration)
    }

    /// Stops the server (as SIGTERM does); the ledger stays open.
    func stop() { server.shutdown() }

    deinit {
        server?.shutdown()
        server = nil
        ledger = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    // MARK: - Requests

    /// One request on a fresh connection.
    func call(_ method: String, _ target: String, key: String? = nil, headers: [(String, String)] = [],
              body: [UInt8] = []) throws -> Reply {
        var all = headers
        if let key { all.append(("Authorization", "Bearer \(key)")) }
        if !body.isEmpty, !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            all.append(("Content-Type", "application/json"))
        }
        return Reply(try RawHTTPClient.request(port: port, method, target, headers: all, body: body))
    }

    func post(_ command: JSONValue, key: String? = ServerFixture.appendKey) throws -> Reply {
        try call("POST", "/v1/commands", key: key, body: command.bytes)
    }

    func post(text: String, key: String? = ServerFixture.appendKey, contentType: String? = "application/json") throws -> Reply {
        try call("POST", "/v1/commands", key: key, headers: contentType.map { [("Content-Type", $0)] } ?? [],
                 body: Array(text.utf8))
    }

    func get(_ target: String, key: String? = ServerFixture.readKey) throws -> Reply {
        try call("GET", target, key: key)
    }

    /// The head position as the ledger records it.
    var head: UInt64 { (try? ledger.currentHead().position) ?? 0 }
}

/// An HTTP answer with its body read as JSON.
struct Reply {
    var status: Int
    var headers: [String: String]
    var body: [UInt8]
    var text: String { String(decoding: body, as: UTF8.self) }
    var json: JSONValue { (try? JSONValue(parsing: body)) ?? .null }
    var errorCode: String? { json["error"]["code"].stringValue }

    init(_ response: RawHTTPClient.Response) {
        status = response.status
        headers = response.headers
        body = response.body
    }
}

/// The commands the tests post.
enum Commands {
    /// `account.verify`: an append-role command that appends exactly one event.
    static func verify(_ user: String, id: String? = nil, app: String = "acme") -> JSONValue {
        var command: JSONValue = ["type": "account.verify", "app": .string(app), "user": .string(user),
                                  "account_created_at": "2026-01-01T00:00:00Z"]
        if let id { command["id"] = .string(id) }
        return command
    }

    static func configure(_ settings: JSONValue, app: String = "acme") -> JSONValue {
        ["type": "app.configure", "app": .string(app), "at": "2026-03-01T00:00:00Z", "settings": settings]
    }

    /// A live points program: 100 points to the inviter per friend, 50 to the friend at enrolment.
    static func createPointsProgram(_ program: String = "spring", app: String = "acme") -> JSONValue {
        ["type": "program.create", "app": .string(app), "at": "2026-03-01T00:00:00Z", "program": .string(program),
         "environment": "live",
         "config": ["inviter": ["qualifying_event": "invite_accepted",
                                "reward": ["mode": "every", "friends": 1, "benefit": ["type": "points", "amount": 100]]],
                    "friend": ["trigger": "invite_accepted", "benefit": ["type": "points", "amount": 50]],
                    "new_users_only": false]]
    }

    static func activate(_ program: String = "spring", app: String = "acme") -> JSONValue {
        ["type": "program.activate", "app": .string(app), "at": "2026-03-01T00:00:00Z", "program": .string(program)]
    }

    static func invite(_ user: String, program: String = "spring", app: String = "acme") -> JSONValue {
        ["type": "invite.create", "app": .string(app), "at": "2026-03-01T00:00:00Z", "program": .string(program), "user": .string(user)]
    }

    static func enroll(_ user: String, code: String, program: String = "spring", app: String = "acme") -> JSONValue {
        ["type": "referral.enroll", "app": .string(app), "at": "2026-03-02T00:00:00Z", "program": .string(program),
         "user": .string(user), "code": .string(code)]
    }
}

/// Percent-encodes a path segment: everything but RFC 3986 unreserved characters.
func encodeSegment(_ text: String) -> String {
    var out = ""
    for byte in text.utf8 {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            out.append(Character(Unicode.Scalar(byte)))
        default:
            out += String(format: "%%%02X", byte)
        }
    }
    return out
}

/// A thread-safe list.
final class Collector<Element: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Element] = []
    func append(_ item: Element) { lock.lock(); items.append(item); lock.unlock() }
    func append(contentsOf more: [Element]) { lock.lock(); items += more; lock.unlock() }
    var all: [Element] { lock.lock(); defer { lock.unlock() }; return items }
}

