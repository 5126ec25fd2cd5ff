import LedgerCodec
import LedgerServer
import XCTest

/// `POST /v1/commands` (SPEC §2, §10): results and their statuses, batches, malformed bodies.
final class CommandRouteTests: XCTestCase {
    func testAnOkCommandAnswers200WithItsResultAfterItsCommit() throws {
        let f = try ServerFixture()
        let reply = try f.post(Commands.verify("u1", id: "c-1"))
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.json["ok"], true)
        XCTAssertEqual(reply.json["position"], 1)
        XCTAssertEqual(reply.json["events"].arrayValue?.first?["type"], "account.verified")
        XCTAssertEqual(reply.json["events"].arrayValue?.first?["command_id"], "c-1")
        XCTAssertEqual(f.head, 1, "answered only once durable")
    }

    func testADuplicateAnswers200WithTheFirstResultMarkedDuplicate() throws {
        let f = try ServerFixture()
        let first = try f.post(Commands.verify("u1", id: "dup-1"))
        let again = try f.post(Commands.verify("u1", id: "dup-1"))
        XCTAssertEqual(again.status, 200, again.text)
        XCTAssertEqual(again.json["duplicate"], true)
        XCTAssertEqual(again.json["position"], first.json["position"])
        XCTAssertEqual(f.head, 1)
    }

    func testABusinessRejectionIs409WithTheWholeResult() throws {
        let f = try ServerFixture()
        XCTAssertEqual(try f.post(Commands.verify("u1", id: "same-id")).status, 200)
        // The same id with another command: idempotency_conflict.
        let conflict = try f.post(Commands.verify("u2", id: "same-id"))
        XCTAssertEqual(conflict.status, 409, conflict.text)
        XCTAssertEqual(conflict.json["ok"], false)
        XCTAssertEqual(conflict.json["error"]["code"], "idempotency_conflict")
        // An enrolment with an unknown code is recorded (audit evidence) and answered 409 with its position.
        let owner = ServerFixture.ownerKey
        for command in [Commands.configure(["friend_referrals_enabled": true]), Commands.createPointsProgram(), Commands.activate()] {
            XCTAssertEqual(try f.post(command, key: owner).status, 200)
        }
        let head = f.head
        let refused = try f.post(Commands.enroll("bob", code: "NOSUCHCODE"))
        XCTAssertEqual(refused.status, 409, refused.text)
        XCTAssertEqual(refused.json["ok"], false)
        XCTAssertEqual(refused.json["error"]["code"], "invalid_code")
        XCTAssertNotNil(refused.json["events"].arrayValue, "the body is the command's whole result")
        XCTAssertEqual(refused.json["position"].intValue.map(UInt64.init), f.head)
        XCTAssertGreaterThan(f.head, head)
    }

    func testAMalformedCommandIs400InvalidCommandAndRecordsNothing() throws {
        let f = try ServerFixture()
        let missing = try f.post(["type": "account.verify", "app": "acme"])
        XCTAssertEqual(missing.status, 400, missing.text)
        XCTAssertEqual(missing.errorCode, "invalid_command")
        XCTAssertEqual(missing.json["ok"], .null, "the body is {\"error\": …}")
        let unknownField = try f.post(["type": "account.verify", "app": "acme", "user": "u", "account_created_at": "2026-01-01T00:00:00Z", "extra": 1])
        XCTAssertEqual(unknownField.status, 400)
        XCTAssertEqual(unknownField.errorCode, "invalid_command")
        XCTAssertEqual(f.head, 0)
    }

    func testBodiesThatAreNotJSONOrNotCommandsAre400() throws {
        let f = try ServerFixture()
        for text in ["{not json", "", "42", "\"account.verify\"", "null"] {
            let reply = try f.post(text: text)
            XCTAssertEqual(reply.status, 400, "\(text): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "invalid_command", text)
        }
        let empty = try f.post(text: "[]")
        XCTAssertEqual(empty.status, 400)
        XCTAssertEqual(empty.errorCode, "invalid_command")
        XCTAssertTrue(empty.json["error"]["message"].stringValue?.contains("empty") == true, empty.text)
        let tooMany = try f.post(.array(Array(repeating: Commands.verify("u"), count: LedgerAPI.maxBatchCommands + 1)))
        XCTAssertEqual(tooMany.status, 400)
        XCTAssertEqual(f.head, 0)
    }

    func testABatchAnswers200WithOneResultPerCommandInOrder() throws {
        let f = try ServerFixture()
        XCTAssertEqual(try f.post(Commands.verify("u0", id: "x-0")).status, 200)
        let batch: JSONValue = [Commands.verify("u1", id: "x-1"), ["type": "account.verify", "app": "acme"], 17,
                                Commands.verify("u0", id: "x-0"), Commands.verify("u2", id: "x-0"), Commands.verify("u3")]
        let reply = try f.post(batch)
        XCTAssertEqual(reply.status, 200, reply.text)
        let results = try XCTUnwrap(reply.json.arrayValue)
        XCTAssertEqual(results.count, 6)
        XCTAssertEqual(results[0]["ok"], true)
        XCTAssertEqual(results[0]["position"], 2)
        XCTAssertEqual(results[1]["error"]["code"], "invalid_command")
        XCTAssertEqual(results[2]["error"]["code"], "invalid_command")
        XCTAssertEqual(results[3]["duplicate"], true)
        XCTAssertEqual(results[4]["error"]["code"], "idempotency_conflict")
        XCTAssertEqual(results[5]["position"], 3)
        XCTAssertEqual(f.head, 3)
    }

    /// A body that is not JSON is malformed (400 `invalid_command`) whatever its declared type;
    /// a JSON body is taken whatever its type (`curl -d` sends form encoding).
    func testABodyThatIsNotJSONIs400WhateverItsType() throws {
        let f = try ServerFixture()
        for type in ["text/plain", "application/x-www-form-urlencoded", "application/xml", "application/json"] {
            let reply = try f.post(text: "<verify user='u1'/>", contentType: type)
            XCTAssertEqual(reply.status, 400, type)
            XCTAssertEqual(reply.errorCode, "invalid_command")
        }
        XCTAssertEqual(f.head, 0)
        for (n, type) in (["application/json; charset=utf-8", "Application/JSON", "application/vnd.acme+json", nil,
                           "application/x-www-form-urlencoded", "text/plain"] as [String?]).enumerated() {
            let reply = try f.post(text: Commands.verify("u\(n)").text, contentType: type)
            XCTAssertEqual(reply.status, 200, "\(type ?? "none"): \(reply.text)")
        }
        XCTAssertEqual(f.head, 6)
    }

    func testABodyOverTheLimitIs413AndDecidesNothing() throws {
        let f = try ServerFixture(maxBodyBytes: 2048)
        let big: JSONValue = .array((0..<40).map { Commands.verify("user-\($0)", id: "big-\($0)") })
        XCTAssertGreaterThan(big.bytes.count, 2048)
        let reply = try f.post(big)
        XCTAssertEqual(reply.status, 413, reply.text)
        XCTAssertEqual(reply.errorCode, "body_too_large")
        XCTAssertEqual(f.head, 0)
        XCTAssertEqual(try f.post(Commands.verify("small")).status, 200, "a body within the limit still goes")
    }

    func testAfterShutdownNothingMoreIsAccepted() throws {
        let f = try ServerFixture()
        XCTAssertEqual(try f.post(Commands.verify("u1")).status, 200)
        f.stop()
        XCTAssertThrowsError(try f.post(Commands.verify("u2")))
        XCTAssertEqual(f.head, 1)
    }
}
