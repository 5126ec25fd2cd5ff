import LedgerCodec
import LedgerServer
import XCTest

/// `POST /v1/apps/{app}/revenuecat` (SPEC §6, §10): RevenueCat's own body, authorised by the
/// app's `revenuecat_webhook_auth` setting, never by an API key.
final class RevenueCatWebhookTests: XCTestCase {
    static let secret = "Bearer rc-webhook-secret-42"

    /// An app with the webhook secret, a program, and bob enrolled as a friend (so purchases are stored).
    func makeApp(_ f: ServerFixture) throws {
        let owner = ServerFixture.ownerKey
        for command in [Commands.configure(["friend_referrals_enabled": true, "revenuecat_webhook_auth": .string(Self.secret)]),
                        Commands.createPointsProgram(), Commands.activate()] {
            XCTAssertEqual(try f.post(command, key: owner).status, 200)
        }
        let code = try XCTUnwrap(try f.post(Commands.invite("alice")).json["code"].stringValue)
        XCTAssertEqual(try f.post(Commands.enroll("bob", code: code)).status, 200)
    }

    static func body(id: String = "rc-evt-1", user: String = "bob") -> [UInt8] {
        let value: JSONValue = [
            "api_version": "1.0",
            "event": ["id": .string(id), "type": "INITIAL_PURCHASE", "app_user_id": .string(user), "aliases": [.string(user)],
                      "price": 4.99, "currency": "USD", "period_type": "NORMAL", "store": "APP_STORE", "environment": "PRODUCTION",
                      "transaction_id": "T-1", "original_transaction_id": "T-1", "product_id": "pro_monthly",
                      "event_timestamp_ms": 1_772_582_400_000, "some_new_field": ["nested": true]],
        ]
        return value.bytes
    }

    func hook(_ f: ServerFixture, app: String = "acme", auth: String?, body: [UInt8] = body()) throws -> Reply {
        try f.call("POST", "/v1/apps/\(app)/revenuecat", headers: auth.map { [("Authorization", $0)] } ?? [], body: body)
    }

    func testGoodAuthRecordsThePurchaseAndADuplicateIsStill200() throws {
        let f = try ServerFixture()
        try makeApp(f)
        let head = f.head
        let first = try hook(f, auth: Self.secret)
        XCTAssertEqual(first.status, 200, first.text)
        XCTAssertEqual(first.json["ok"], true)
        XCTAssertEqual(first.json["stored"], true)
        let event = try XCTUnwrap(first.json["events"].arrayValue?.first)
        XCTAssertEqual(event["type"], "event.tracked")
        XCTAssertEqual(event["data"]["name"], "paid_purchase")
        XCTAssertEqual(event["at"], "2026-03-04T00:00:00Z", "`at` comes from event_timestamp_ms")
        XCTAssertEqual(event["data"]["revenuecat_event"]["some_new_field"], ["nested": true], "the event is kept as sent")
        XCTAssertGreaterThan(f.head, head)

        let headAfter = f.head
        let again = try hook(f, auth: Self.secret)
        XCTAssertEqual(again.status, 200, again.text)
        XCTAssertEqual(again.json["duplicate"], true)
        XCTAssertEqual(f.head, headAfter, "a retry appends nothing")
    }

    func testWrongOrMissingAuthIs401AndDecidesNothing() throws {
        let f = try ServerFixture()
        try makeApp(f)
        let head = f.head
        for auth in [nil, "", "Bearer rc-webhook-secret-4", "bearer rc-webhook-secret-42",
                     "Bearer \(ServerFixture.ownerKey)"] as [String?] {
            let reply = try hook(f, auth: auth)
            XCTAssertEqual(reply.status, 401, "\(auth ?? "none"): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "unauthorized")
        }
        XCTAssertEqual(f.head, head)
    }

    func testSpacesAroundTheHeaderValueAreNotPartOfItButSpacesInsideAre() throws {
        let f = try ServerFixture()
        try makeApp(f)
        for auth in [Self.secret + " ", "\t" + Self.secret + " \t"] {
            XCTAssertEqual(try hook(f, auth: auth).status, 200, "RFC 9110 §5.5: \(auth.debugDescription) is the setting's value")
        }
        let head = f.head
        for auth in [Self.secret.replacingOccurrences(of: " ", with: "  "), Self.secret + "x", Self.secret.replacingOccurrences(of: " ", with: "\t")] {
            XCTAssertEqual(try hook(f, auth: auth).status, 401, auth.debugDescription)
        }
        XCTAssertEqual(f.head, head)
    }

    func testUnknownAppOrAppWithoutSecretIs401() throws {
        let f = try ServerFixture()
        try makeApp(f)
        XCTAssertEqual(try f.post(Commands.configure([:], app: "plain"), key: ServerFixture.ownerKey).status, 200)
        let head = f.head
        XCTAssertEqual(try hook(f, app: "nope", auth: Self.secret).status, 401)
        XCTAssertEqual(try hook(f, app: "plain", auth: Self.secret).status, 401)
        XCTAssertEqual(try hook(f, app: "plain", auth: "").status, 401)
        XCTAssertEqual(f.head, head)
    }

    func testAMalformedBodyIs400() throws {
        let f = try ServerFixture()
        try makeApp(f)
        let head = f.head
        for text in ["{oops", "[]", #"{"api_version":"1.0"}"#, #"{"event": 5}"#, #"{"event": {"type": "INITIAL_PURCHASE"}}"#] {
            let reply = try hook(f, auth: Self.secret, body: Array(text.utf8))
            XCTAssertEqual(reply.status, 400, "\(text): \(reply.text)")
            XCTAssertEqual(reply.errorCode, "invalid_command", text)
        }
        // A body that is not JSON is malformed whatever its type (a JSON body is taken whatever its type).
        let wrongType = try f.call("POST", "/v1/apps/acme/revenuecat", headers: [("Authorization", Self.secret), ("Content-Type", "text/plain")],
                                   body: Array("event=INITIAL_PURCHASE".utf8))
        XCTAssertEqual(wrongType.status, 400)
        XCTAssertEqual(wrongType.errorCode, "invalid_command")
        XCTAssertEqual(f.head, head)
    }

    func testEventsOfUsersNotEnrolledAreAcknowledged() throws {
        let f = try ServerFixture()
        try makeApp(f)
        let head = f.head
        let reply = try hook(f, auth: Self.secret, body: Self.body(id: "rc-evt-2", user: "stranger"))
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.json["stored"], false)
        XCTAssertEqual(f.head, head)
    }
}
