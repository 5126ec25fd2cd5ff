import Foundation
import LedgerCodec
import LedgerServer
import ReferralLedger
import XCTest

/// The query routes answer exactly the CLI's JSON (the same library calls), 404 for unknown
/// entities, 400 for bad arguments.
final class QueryRouteTests: XCTestCase {
    static let inviter = "ali ce/1+é?#"

    /// An app with a live points program, an inviter with an awkward user ID, and one friend.
    func makeProgram(_ f: ServerFixture) throws -> String {
        let owner = ServerFixture.ownerKey
        for command in [Commands.configure(["friend_referrals_enabled": true, "share_link_host": "go.acme.test"]),
                        Commands.createPointsProgram(), Commands.activate()] {
            let reply = try f.post(command, key: owner)
            XCTAssertEqual(reply.status, 200, reply.text)
        }
        let invite = try f.post(Commands.invite(Self.inviter))
        XCTAssertEqual(invite.status, 200, invite.text)
        let code = try XCTUnwrap(invite.json["code"].stringValue, invite.text)
        let enrolled = try f.post(Commands.enroll("bob", code: code))
        XCTAssertEqual(enrolled.status, 200, enrolled.text)
        return code
    }

    func testQueriesAnswerWhatTheLibraryAnswers() throws {
        let f = try ServerFixture()
        let code = try makeProgram(f)
        let user = encodeSegment(Self.inviter)
        let l = f.ledger!
        let cases: [(String, JSONValue)] = [
            ("/v1/apps/acme/programs/spring/progress/\(user)", try l.progress(app: "acme", program: "spring", user: Self.inviter)),
            ("/v1/apps/acme/users/\(user)/rewards", try l.rewards(app: "acme", user: Self.inviter)),
            ("/v1/apps/acme/users/\(user)/rewards?program=spring", try l.rewards(app: "acme", user: Self.inviter, program: "spring")),
            ("/v1/apps/acme/users/bob/rewards?limit=1&cursor=2", try l.rewards(app: "acme", user: "bob", limit: 1, cursor: 2)),
            ("/v1/apps/acme/users/\(user)/balance", try l.balance(app: "acme", user: Self.inviter)),
            ("/v1/apps/acme/users/bob/balance", try l.balance(app: "acme", user: "bob")),
            ("/v1/apps/acme/resolve?input=\(code.lowercased())", try l.resolve(app: "acme", input: code)),
            ("/v1/apps/acme/resolve?input=https%3A%2F%2Fgo.acme.test%2Fr%2F\(code)", try l.resolve(app: "acme", input: code)),
            ("/v1/apps/acme/programs/spring/participants", try l.participants(app: "acme", program: "spring")),
            ("/v1/apps/acme/programs", try l.programs(app: "acme")),
            ("/v1/apps/acme/programs?limit=1&cursor=a", try l.programs(app: "acme", limit: 1, cursor: "a")),
            ("/v1/apps/acme/programs/spring/participants?status=friend&limit=1",
             try l.participants(app: "acme", program: "spring", status: "friend", limit: 1)),
            ("/v1/apps/acme/programs/spring/participants?user_prefix=ali", try l.participants(app: "acme", program: "spring", userPrefix: "ali")),
            ("/v1/apps/acme/deliveries", try l.deliveries(app: "acme")),
            ("/v1/apps/acme/deliveries?program=spring&status=fulfilled&limit=1",
             try l.deliveries(app: "acme", program: "spring", status: "fulfilled", limit: 1)),
            ("/v1/apps/acme/audit", try l.audit(app: "acme")),
            ("/v1/apps/acme/audit?user=bob&limit=2", try l.audit(app: "acme", user: "bob", limit: 2)),
            ("/v1/apps/acme/audit?program=spring&cursor=2", try l.audit(app: "acme", program: "spring", after: 2)),
        ]
        for (target, expected) in cases {
            let reply = try f.get(target)
            XCTAssertEqual(reply.status, 200, "\(target): \(reply.text)")
            XCTAssertEqual(reply.json, expected, target)
        }
        // The answers are not vacuous: the inviter earned points from bob's enrolment.
        let progress = try f.get("/v1/apps/acme/programs/spring/progress/\(user)").json
        XCTAssertEqual(progress["qualified_count"], 1)
        XCTAssertEqual(try f.get("/v1/apps/acme/users/\(user)/balance").json["balance"], 100)
        XCTAssertEqual(try f.get("/v1/apps/acme/users/\(user)/rewards").json["rewards"].arrayValue?.count, 1)
        XCTAssertEqual(try f.get("/v1/apps/acme/resolve?input=\(code)").json["program"], "spring")
        // `program` answers with the query's own clock, so compare what does not depend on it.
        let program = try f.get("/v1/apps/acme/programs/spring")
        XCTAssertEqual(program.status, 200)
        let expected = try l.program(app: "acme", program: "spring")
        XCTAssertEqual(program.json["status"], expected["status"])
        XCTAssertEqual(program.json["version"], expected["version"])
        XCTAssertEqual(program.json["config"], expected["config"])
        XCTAssertEqual(program.json["accepting_new_referrals"], true)
    }

