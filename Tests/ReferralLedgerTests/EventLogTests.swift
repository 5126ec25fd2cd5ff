import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
import ReferralRules
import XCTest

/// The event log exactly as SPEC §9 says, read back through raw LMDB.
final class EventLogTests: XCTestCase {
    private func configure(_ n: Int, id: String? = nil) -> JSONValue {
        var c: JSONValue = ["type": "app.configure", "app": "acme", "at": "2026-01-01T00:00:00Z",
                            "settings": ["workspace": .string("ws\(n)")]]
        if let id { c["id"] = .string(id) }
        return c
    }

    func testValuesAreCanonicalChainedAndKeyedByBigEndianPosition() throws {
        let temp = try TemporaryLedger()
        for n in 0..<5 { try temp.submit(configure(n)) }
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases, readOnly: true)
        var previous = SHA256.zeroHex
        var positions: [UInt64] = []
        try env.read { txn in
            try txn.scan("events") { key, value in
                XCTAssertEqual(key.count, 8)
                let position = key.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                positions.append(position)
                let bytes = Array(value)
                let json = try JSONValue(parsing: bytes)
                XCTAssertEqual(json["position"].intValue, Int64(position))
                XCTAssertEqual(json["prev_hash"].stringValue, previous)
                XCTAssertEqual(json.bytes, bytes, "value is not compact JSON with sorted keys")
                XCTAssertEqual(Set(json.objectValue!.keys), ["position", "type", "at", "recorded_at", "command_id", "data", "prev_hash"])
                previous = SHA256.hex(bytes)
                return true
            }
            XCTAssertEqual(try txn.get("meta", Array("head_position".utf8)).map { String(decoding: $0, as: UTF8.self) }, "5")
            XCTAssertEqual(try txn.get("meta", Array("head_hash".utf8)).map { String(decoding: $0, as: UTF8.self) }, previous)
        }
        XCTAssertEqual(positions, [1, 2, 3, 4, 5])
    }

    func testMalformedCommandsAreRefusedAndAppendNothing() throws {
        let temp = try TemporaryLedger()
        let cases: [(String, String)] = [
            ("{\"type\":\"app.configure\"", "not valid JSON"),
            ("[1,2]", "must be a JSON object"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"settings\":{\"webhook_secret\":{\"sha256\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}}", "must be the secret itself"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"inviter\":null,\"friend\":null,\"notify\":[\"o0@example.com\",\"o1@example.com\",\"o2@example.com\",\"o3@example.com\",\"o4@example.com\",\"o5@example.com\",\"o6@example.com\",\"o7@example.com\",\"o8@example.com\",\"o9@example.com\",\"o10@example.com\",\"o11@example.com\",\"o12@example.com\",\"o13@example.com\",\"o14@example.com\",\"o15@example.com\",\"o16@example.com\",\"o17@example.com\",\"o18@example.com\",\"o19@example.com\",\"o20@example.com\",\"o21@example.com\",\"o22@example.com\",\"o23@example.com\",\"o24@example.com\",\"o25@example.com\",\"o26@example.com\",\"o27@example.com\",\"o28@example.com\",\"o29@example.com\",\"o30@example.com\",\"o31@example.com\",\"o32@example.com\",\"o33@example.com\",\"o34@example.com\",\"o35@example.com\",\"o36@example.com\",\"o37@example.com\",\"o38@example.com\",\"o39@example.com\",\"o40@example.com\",\"o41@example.com\",\"o42@example.com\",\"o43@example.com\",\"o44@example.com\",\"o45@example.com\",\"o46@example.com\",\"o47@example.com\",\"o48@example.com\",\"o49@example.com\",\"o50@example.com\"]}}", "at most 50 addresses"),
            ("\u{FEFF}{\"type\":\"app.configure\",\"app\":\"a\",\"settings\":{}}", "byte order mark"),
            ("{\"type\":\"app.launch\",\"app\":\"a\"}", "unknown command type"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"settings\":{},\"colour\":\"red\"}", "unknown field command.colour"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"settings\":{\"friend_referrals_enabled\":\"yes\"}}", "friend_referrals_enabled must be true or false"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"settings\":{\"mystery\":1}}", "unknown field settings.mystery"),
            ("{\"type\":\"app.configure\",\"app\":\"a\"}", "missing field command.settings"),
            ("{\"type\":\"app.configure\",\"app\":7,\"settings\":{}}", "command.app must be a string"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"at\":\"yesterday\",\"settings\":{}}", "RFC 3339"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"at\":\"2026-02-30T00:00:00Z\",\"settings\":{}}", "RFC 3339"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"prod\",\"config\":{}}", "must be one of \"live\", \"sandbox\""),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"inviter\":{\"qualifying_event\":\"x\",\"reward\":{\"mode\":\"once\",\"friends\":0,\"benefit\":{\"type\":\"points\",\"amount\":1}}}}}", "friends must be at least 1"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"friend\":{\"trigger\":\"x\",\"benefit\":{\"type\":\"revenuecat_entitlement\",\"entitlement\":\"pro\",\"duration\":\"one month\"}}}}", "ISO 8601 duration"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"friend\":{\"trigger\":\"x\",\"benefit\":{\"type\":\"revenuecat_entitlement\",\"entitlement\":\"pro\",\"duration\":\"P1M1M\"}}}}", "command.config.friend.benefit.duration \"P1M1M\" repeats a unit"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"friend\":{\"trigger\":\"x\",\"benefit\":{\"type\":\"revenuecat_entitlement\",\"entitlement\":\"pro\",\"duration\":\"PT876000H\"}}}}", "of at most 100000 each"),
            ("{\"type\":\"program.update\",\"app\":\"a\",\"program\":\"p\",\"config\":{\"inviter\":{\"qualifying_event\":\"x\",\"reward\":{\"mode\":\"milestones\",\"milestones\":[{\"id\":\"m\",\"friends\":1,\"benefit\":{\"type\":\"revenuecat_entitlement\",\"entitlement\":\"pro\",\"duration\":\"P1D1M\"}}]}},\"friend\":null}}", "milestones[0].benefit.duration \"P1D1M\""),
            ("{\"type\":\"reward.substitute\",\"app\":\"a\",\"reward_id\":\"r\",\"by\":\"o\",\"benefit\":{\"type\":\"revenuecat_entitlement\",\"entitlement\":\"pro\",\"duration\":\"PT1H1H\"}}", "command.benefit.duration \"PT1H1H\""),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"inviter\":{\"qualifying_event\":\"x\",\"reward\":{\"mode\":\"once\",\"friends\":2,\"max_rewards\":3,\"benefit\":{\"type\":\"points\",\"amount\":1}}}}}", "mode \"once\" earns one reward"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"inviter\":null,\"friend\":{\"trigger\":\"x\",\"benefit\":{\"type\":\"custom\",\"feature\":\"f\",\"payload\":{\"n\":[12345678901234567890]}}}}}", "may not be kept exactly"),
            ("{\"type\":\"event.track\",\"app\":\"a\",\"user\":\"u\",\"name\":\"n\",\"event_id\":3}", "command.event_id must be a string"),
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\"u\",\"amount\":1.5,\"reason\":\"r\"}", "command.amount must be a whole number"),
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\"u\",\"amount\":1e2,\"reason\":\"r\"}", "written as a plain integer such as 100"),
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\"u\",\"amount\":100000000000000000000000000000,\"reason\":\"r\"}", "command.amount must be at most"),
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\"u\\u0085\",\"amount\":1,\"reason\":\"r\"}", "command.user must not contain control characters"),
            ("{\"type\":\"delivery.started\",\"app\":\"a\",\"reward_id\":\"r\",\"attempt\":-99999999999999999999}", "command.attempt must be at least 1"),
            ("{\"type\":\"notification.report\",\"app\":\"a\",\"notification\":1,\"outcome\":\"failed\"}", "command.error is required when outcome is \"failed\""),
            ("{\"type\":\"notification.report\",\"app\":\"a\",\"notification\":1,\"outcome\":\"sent\",\"error\":\"x\"}", "command.error goes only with outcome \"failed\""),
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\"u\\u2028\",\"amount\":1,\"reason\":\"r\"}", "command.user must not contain control characters"),
            ("{\"type\":\"app.configure\",\"app\":\"a\",\"at\":\"2026-03-01T12:00:60Z\",\"settings\":{}}", "a leap second only as 23:59:60 UTC"),
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\" \\u3000\",\"amount\":1,\"reason\":\"r\"}", "command.user is only white space"),
            // `e` + U+0301 is canonically the same as U+00E9: one ID must have one spelling.
            ("{\"type\":\"points.spend\",\"app\":\"a\",\"user\":\"e\\u0301\",\"amount\":1,\"reason\":\"r\"}", "command.user is not in Unicode normalization form C"),
            ("{\"type\":\"inventory.import\",\"app\":\"a\",\"program\":\"p\",\"side\":\"friend\",\"offer_id\":\"o\",\"codes\":[{\"code\":\"\\u212B1\",\"expires_at\":null}]}", "command.codes[0].code is not in Unicode normalization form C"),
            ("{\"type\":\"program.create\",\"app\":\"a\",\"program\":\"p\",\"environment\":\"live\",\"config\":{\"inviter\":null,\"friend\":{\"trigger\":\"x\",\"benefit\":{\"type\":\"apple_offer_code\",\"offer_id\":\"offe\\u0301\"}}}}", "command.config.friend.benefit.offer_id is not in Unicode normalization form C"),
        ]
        for (text, expected) in cases {
            let result = try temp.ledger.submit(lines: [Array(text.utf8)])[0].json
            XCTAssertEqual(result["ok"], false, text)
            XCTAssertEqual(result["error"]["code"], "invalid_command", text)
            let message = result["error"]["message"].stringValue ?? ""
            XCTAssertTrue(message.contains(expected), "\(text): message \"\(message)\" does not name \"\(expected)\"")
            XCTAssertTrue(result["events"].isNull, text)
        }
        XCTAssertEqual(try temp.ledger.currentHead().position, 0, "a malformed command appended events")
    }

    /// An `id` compares the command as the rules read it: an enrolment retried with its code in
    /// another case and with spaces, or with unset optional fields written as null, is the same.
    func testAnEnrolmentRetryIsComparedAsItIsRead() throws {
        let temp = try TemporaryLedger()
        let at = "2026-03-01T00:00:00Z"
        _ = try temp.submit(["type": "app.configure", "app": "acme", "at": .string(at), "settings": ["friend_referrals_enabled": true]])
        _ = try temp.submit(["type": "program.create", "app": "acme", "at": .string(at), "program": "p", "environment": "live",
                             "config": ["inviter": nil, "friend": nil, "new_users_only": false]])
        _ = try temp.submit(["type": "program.activate", "app": "acme", "at": .string(at), "program": "p"])
        let code = try temp.submit(["type": "invite.create", "app": "acme", "at": .string(at), "program": "p", "user": "alice"])["code"].stringValue!
        let enrol: JSONValue = ["type": "referral.enroll", "app": "acme", "at": .string(at), "program": "p", "user": "bob", "code": .string(code), "id": "e1"]
        let first = try temp.submit(enrol)
        XCTAssertEqual(first["ok"], true)
        var retry = enrol
        retry["code"] = .string(" " + code.lowercased() + " ")
        retry["device_id"] = nil
        retry["account_created_at"] = nil
        let again = try temp.submit(retry)
        XCTAssertEqual(again["duplicate"], true, again.text)
        XCTAssertEqual(again["position"], first["position"])
        var other = enrol
        other["user"] = "carol"
        XCTAssertEqual(try temp.submit(other)["error"]["code"], "idempotency_conflict")

        // An entry a former version stored (its fingerprint of the command as sent) still answers
        // the same command retried after an upgrade.
        var sent = enrol
        sent["id"] = "e2"
        sent["user"] = "dave"
        sent["code"] = .string(code.lowercased())
        sent["device_id"] = nil
        let stored = try temp.submit(sent)
        XCTAssertEqual(stored["ok"], true, stored.text)
        let former = try Command(json: sent, now: Timestamp(rfc3339: at)!).formerFingerprint
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        try env.write { txn in
            var entry = try XCTUnwrap(try IdempotencyIndex.entry(app: "acme", id: "e2", txn))
            XCTAssertNotEqual(entry.fingerprint, former)
            entry.fingerprint = former
            try IdempotencyIndex.remember(app: "acme", id: "e2", entry, txn)
        }
        try temp.reopen()
        let retried = try temp.submit(sent)
        XCTAssertEqual(retried["duplicate"], true, retried.text)
        XCTAssertEqual(retried["position"], stored["position"])
    }

    /// SPEC §1: a command without `at` is decided at the current time, a RevenueCat event too
    /// (only the webhook route reads `at` from `event_timestamp_ms`): a purchase reported now
    /// with an old event time still qualifies a friend enrolled before now.
    func testAMissingAtIsNowForARevenueCatEventToo() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"paid_purchase","reward":{"mode":"every","friends":1,"benefit":{"type":"points","amount":5}}},"friend":null,"new_users_only":false}}"#)
        try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        let code = try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-02T00:00:00Z","program":"p","user":"alice"}"#)["code"].stringValue!
        try temp.submit(#"{"type":"referral.enroll","app":"a","at":"2026-03-02T00:00:00Z","program":"p","user":"bob","code":"\#(code)"}"#)
        let now = Timestamp(rfc3339: "2026-03-05T00:00:00Z")!
        let purchase = try JSONValue(parsing: #"{"type":"revenuecat.event","app":"a","event":{"id":"rc1","type":"INITIAL_PURCHASE","app_user_id":"bob","price":4.99,"period_type":"NORMAL","store":"APP_STORE","environment":"PRODUCTION","transaction_id":"T1","event_timestamp_ms":1591121855319}}"#)
        let result = try temp.ledger.submit(purchase, now: now).json
        XCTAssertEqual(result["ok"], true, result.text)
        XCTAssertEqual(result["events"][0]["at"], "2026-03-05T00:00:00Z")
        XCTAssertEqual(result["events"][0]["data"]["command"]["at"], "2026-03-05T00:00:00Z", "the filled time is recorded")
        XCTAssertEqual(try temp.ledger.progress(app: "a", program: "p", user: "alice")["qualified_count"], 1)
        XCTAssertTrue(try temp.ledger.verify().isClean)
    }

    /// SPEC §2's result shape holds for accepted commands that append nothing: their `position`
    /// is the head they were decided at (a duplicate's, its original event's).
    func testEveryAcceptedResultHasAPosition() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":null,"friend":null}}"#)
        let activated = try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        XCTAssertEqual(activated["position"], 3)
        let again = try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-02T00:00:00Z","program":"p"}"#)
        XCTAssertEqual(again["duplicate"], true)
        XCTAssertEqual(again["position"], 3)
        let unknown = try temp.submit(#"{"type":"event.track","app":"a","at":"2026-03-02T00:00:00Z","user":"nobody","name":"level_up","event_id":"e1"}"#)
        XCTAssertEqual(unknown["ok"], true, unknown.text)
        XCTAssertEqual(unknown["events"], [])
        XCTAssertEqual(unknown["position"], 3)
        // A refusal that records nothing has no position.
        let refused = try temp.submit(#"{"type":"program.pause","app":"a","at":"2026-03-02T00:00:00Z","program":"nope"}"#)
        XCTAssertEqual(refused["ok"], false)
        XCTAssertNil(refused.objectValue?["position"])
        XCTAssertEqual(try temp.ledger.currentHead().position, 3)
    }

    /// A user the app's backend vouched for (`account.verify`) is known to the app: queries answer
    /// them (nothing earned yet) instead of 404, from the projections, a fold and a rebuild alike.
    func testAUserKnownOnlyFromAccountEvidenceIsAnsweredNot404() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":null,"friend":null}}"#)
        XCTAssertThrowsError(try temp.ledger.rewards(app: "a", user: "dora")) { error in
            XCTAssertEqual((error as? QueryError)?.code, "unknown_user")
        }
        try temp.submit(#"{"type":"account.verify","app":"a","at":"2026-03-01T00:00:00Z","user":"dora","account_created_at":"2026-02-01T00:00:00Z"}"#)
        let answers = { (ledger: Ledger, asOf: UInt64?) throws -> [JSONValue] in
            [try ledger.rewards(app: "a", user: "dora", asOf: asOf), try ledger.balance(app: "a", user: "dora", asOf: asOf),
             try ledger.progress(app: "a", program: "p", user: "dora", asOf: asOf)]
        }
        let live = try answers(temp.ledger, nil)
        XCTAssertEqual(live[0]["rewards"], [])
        XCTAssertEqual(live[2]["qualified_count"], 0)
        XCTAssertEqual(try answers(temp.ledger, 2), live)
        XCTAssertThrowsError(try temp.ledger.rewards(app: "a", user: "dora", asOf: 1)) { error in
            XCTAssertEqual((error as? QueryError)?.code, "unknown_user")
        }
        XCTAssertTrue(try temp.ledger.verify().isClean)
        temp.close()
        let rebuilt = try Ledger(folder: temp.folder, rebuildingProjections: true)
        XCTAssertEqual(try answers(rebuilt, nil), live)
    }

    func testIdempotencyIsDurableAcrossReopen() throws {
        let temp = try TemporaryLedger()
        let first = try temp.submit(configure(1, id: "cfg-1"))
        try temp.reopen()
        var retried = configure(1, id: "cfg-1")
        retried["at"] = "2026-02-02T00:00:00Z"  // a retry may carry a fresh time
        let again = try temp.submit(retried)
        XCTAssertEqual(again["duplicate"], true)
        XCTAssertEqual(again["position"], first["position"])
        XCTAssertEqual(again["events"], first["events"])
        let conflict = try temp.submit(configure(2, id: "cfg-1"))
        XCTAssertEqual(conflict["error"]["code"], "idempotency_conflict")
        XCTAssertEqual(try temp.ledger.currentHead().position, 1)
        // The same id in another app is another command.
        var other = configure(1, id: "cfg-1")
        other["app"] = "globex"
        XCTAssertEqual(try temp.submit(other)["ok"], true)
    }

    /// The index keeps a result without its events (they are in the log) and splices them back:
    /// the answer to a repeated id is the first result byte for byte, plus `duplicate`, also for a
    /// command of several events and for an entry written whole by an older version.
    func testARepeatedIdAnswersTheFirstResultExactlyFromACompactEntry() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"acme","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        try temp.submit(#"{"type":"program.create","app":"acme","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"invite_accepted","reward":{"mode":"once","friends":1,"benefit":{"type":"points","amount":5}}},"friend":null,"new_users_only":false}}"#)
        try temp.submit(#"{"type":"program.activate","app":"acme","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        let code = try temp.submit(#"{"type":"invite.create","app":"acme","at":"2026-03-02T00:00:00Z","program":"p","user":"alice","id":"inv"}"#)["code"].stringValue!
        let enrol = #"{"type":"referral.enroll","app":"acme","at":"2026-03-03T00:00:00Z","program":"p","user":"bob","code":"\#(code)","id":"enr"}"#
        let first = try temp.ledger.submit(try JSONValue(parsing: enrol))
        XCTAssertGreaterThan(first.appended, 1, first.text)
        let again = try temp.ledger.submit(try JSONValue(parsing: enrol))
        XCTAssertTrue(again.isDuplicate)
        XCTAssertFalse(first.isDuplicate)
        XCTAssertEqual(again.position, first.position)
        XCTAssertEqual(first.position, try temp.ledger.currentHead().position)
        var expected = first.json
        expected["duplicate"] = true
        XCTAssertEqual(again.text, expected.text)
        let stored = try temp.ledger.environment.read { try IdempotencyIndex.entry(app: "acme", id: "enr", $0) }
        XCTAssertEqual(stored?.events?.count, first.appended)
        XCTAssertLessThan(stored?.result.count ?? .max, first.bytes.count / 2, "the entry kept the events")
        // An entry in the older, whole form still answers.
        try temp.ledger.environment.write { txn in
            try IdempotencyIndex.remember(app: "acme", id: "enr", .init(fingerprint: stored!.fingerprint, result: first.bytes), txn)
        }
        XCTAssertNil(try temp.ledger.environment.read { try IdempotencyIndex.entry(app: "acme", id: "enr", $0) }?.events)
        XCTAssertEqual(try temp.ledger.submit(try JSONValue(parsing: enrol)).text, expected.text)
    }

    /// A check added to commands later never makes a recorded event unreadable: a config an older
    /// version accepted (two addresses in one `notify` entry) still folds, while a new command
    /// with it is refused.
    func testRecordedConfigsAreReadWithTheRulesThatAcceptedThem() throws {
        let config: JSONValue = ["inviter": .null, "friend": .null, "notify": ["ops@acme.test,cto@acme.test"]]
        var state = LedgerState()
        XCTAssertNoThrow(try state.apply(type: "program.created", at: Timestamp(rfc3339: "2026-03-01T00:00:00Z")!,
                                         data: ["app": "acme", "program": "p", "environment": "live", "config": config], position: 1))
        let temp = try TemporaryLedger()
        let refused = try temp.submit(["type": "program.create", "app": "acme", "at": "2026-03-01T00:00:00Z", "program": "p",
                                       "environment": "live", "config": config])
        XCTAssertEqual(refused["error"]["code"], "invalid_command", refused.text)
        XCTAssertTrue(refused["error"]["message"].stringValue?.contains("config.notify[0]") ?? false, refused.text)
    }

    /// Times are recorded in UTC, so a retry that writes the same instant another way is the same
    /// command (SPEC §12: timestamps with an offset are converted to UTC).
    func testARetryWritingTheSameInstantDifferentlyIsADuplicate() throws {
        let temp = try TemporaryLedger()
        let first = try temp.submit(#"{"type":"account.verify","app":"acme","id":"v1","at":"2026-03-01T02:00:00+02:00","user":"bob","account_created_at":"2026-02-28T23:30:00-01:00"}"#)
        XCTAssertEqual(first["ok"], true, first.text)
        let command = first["events"].arrayValue?.first?["data"]["command"] ?? .null
        XCTAssertEqual(command["account_created_at"], "2026-03-01T00:30:00Z")
        XCTAssertEqual(command["at"], "2026-03-01T00:00:00Z")
        let again = try temp.submit(#"{"type":"account.verify","app":"acme","id":"v1","at":"2026-03-05T00:00:00Z","user":"bob","account_created_at":"2026-03-01T00:30:00.000Z"}"#)
        XCTAssertEqual(again["duplicate"], true, again.text)
        let other = try temp.submit(#"{"type":"account.verify","app":"acme","id":"v1","at":"2026-03-05T00:00:00Z","user":"bob","account_created_at":"2026-03-01T00:30:01Z"}"#)
        XCTAssertEqual(other["error"]["code"], "idempotency_conflict")
        XCTAssertTrue(try temp.ledger.verify().isClean)
    }

    func testARefusalThatRecordsNothingLeavesTheIDFree() throws {
        let temp = try TemporaryLedger()
        let refused = try temp.submit(#"{"type":"program.activate","app":"acme","program":"nope","id":"x1","at":"2026-01-01T00:00:00Z"}"#)
        XCTAssertEqual(refused["error"]["code"], "unknown_program")
        let later = try temp.submit(#"{"type":"app.configure","app":"acme","settings":{},"id":"x1","at":"2026-01-01T00:00:00Z"}"#)
        XCTAssertEqual(later["ok"], true)
        XCTAssertNil(later["duplicate"].boolValue)
    }

    func testATinyMapGrowsAndLosesNothing() throws {
        let temp = try TemporaryLedger(mapSize: 64 << 10)
        var lines: [[UInt8]] = []
        for n in 0..<3000 { lines.append(configure(n, id: "c\(n)").bytes) }
        var results: [CommandResult] = []
        for chunk in stride(from: 0, to: lines.count, by: 1000) {
            results += try temp.ledger.submit(lines: Array(lines[chunk..<min(chunk + 1000, lines.count)]))
        }
        XCTAssertEqual(results.filter(\.ok).count, 3000)
        XCTAssertEqual(try temp.ledger.currentHead().position, 3000)
        try temp.reopen()
        XCTAssertEqual(try temp.ledger.currentHead().position, 3000)
        var chain = ChainVerifier()
        for (i, v) in try temp.allValues().enumerated() { chain.check(key: UInt64(i + 1), value: v) }
        chain.checkHead(try temp.ledger.currentHead())
        XCTAssertEqual(chain.violations, [])
        XCTAssertEqual(chain.count, 3000)
    }

    /// `status` (and a query's message) look at the writer lock by holding it shared for an
    /// instant: a writer starting at that instant waits it out instead of reporting a busy folder.
    func testAWriterStartingWhileTheLockIsLookedAtStillStarts() throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-lock-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        _ = try WriterLock(folder: folder)
        let looks = LookCounter()
        let looking = DispatchGroup()
        DispatchQueue.global().async(group: looking) {
            while !looks.stopped { _ = WriterLock.isHeld(folder: folder); looks.count() }
        }
        defer { looks.stop(); looking.wait() }
        while looks.total < 100 { usleep(1000) }  // the looker is at it
        for _ in 0..<3000 { _ = try WriterLock(folder: folder) }
        XCTAssertGreaterThan(looks.total, 1000, "the lock was hardly looked at while writers started")
    }

    func testASecondWriterIsRefusedWhileTheFirstHoldsTheFolder() throws {
        let temp = try TemporaryLedger()
        XCTAssertThrowsError(try Ledger(folder: temp.folder)) { error in
            XCTAssertTrue(error is WriterLock.Busy, "\(error)")
            XCTAssertTrue("\(error)".contains("already open for writing"), "\(error)")
        }
        XCTAssertNoThrow(try Ledger(readingFolder: temp.folder).currentHead())
        // A reader refuses what only the writer does, with the ledger's own code.
        try temp.play("caps")
        let reader = try Ledger(readingFolder: temp.folder)
        let head = try reader.currentHead()
        for (what, attempt) in [("rebuild", { _ = try reader.rebuildProjections() }),
                                ("submit", { _ = try reader.submit(.configureApp(settings: [:]), app: "acme") })] as [(String, () throws -> Void)] {
            XCTAssertThrowsError(try attempt(), what) { error in
                XCTAssertEqual((error as? LedgerError)?.code, "read_only", "\(what): \(error)")
                XCTAssertTrue("\(error)".contains("Ledger(folder:)"), "says how to write: \(error)")
            }
        }
        XCTAssertFalse(try reader.saveStateSnapshot(interval: 1))
        XCTAssertEqual(try reader.currentHead(), head)
        XCTAssertEqual(try temp.ledger.status()["projections"]["state"], "current")
    }

    /// A rebuild killed after it dropped the projections (its first commit) leaves its mark: queries
    /// refuse with `projections_stale` instead of answering from empty databases, and the next
    /// writer's open rebuilds them.
    func testAnInterruptedRebuildIsNeverReadAsEmptyProjections() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let answer = try temp.ledger.progress(app: "acme", program: "capped", user: "alice")
        let status = try temp.ledger.status()
        XCTAssertEqual(status["projections"]["state"], "current")
        XCTAssertEqual(status["projections"]["checkpoint"], status["head_position"])
        XCTAssertEqual(status["entries"]["events"], status["head_position"])
        XCTAssertEqual(status["writer_running"], true)
        XCTAssertEqual(status["head_hash"].stringValue, try temp.ledger.currentHead().hash)
        try temp.leaveARebuildCutShort()
        XCTAssertThrowsError(try Ledger(readingFolder: temp.folder)) { error in
            XCTAssertEqual((error as? LedgerError)?.code, "projections_stale", "\(error)")
        }
        // The log itself still reads, and verify says what is wrong with the projections.
        do {
            let auditor = try Ledger(readingFolder: temp.folder, forQueries: false)
            let report = try auditor.verify()
            XCTAssertEqual(report.violations.map(\.rule), ["projection.checkpoint"], report.text)
            let stale = try auditor.status()
            XCTAssertEqual(stale["projections"]["state"], "rebuilding")
            XCTAssertEqual(stale["writer_running"], false)
            XCTAssertEqual(stale["entries"]["proj_programs"], 0)
            XCTAssertEqual(stale["head_position"], status["head_position"])
            XCTAssertEqual(try auditor.events(from: 1, limit: 1).events.count, 1)
        }  // released: this process opens the folder for writing next
        try temp.reopen()
        XCTAssertEqual(try Ledger(readingFolder: temp.folder).progress(app: "acme", program: "capped", user: "alice"), answer)
        XCTAssertEqual(try temp.ledger.status()["projections"], status["projections"])
        XCTAssertTrue(try temp.ledger.verify().isClean)
    }

    /// The data folder holds the apps' secrets: a new one is its owner's alone.
    func testANewLedgerIsReadableByItsOwnerOnly() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-01-01T00:00:00Z","settings":{"webhook_secret":"whsec_private_1"}}"#)
        let mode = { (path: String) in (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as! Int) & 0o777 }
        XCTAssertEqual(try mode(temp.folder), 0o700)
        XCTAssertEqual(try mode(temp.folder + "/data.mdb"), 0o600)
        XCTAssertEqual(try mode(temp.folder + "/lock.mdb"), 0o600)
    }

    func testDataFolderResolution() {
        XCTAssertEqual(LedgerFolder.resolve(flag: "/x", environment: ["REFERRAL_LEDGER_DATA": "/y"]), "/x")
        XCTAssertEqual(LedgerFolder.resolve(flag: nil, environment: ["REFERRAL_LEDGER_DATA": "/y"]), "/y")
        XCTAssertEqual(LedgerFolder.resolve(flag: nil, environment: [:]), "./ledger-data")
    }
}

/// Numbers that could overflow a sum, or times RFC 3339 cannot write, are refused up front: an
/// event the fold could not read back would make the ledger unopenable.
final class BoundsTests: XCTestCase {
    func testHugeNumbersAndTimesAreRefused() throws {
        let temp = try TemporaryLedger()
        let cases = [
            #"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"friend":{"trigger":"x","benefit":{"type":"points","amount":9223372036854775807}}}}"#,
            #"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"x","reward":{"mode":"every","friends":4611686018427387904,"benefit":{"type":"points","amount":1}}}}}"#,
            #"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"invites":{"expires_after_days":99999999}}}"#,
            #"{"type":"points.spend","app":"a","at":"2026-01-01T00:00:00Z","user":"u","amount":9223372036854775807,"reason":"r"}"#,
            #"{"type":"revenuecat.event","app":"a","event":{"id":"x","type":"RENEWAL","event_timestamp_ms":999999999999999999}}"#,
        ]
        for text in cases {
            let result = try temp.ledger.submit(lines: [Array(text.utf8)])[0].json
            XCTAssertEqual(result["error"]["code"], "invalid_command", text)
        }
        XCTAssertEqual(try temp.ledger.currentHead().position, 0)
    }
}

extension BoundsTests {
    /// IDs are bounded so that every LMDB key built from them fits (keys are at most 511 bytes):
    /// a long ID is refused alone, and the commands beside it in the batch still land.
    func testLongIDsAreRefusedWithoutFailingTheBatch() throws {
        let temp = try TemporaryLedger()
        let long = String(repeating: "u", count: 129)
        let lines = [
            #"{"type":"account.verify","app":"acme","at":"2026-01-01T00:00:00Z","user":"\#(long)","account_created_at":"2026-01-01T00:00:00Z"}"#,
            #"{"type":"account.verify","app":"\#(String(repeating: "a", count: 65))","at":"2026-01-01T00:00:00Z","user":"u","account_created_at":"2026-01-01T00:00:00Z"}"#,
            #"{"type":"account.verify","app":"acme","at":"2026-01-01T00:00:00Z","user":"\#(String(repeating: "é", count: 64))","account_created_at":"2026-01-01T00:00:00Z"}"#,
        ].map { Array($0.utf8) }
        let results = try temp.ledger.submit(lines: lines).map(\.json)
        XCTAssertEqual(results[0]["error"]["code"], "invalid_command")
        XCTAssertEqual(results[1]["error"]["code"], "invalid_command")
        XCTAssertEqual(results[2]["ok"], true)
        XCTAssertEqual(try temp.ledger.currentHead().position, 1)
    }
}

extension BoundsTests {
    /// The log stores a command a few levels inside its first event, and reads every value back
    /// with a parser bounded at 256 levels: a command nested near that bound is refused, so no
    /// accepted command leaves the log unreadable (a probe bricked a ledger with 251 levels).
    func testDeeplyNestedCommandsAreRefusedAndAcceptedOnesReadBack() throws {
        let temp = try TemporaryLedger()
        func program(_ name: String, nesting: Int) -> [UInt8] {
            let payload = String(repeating: "[", count: nesting) + String(repeating: "]", count: nesting)
            return Array(#"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"\#(name)","environment":"live","config":{"inviter":null,"friend":{"trigger":"invite_accepted","benefit":{"type":"custom","feature":"f","payload":{"x":\#(payload)}}}}}"#.utf8)
        }
        // The command object, config, friend, benefit and payload are five levels before the arrays.
        let results = try temp.ledger.submit(lines: [program("deep", nesting: 251), program("limit", nesting: Command.maximumNesting - 5),
                                                     program("over", nesting: Command.maximumNesting - 4)]).map(\.json)
        XCTAssertEqual(results[0]["error"]["code"], "invalid_command")
        XCTAssertEqual(results[1]["ok"], true, "\(results[1])")
        XCTAssertEqual(results[2]["error"]["code"], "invalid_command")
        XCTAssertTrue(results[2]["error"]["message"].stringValue!.contains("levels deep"))
        // An embedding backend's value, built without a parser, meets the same bound.
        var deep: JSONValue = "x"
        for _ in 0..<300 { deep = [deep] }  // beyond the parser's bound too
        let embedded = try temp.ledger.submit(["type": "program.create", "app": "a", "at": "2026-01-01T00:00:00Z", "program": "built",
                                                "environment": "live", "config": ["friend": ["trigger": "t", "benefit": ["type": "custom", "feature": "f", "payload": ["x": deep]]]]])
        XCTAssertEqual(embedded.json["error"]["code"], "invalid_command")
        // What was accepted reads back: the ledger reopens, takes more commands and verifies.
        try temp.reopen()
        XCTAssertEqual(try temp.ledger.submit(lines: [program("after", nesting: 3)])[0].json["ok"], true)
        XCTAssertTrue(try temp.ledger.verify().isClean)
    }

    /// Identifiers are compared by the standard library's canonical equivalence, so only its NFC
    /// spelling is taken: Foundation's normalizer leaves combining marks new in Unicode 16
    /// (U+0897) unordered, and two spellings it passed were one user to the rules and two to LMDB.
    func testIdentifiersMustBeInTheStandardLibrarysNFC() throws {
        let temp = try TemporaryLedger()
        let ordered = "q\u{0316}\u{0897}", unordered = "q\u{0897}\u{0316}"
        XCTAssertEqual(ordered, unordered, "Swift compares the two spellings as one string")
        let results = try [ordered, unordered].map { user in
            try temp.ledger.submit(["type": "account.verify", "app": "a", "at": "2026-01-01T00:00:00Z", "user": .string(user),
                                    "account_created_at": "2026-01-01T00:00:00Z"]).json
        }
        XCTAssertEqual(results[0]["ok"], true)
        XCTAssertEqual(results[1]["error"]["code"], "invalid_command")
        XCTAssertThrowsError(try temp.ledger.balance(app: "a", user: unordered)) { error in
            XCTAssertTrue("\(error)".contains("normalization form C"), "\(error)")
        }
    }

    /// A batch is decided in order, then its events are written as JSON on every core and chained
    /// in order: one batch of many commands (ids repeated and reused inside it, refusals, rewards)
    /// gives the same results and the same log, byte for byte, as the same commands one at a time.
    /// What a fold reads of each event of real histories (every fixture) is the whole event
    /// without the command it records, and a value that is not an event is refused as before.
    func testAFoldReadsEveryEventWithoutItsCommand() throws {
        var values: [[UInt8]] = []
        for name in FixtureRunner.all {
            let ledger = try TemporaryLedger()
            try ledger.play(name)
            values += try ledger.allValues()
        }
        XCTAssertGreaterThan(values.count, 500)
        var withCommand = 0
        for bytes in values {
            let whole = try StoredEvent(bytes: bytes), folded = try FoldEvent(bytes: bytes)
            var data = whole.data.objectValue!
            if data["command"] != nil { withCommand += 1 }
            data["command"] = nil
            XCTAssertEqual(folded.data, .object(data))
            XCTAssertEqual(folded.position, whole.position)
            XCTAssertEqual(folded.at, whole.at)
            XCTAssertEqual(folded.type, whole.type)
        }
        XCTAssertGreaterThan(withCommand, 100)
        for bad in [#"{"at":"2026-01-01T00:00:00Z","data":{"command":{}}}"#, #"{"data":{"command":[}}"#, "[]"] {
            XCTAssertThrowsError(try FoldEvent(bytes: Array(bad.utf8)), bad)
        }
    }

    func testABatchDecidesAndChainsExactlyAsCommandsOneByOne() throws {
        let now = Timestamp(rfc3339: "2026-05-01T00:00:00Z")!
        let setup = try TemporaryLedger()
        try setup.submit(#"{"type":"app.configure","app":"acme","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        try setup.submit(#"{"type":"program.create","app":"acme","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"level_up","reward":{"mode":"every","friends":2,"max_rewards":null,"benefit":{"type":"points","amount":5}}},"friend":{"trigger":"invite_accepted","benefit":{"type":"points","amount":1}},"new_users_only":false}}"#)
        try setup.submit(#"{"type":"program.activate","app":"acme","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        let codes = try (0..<20).map { n in
            try setup.submit(#"{"type":"invite.create","app":"acme","at":"2026-03-02T00:00:00Z","program":"p","user":"inviter-\#(n)"}"#)["code"].stringValue!
        }
        setup.close()
        var lines: [String] = []
        for n in 0..<150 {
            lines.append(#"{"type":"referral.enroll","app":"acme","at":"2026-03-03T00:00:00Z","program":"p","user":"friend-\#(n)","code":"\#(codes[n % 20])","id":"e\#(n)"}"#)
            lines.append(#"{"type":"event.track","app":"acme","at":"2026-03-04T00:00:00Z","user":"friend-\#(n)","name":"level_up","event_id":"t\#(n)","id":"t\#(n)"}"#)
            if n % 10 == 3 { lines.append(lines[lines.count - 2]) }  // an exact retry, in the batch
            if n % 10 == 5 {  // the id of an earlier command of the batch, for another command
                lines.append(#"{"type":"event.track","app":"acme","at":"2026-03-04T00:00:00Z","user":"friend-\#(n)","name":"other","event_id":"x\#(n)","id":"e\#(n)"}"#)
            }
            if n % 10 == 7 { lines.append(#"{"type":"referral.enroll","app":"acme","at":"2026-03-03T00:00:00Z","program":"p","user":"friend-\#(n)","code":"NOPE99","id":"bad\#(n)"}"#) }
        }
        lines.append("not json")
        func copy(_ name: String) throws -> String {
            let folder = NSTemporaryDirectory() + "referral-ledger-test-" + name + "-" + UUID().uuidString
            try FileManager.default.copyItem(atPath: setup.folder, toPath: folder)
            return folder
        }
        let batchFolder = try copy("batch"), singleFolder = try copy("single")
        defer { for f in [batchFolder, singleFolder] { try? FileManager.default.removeItem(atPath: f) } }
        let batched = try Ledger(folder: batchFolder)
        let batchResults = try batched.submit(lines: lines.map { Array($0.utf8) }, now: now)
        let single = try Ledger(folder: singleFolder)
        let singleResults = try lines.map { try single.submit(lines: [Array($0.utf8)], now: now)[0] }
        XCTAssertEqual(batchResults.map(\.text), singleResults.map(\.text))
        XCTAssertEqual(batchResults.filter(\.isDuplicate).count, 15)
        XCTAssertEqual(batchResults.filter { $0.errorCode == "idempotency_conflict" }.count, 15)
        XCTAssertGreaterThan(try batched.currentHead().position, 600)  // the events are written on every core
        func values(_ ledger: Ledger) throws -> [[UInt8]] {
            var all: [[UInt8]] = [], from: UInt64? = 1
            while let start = from { let (page, next) = try ledger.events(from: start); all += page; from = next }
            return all
        }
        XCTAssertEqual(try values(batched), try values(single))
        XCTAssertEqual(try batched.currentHead(), try single.currentHead())
        XCTAssertTrue(try batched.verify().isClean)
        // And a retry in a later batch answers what the batch answered.
        let retry = try batched.submit(lines: [Array(lines[0].utf8)], now: now)[0]
        var expected = batchResults[0].json
        expected["duplicate"] = true
        XCTAssertEqual(retry.text, expected.text)
    }
}

/// How often a thread looked, and whether it should stop.
final class LookCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var looks = 0
    private var done = false
    func count() { lock.withLock { looks += 1 } }
    func stop() { lock.withLock { done = true } }
    var total: Int { lock.withLock { looks } }
    var stopped: Bool { lock.withLock { done } }
}
