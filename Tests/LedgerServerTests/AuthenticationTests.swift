import HTTPTestSupport
import LedgerCodec
import LedgerServer
import XCTest

/// API keys and roles (SPEC §10): 401 without a known key, 403 for what the role may not do.
final class AuthenticationTests: XCTestCase {
    func testHealthzNeedsNoKeyAndShowsTheHead() throws {
        let f = try ServerFixture()
        var reply = try f.call("GET", "/healthz")
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.json, ["ok": true, "head_position": 0])
        XCTAssertEqual(reply.headers["content-type"], "application/json")
        XCTAssertEqual(try f.post(Commands.verify("u1")).status, 200)
        reply = try f.call("GET", "/healthz")
        XCTAssertEqual(reply.json["head_position"], 1)
    }

    func testMissingKeyIs401OnCommandsAndQueries() throws {
        let f = try ServerFixture()
        for reply in [try f.post(Commands.verify("u1"), key: nil), try f.get("/v1/events", key: nil),
                      try f.get("/v1/apps/acme/programs/spring", key: nil)] {
            XCTAssertEqual(reply.status, 401, reply.text)
            XCTAssertEqual(reply.errorCode, "unauthorized")
            XCTAssertEqual(reply.headers["www-authenticate"], "Bearer")
        }
        XCTAssertEqual(f.head, 0, "a refused command must not be decided")
    }

    /// A post of commands without a usable key, or with a read key, is answered as soon as its
    /// headers are in: a client that asked `Expect: 100-continue` never uploads the body.
    func testAPostThatNoKeyAllowsIsRefusedBeforeItsBodyIsSent() throws {
        let f = try ServerFixture()
        let body = Array(Commands.verify("u1").bytes)
        for (key, status) in [(nil, 401), ("not-a-key", 401), (ServerFixture.readKey, 403)] as [(String?, Int)] {
            let client = try RawHTTPClient(port: f.port, timeout: 5)
            let authorization = key.map { "Authorization: Bearer \($0)\r\n" } ?? ""
            try client.send("POST /v1/commands HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Type: application/json\r\nContent-Length: \(body.count)\r\nExpect: 100-continue\r\n\r\n")
            let reply = try client.readResponse()  // no body sent: the answer comes from the headers alone
            XCTAssertEqual(reply.status, status, reply.text)
        }
        // A good key hears 100 Continue, sends the body, and the command is decided.
        let client = try RawHTTPClient(port: f.port, timeout: 5)
        try client.send("POST /v1/commands HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ServerFixture.appendKey)\r\nContent-Length: \(body.count)\r\nExpect: 100-continue\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 100)
        try client.send(body)
        XCTAssertEqual(try client.readResponse().status, 200)
        XCTAssertEqual(f.head, 1)
    }

    /// A client that sends its body without waiting (no `Expect`) still reads the 401 or 403:
    /// the body is read and dropped first, not cut off under its upload (a broken pipe).
    func testARefusedPostWhoseBodyIsAlreadyComingIsReadThenAnswered() throws {
        let f = try ServerFixture()
        let body = Array(Commands.verify("u1").bytes) + [UInt8](repeating: 0x20, count: 200_000)
        for (key, status) in [(nil, 401), (ServerFixture.readKey, 403)] as [(String?, Int)] {
            let client = try RawHTTPClient(port: f.port, timeout: 5)
            let authorization = key.map { "Authorization: Bearer \($0)\r\n" } ?? ""
            try client.send("POST /v1/commands HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Length: \(body.count)\r\n\r\n")
            try client.send(Array(body.prefix(100)))
            usleep(200_000)  // long enough for a server that answered early to have closed
            try client.send(Array(body.dropFirst(100)))
            XCTAssertEqual(try client.readResponse().status, status)
        }
        // Chunked, and longer than a body the server would take: still read, then answered.
        let client = try RawHTTPClient(port: f.port, timeout: 10)
        try client.send("POST /v1/commands HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        let chunk = Array("100000\r\n".utf8) + [UInt8](repeating: 0x20, count: 1 << 20) + Array("\r\n".utf8)
        for _ in 0..<2 { try client.send(chunk) }
        try client.send("0\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 401)
        XCTAssertEqual(f.head, 0)
    }

    func testUnknownOrMalformedKeyIs401() throws {
        let f = try ServerFixture()
        XCTAssertEqual(try f.post(Commands.verify("u1"), key: "not-a-key").status, 401)
        XCTAssertEqual(try f.get("/v1/events", key: "not-a-key").status, 401)
        // A key of the server sent without the Bearer scheme, or with another scheme.
        for header in [ServerFixture.appendKey, "Basic \(ServerFixture.appendKey)", "Bearer", "Bearer "] {
            let reply = try f.call("POST", "/v1/commands", headers: [("Authorization", header)], body: Commands.verify("u1").bytes)
            XCTAssertEqual(reply.status, 401, header)
        }
        // The scheme is case-insensitive.
        let reply = try f.call("POST", "/v1/commands", headers: [("Authorization", "bearer \(ServerFixture.appendKey)")],
                               body: Commands.verify("u1").bytes)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(f.head, 1)
    }

    func testReadKeyMayQueryButNotPost() throws {
        let f = try ServerFixture()
        let refused = try f.post(Commands.verify("u1"), key: ServerFixture.readKey)
        XCTAssertEqual(refused.status, 403, refused.text)
        XCTAssertEqual(refused.errorCode, "forbidden")
        XCTAssertEqual(f.head, 0)
        XCTAssertEqual(try f.get("/v1/events", key: ServerFixture.readKey).status, 200)
        // Not even a malformed command: a read key sends none.
        XCTAssertEqual(try f.post(["type": "program.bogus", "app": "acme"], key: ServerFixture.readKey).status, 403)
    }

    /// A type no command has is malformed (400, invalid_command), not "owner-only", whatever the key.
    func testAnUnknownTypeIsMalformedNotForbidden() throws {
        let f = try ServerFixture()
        let reply = try f.post(["type": "program.bogus", "app": "acme"], key: ServerFixture.appendKey)
        XCTAssertEqual(reply.status, 400, reply.text)
        XCTAssertEqual(reply.errorCode, "invalid_command")
        XCTAssertEqual(f.head, 0)
    }

    func testEveryRoleMayQuery() throws {
        let f = try ServerFixture()
        for key in [ServerFixture.readKey, ServerFixture.appendKey, ServerFixture.ownerKey] {
            XCTAssertEqual(try f.get("/v1/events?from=1", key: key).status, 200, key)
        }
    }

    func testAppendKeyMayNotPostOwnerCommandsButOwnerMay() throws {
        let f = try ServerFixture()
        for command in [Commands.configure(["friend_referrals_enabled": true]), Commands.createPointsProgram(), Commands.activate(),
                        ["type": "reward.approve", "app": "acme", "reward_id": "r1", "by": "me"],
                        ["type": "delivery.started", "app": "acme", "reward_id": "r1", "attempt": 1]] as [JSONValue] {
            let reply = try f.post(command, key: ServerFixture.appendKey)
            XCTAssertEqual(reply.status, 403, "\(command["type"]): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "forbidden")
        }
        XCTAssertEqual(f.head, 0, "nothing refused may be decided")
        let owner = try f.post(Commands.configure(["friend_referrals_enabled": true]), key: ServerFixture.ownerKey)
        XCTAssertEqual(owner.status, 200, owner.text)
        XCTAssertEqual(owner.json["ok"], true)
        // The owner may send the append role's commands too.
        XCTAssertEqual(try f.post(Commands.verify("u1"), key: ServerFixture.ownerKey).status, 200)
        XCTAssertEqual(f.head, 2)
    }

    func testBatchWithOneOwnerCommandIsRefusedWholeAndNothingIsDecided() throws {
        let f = try ServerFixture()
        let batch: JSONValue = [Commands.verify("u1", id: "b-1"), Commands.configure(["friend_referrals_enabled": true]),
                                Commands.verify("u2", id: "b-2")]
        let reply = try f.post(batch, key: ServerFixture.appendKey)
        XCTAssertEqual(reply.status, 403, reply.text)
        XCTAssertEqual(reply.errorCode, "forbidden")
        XCTAssertTrue(reply.json["error"]["message"].stringValue?.contains("command 2") == true, reply.text)
        XCTAssertEqual(f.head, 0)
        // The ids stayed free: the allowed commands are decided afresh, not as duplicates.
        let again = try f.post([Commands.verify("u1", id: "b-1"), Commands.verify("u2", id: "b-2")], key: ServerFixture.appendKey)
        XCTAssertEqual(again.status, 200, again.text)
        XCTAssertEqual(again.json.arrayValue?.map { $0["duplicate"] }, [.null, .null])
        XCTAssertEqual(f.head, 2)
    }

    func testAccessLogNamesRequestsButNeverKeysOrBodies() throws {
        let f = try ServerFixture()
        _ = try f.post(Commands.verify("secret-user-in-body", id: "log-1"))
        _ = try f.get("/v1/events?from=1&limit=5")
        _ = try f.post(Commands.verify("u"), key: "wrong-key-value")
        f.stop()  // every line is written by the time the server has stopped
        let lines = f.accessLog.all
        XCTAssertEqual(lines.count, 3, "\(lines)")
        // One line per request; a loaded machine may write them in another order than sent.
        for prefix in ["POST /v1/commands 200", "GET /v1/events 200", "POST /v1/commands 401"] {
            XCTAssertEqual(lines.filter { $0.hasPrefix(prefix) }.count, 1, "one line starts with \(prefix): \(lines)")
        }
        for line in lines {
            for secret in [ServerFixture.appendKey, ServerFixture.readKey, "wrong-key-value", "secret-user-in-body", "limit"] {
                XCTAssertFalse(line.contains(secret), line)
            }
        }
    }
}

/// The keys file (`serve --keys FILE`).
final class APIKeysTests: XCTestCase {
    func testReadsRolesFromAJSONObject() throws {
        let keys = try APIKeys(json: Array(#"{"k1": "append", "k2": "owner", "k3": "read"}"#.utf8), source: "keys.json")
        XCTAssertEqual(keys.count, 3)
        XCTAssertEqual(keys.role(of: "k1"), .append)
        XCTAssertEqual(keys.role(of: "k2"), .owner)
        XCTAssertEqual(keys.role(of: "k3"), .read)
        XCTAssertNil(keys.role(of: "k4"))
        XCTAssertNil(keys.role(of: ""))
    }

    func testBadFilesAreClearErrorsThatNeverShowAKey() {
        let cases: [(String, String)] = [
            ("not json", "not valid JSON"),
            (#"["k1"]"#, "must hold a JSON object"),
            (#"{"super-secret": "admin"}"#, "roles are"),
            (#"{"super-secret": 1}"#, "roles are"),
            (#"{"": "read"}"#, "must not be empty"),
            (#"{"has space": "read"}"#, "visible ASCII"),
            (#"{"super-secret": "read", "super-secret": "owner"}"#, "a key appears twice"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try APIKeys(json: Array(text.utf8), source: "keys.json"), text) { error in
                let message = "\(error)"
                XCTAssertTrue(message.contains(expected), "\(text): \(message)")
                XCTAssertTrue(message.contains("keys.json"), message)
                XCTAssertFalse(message.contains("super-secret"), message)
            }
        }
        XCTAssertThrowsError(try APIKeys(contentsOfFile: "/nonexistent/keys.json")) { error in
            XCTAssertTrue("\(error)".contains("/nonexistent/keys.json"))
        }
    }

    func testRoles() {
        let ownerOnly: (String) -> Bool = { $0 == "app.configure" }
        XCTAssertFalse(APIRole.read.maySubmit(type: "account.verify", isOwnerOnly: ownerOnly))
        XCTAssertTrue(APIRole.append.maySubmit(type: "account.verify", isOwnerOnly: ownerOnly))
        XCTAssertFalse(APIRole.append.maySubmit(type: "app.configure", isOwnerOnly: ownerOnly))
        XCTAssertTrue(APIRole.owner.maySubmit(type: "app.configure", isOwnerOnly: ownerOnly))
    }
}