    /// `as_of` (the CLI's `--as-of`) answers every query as the ledger stood after a position,
    /// exactly as the library's fold does, for auditors over HTTP.
    func testEveryQueryAnswersAsOfAPastPosition() throws {
        let f = try ServerFixture()
        let code = try makeProgram(f)
        let user = encodeSegment(Self.inviter)
        let l = f.ledger!
        let before = f.head  // before carol's enrolment
        _ = try f.post(Commands.enroll("carol", code: code))
        let cases: [(String, JSONValue)] = [
            ("/v1/apps/acme/programs/spring/progress/\(user)?as_of=\(before)", try l.progress(app: "acme", program: "spring", user: Self.inviter, asOf: before)),
            ("/v1/apps/acme/users/\(user)/rewards?program=spring&as_of=\(before)", try l.rewards(app: "acme", user: Self.inviter, program: "spring", asOf: before)),
            ("/v1/apps/acme/users/\(user)/balance?as_of=\(before)", try l.balance(app: "acme", user: Self.inviter, asOf: before)),
            ("/v1/apps/acme/resolve?input=\(code)&as_of=\(before)", try l.resolve(app: "acme", input: code, asOf: before)),
            ("/v1/apps/acme/programs/spring/participants?as_of=\(before)", try l.participants(app: "acme", program: "spring", asOf: before)),
            ("/v1/apps/acme/deliveries?as_of=\(before)", try l.deliveries(app: "acme", asOf: before)),
            ("/v1/apps/acme/audit?user=bob&as_of=\(f.head)", try l.audit(app: "acme", user: "bob", asOf: f.head)),
        ]
        for (target, expected) in cases {
            let reply = try f.get(target)
            XCTAssertEqual(reply.status, 200, "\(target): \(reply.text)")
            XCTAssertEqual(reply.json, expected, target)
        }
        // Not vacuous: the inviter had one friend then, and has two now.
        XCTAssertEqual(try f.get("/v1/apps/acme/programs/spring/progress/\(user)?as_of=\(before)").json["qualified_count"], 1)
        XCTAssertEqual(try f.get("/v1/apps/acme/programs/spring/progress/\(user)").json["qualified_count"], 2)
        let program = try f.get("/v1/apps/acme/programs/spring?as_of=\(before)").json
        XCTAssertEqual(program["counts"]["enrolled"], 1)
        XCTAssertEqual(program["version"], 1)
        // A position before the app existed: the app is unknown then.
        XCTAssertEqual(try f.get("/v1/apps/acme/programs/spring?as_of=0").status, 404)
    }

    /// Numbers are digits; one past 64 bits reads as the largest, as the CLI reads them (a position
    /// past the head is the head, a limit past 1,000 is 1,000), not as a malformed query.
    func testNumbersPast64BitsReadAsTheLargest() throws {
        let f = try ServerFixture()
        _ = try makeProgram(f)
        let huge = "99999999999999999999"
        let far = try f.get("/v1/apps/acme/audit?user=bob&as_of=\(huge)")
        XCTAssertEqual(far.status, 200, far.text)
        XCTAssertEqual(far.json, try f.get("/v1/apps/acme/audit?user=bob").json)
        let page = try f.get("/v1/events?from=1&limit=\(huge)")
        XCTAssertEqual(page.status, 200, page.text)
        XCTAssertEqual(page.json["events"].arrayValue?.count, Int(f.head))
        let past = try f.get("/v1/events?from=\(huge)")
        XCTAssertEqual(past.json["events"].arrayValue?.count, 0, past.text)
        // An audit cursor past every position answers an empty page (2^64 − 1 itself overflowed once).
        for cursor in [huge, "18446744073709551615"] {
            let after = try f.get("/v1/apps/acme/audit?cursor=\(cursor)")
            XCTAssertEqual(after.status, 200, after.text)
            XCTAssertEqual(after.json, ["entries": [], "next_cursor": nil])
        }
        XCTAssertEqual(try f.ledger!.audit(app: "acme", after: .max)["entries"].arrayValue?.count, 0)
        for bad in ["-1", "+2", "1.0", "0x10", "%201"] {  // (an empty value reads as none)
            XCTAssertEqual(try f.get("/v1/events?from=\(bad)").status, 400, bad)
        }
    }

    func testPagedQueriesFollowTheirCursors() throws {
        let f = try ServerFixture()
        _ = try makeProgram(f)
        var users: [String] = []
        var cursor: String?
        repeat {
            let target = "/v1/apps/acme/programs/spring/participants?limit=1" + (cursor.map { "&cursor=\(encodeSegment($0))" } ?? "")
            let page = try f.get(target).json
            users += page["participants"].arrayValue?.compactMap { $0["user"].stringValue } ?? []
            cursor = page["next_cursor"].stringValue
        } while cursor != nil && users.count < 10
        XCTAssertEqual(users, [Self.inviter, "bob"].sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
    }

    func testUnknownAppProgramOrUserIs404WithTheQueryError() throws {
        let f = try ServerFixture()
        _ = try makeProgram(f)
        let cases: [(String, String)] = [
            ("/v1/apps/nope/programs/spring", "unknown_app"),
            ("/v1/apps/acme/programs/nope", "unknown_program"),
            ("/v1/apps/acme/programs/nope/progress/bob", "unknown_program"),
            ("/v1/apps/acme/programs/spring/progress/nobody", "unknown_user"),
            ("/v1/apps/acme/users/nobody/rewards", "unknown_user"),
            ("/v1/apps/acme/users/bob/rewards?program=nope", "unknown_program"),
            ("/v1/apps/nope/users/bob/balance", "unknown_app"),
            ("/v1/apps/acme/users/nobody/balance", "unknown_user"),
            ("/v1/apps/nope/deliveries", "unknown_app"),
            ("/v1/apps/nope/programs", "unknown_app"),
            ("/v1/apps/nope/audit", "unknown_app"),
            ("/v1/apps/acme/audit?program=nope", "unknown_program"),
            ("/v1/apps/acme/audit?user=nobody", "unknown_user"),
            ("/v1/apps/acme/deliveries?program=nope", "unknown_program"),
            ("/v1/apps/acme/deliveries?user=nobody", "unknown_user"),
            ("/v1/apps/acme/programs/spring/participants?user=nobody", "unknown_user"),
            ("/v1/apps/acme/programs/nope/participants", "unknown_program"),
            ("/v1/apps/acme/resolve?input=ZZZZZZZZ", "invalid_code"),
            ("/v1/apps/nope/resolve?input=ZZZZZZZZ", "unknown_app"),
        ]
        for (target, code) in cases {
            let reply = try f.get(target)
            XCTAssertEqual(reply.status, 404, "\(target): \(reply.text)")
            XCTAssertEqual(reply.errorCode, code, target)
            XCTAssertNotNil(reply.json["error"]["message"].stringValue)
        }
        // A long name is not echoed back whole.
        let long = String(repeating: "a", count: 4000)
        let reply = try f.get("/v1/apps/\(long)/programs/spring")
        XCTAssertEqual(reply.errorCode, "unknown_app")
        XCTAssertLessThan(reply.body.count, 500, reply.text)
    }

    func testBadQueryArgumentsAre400() throws {
        let f = try ServerFixture()
        _ = try makeProgram(f)
        let cases = [
            "/v1/apps/acme/programs/spring/participants?status=bogus",
            "/v1/apps/acme/programs/spring/participants?limit=abc",
            "/v1/apps/acme/programs/spring/participants?limit=0",
            "/v1/apps/acme/programs/spring/participants?limit=-1",
            "/v1/apps/acme/deliveries?status=bogus",
            "/v1/apps/acme/audit?cursor=x",
            "/v1/apps/acme/resolve",
            "/v1/apps/acme/users/bob/rewards?programme=spring",
            "/v1/apps/acme/programs/spring?verbose=1",
            "/v1/events?from=abc",
            "/v1/events?limit=0",
            "/v1/events?cursor=1",
            "/v1/apps/acme/users/bob/rewards?program=spring&program=nope",
            "/v1/apps/acme/audit?limit=5&limit=6",
            "/v1/apps/acme/programs/spring?as_of=-1",
            "/v1/apps/acme/users/bob/balance?as_of=x",
            "/v1/events?as_of=3",
            // IDs are NFC (one spelling each): `e` + U+0301 is refused, not looked up.
            "/v1/apps/acme/programs/spring/progress/e%CC%81lodie",
            "/v1/apps/acme/programs/spring/participants?user_prefix=e%CC%81",
            // Read as strictly as a path: a bad escape or bytes that are not UTF-8 name no user.
            "/v1/apps/acme/audit?user=%FF",
            "/v1/apps/acme/audit?user=%ZZ",
            "/v1/apps/acme/programs/spring/participants?user=bo%2",
            // One user or a prefix, not both (the CLI refuses it alike).
            "/v1/apps/acme/programs/spring/participants?user=bob&user_prefix=zz",
            "/v1/apps/acme/users/bob/rewards?program=spr%FFing",
        ]
        for target in cases {
            let reply = try f.get(target)
            XCTAssertEqual(reply.status, 400, "\(target): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "invalid_query", target)
        }
        // A command goes in the body: an argument in the URL is refused, not silently lost.
        let before = f.head
        let command = #"{"type":"invite.create","app":"acme","at":"2026-03-02T00:00:00Z","program":"spring","user":"zoe"}"#
        for target in ["/v1/commands?dry_run=1", "/v1/commands?a=1&a=2"] {
            let reply = try f.call("POST", target, key: ServerFixture.appendKey, body: Array(command.utf8))
            XCTAssertEqual(reply.status, 400, "\(target): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "invalid_query", target)
        }
        // Roles come first: a read key may not post at all, query arguments or not.
        let forbidden = try f.call("POST", "/v1/commands?dry_run=1", key: ServerFixture.readKey, body: Array(command.utf8))
        XCTAssertEqual(forbidden.status, 403, forbidden.text)
        XCTAssertEqual(f.head, before)
    }

    func testPercentEncodedUserIDsReachTheirUser() throws {
        let f = try ServerFixture()
        let awkward = ["a b", "x/y", "50%", "plus+sign", "ünï ©ode", "q?x=1#f"]
        for user in awkward {
            XCTAssertEqual(try f.post(Commands.verify(user)).status, 200)
        }
        _ = try makeProgram(f)
        for user in awkward {
            let invite = try f.post(Commands.invite(user))
            XCTAssertEqual(invite.status, 200, invite.text)
            let rewards = try f.get("/v1/apps/acme/users/\(encodeSegment(user))/rewards")
            XCTAssertEqual(rewards.status, 200, "\(user): \(rewards.text)")
            XCTAssertEqual(rewards.json["user"].stringValue, user)
            let progress = try f.get("/v1/apps/acme/programs/spring/progress/\(encodeSegment(user))")
            XCTAssertEqual(progress.status, 200, "\(user): \(progress.text)")
            XCTAssertEqual(progress.json, try f.ledger.progress(app: "acme", program: "spring", user: user))
        }
        // "x/y" encoded is one segment; unencoded it is two and names no route.
        XCTAssertEqual(try f.get("/v1/apps/acme/users/x/y/rewards").status, 404)
    }

    func testEventsArePagedAtMost1000WithNext() throws {
        let f = try ServerFixture()
        let batch: JSONValue = .array((0..<1000).map { Commands.verify("u\($0)") })
        XCTAssertEqual(try f.post(batch).status, 200)
        XCTAssertEqual(try f.post(.array((1000..<1005).map { Commands.verify("u\($0)") })).status, 200)
        XCTAssertEqual(f.head, 1005)

        // Default page: 1,000 events from 1; larger limits read as 1,000.
        for target in ["/v1/events", "/v1/events?limit=5000"] {
            let page = try f.get(target).json
            XCTAssertEqual(page["events"].arrayValue?.count, 1000, target)
            XCTAssertEqual(page["next"], 1001, target)
        }
        // Walk in pages of 300 until a page comes back empty, and compare with the stored values.
        var from: UInt64 = 1
        var positions: [Int64] = []
        var pages = 0
        while true {
            let reply = try f.get("/v1/events?from=\(from)&limit=300")
            XCTAssertEqual(reply.status, 200)
            let events = try XCTUnwrap(reply.json["events"].arrayValue)
            let stored = try f.ledger.events(from: from, limit: 300)
            XCTAssertEqual(events, try stored.events.map { try JSONValue(parsing: $0) })
            positions += events.compactMap { $0["position"].intValue }
            let next = try XCTUnwrap(reply.json["next"].intValue)
            XCTAssertEqual(UInt64(next), from + UInt64(events.count))
            if events.isEmpty { break }
            from = UInt64(next)
            pages += 1
        }
        XCTAssertEqual(pages, 4)
        XCTAssertEqual(positions, Array(1...1005))
        // At the head and past it: an empty page whose next is where to ask again.
        XCTAssertEqual(try f.get("/v1/events?from=1006").json, ["events": [], "next": 1006])
        XCTAssertEqual(try f.get("/v1/events?from=2000").json, ["events": [], "next": 2000])
        // A follower polls with next: new events appear there.
        XCTAssertEqual(try f.post(Commands.verify("late")).status, 200)
        XCTAssertEqual(try f.get("/v1/events?from=1006").json["events"].arrayValue?.count, 1)
    }
}
