import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// Secret settings never enter the log: it records their SHA-256; the secrets store keeps them.
final class SecretTests: XCTestCase {
    func testSecretsAreKeptOutOfTheLogAndStillServeDelivery() throws {
        let temp = try TemporaryLedger()
        let result = try temp.submit(#"{"type":"app.configure","app":"acme","at":"2026-01-01T00:00:00Z","settings":{"webhook_url":"https://hooks.acme.test/r","webhook_secret":"s3cr3t-value","revenuecat_webhook_auth":"Bearer rc-hook-token"}}"#)
        XCTAssertEqual(result["ok"], true)
        let log = try temp.allValues().map { String(decoding: $0, as: UTF8.self) }.joined()
        XCTAssertFalse(log.contains("s3cr3t-value"), "a secret is in the event log")
        XCTAssertFalse(log.contains("rc-hook-token"), "a secret is in the event log")
        XCTAssertTrue(log.contains(SHA256.hex("s3cr3t-value")))
        XCTAssertFalse(result.text.contains("s3cr3t-value"), "a secret is in the command's result")

        let settings = try temp.ledger.appSettings("acme")
        XCTAssertEqual(settings.webhookSecret, "s3cr3t-value")
        XCTAssertEqual(settings.revenueCatWebhookAuth, "Bearer rc-hook-token")
        let audit = try temp.ledger.audit(app: "acme").text
        XCTAssertFalse(audit.contains("s3cr3t-value"))

        // The history still verifies (re-deciding the recorded command gives the same digest), the
        // secrets survive a rebuild and a reopen, and clearing one removes it.
        XCTAssertTrue(try temp.ledger.verify().isClean)
        XCTAssertTrue(try Ledger.verify(exportLines: try temp.allValues()).isClean)
        _ = try temp.ledger.rebuildProjections()
        try temp.reopen()
        XCTAssertEqual(try temp.ledger.appSettings("acme").webhookSecret, "s3cr3t-value")
        try temp.submit(#"{"type":"app.configure","app":"acme","at":"2026-01-02T00:00:00Z","settings":{"webhook_secret":null}}"#)
        XCTAssertNil(try temp.ledger.appSettings("acme").webhookSecret)
        XCTAssertEqual(try temp.ledger.appSettings("acme").revenueCatWebhookAuth, "Bearer rc-hook-token")
        // An empty secret is refused (it would read as none); nothing is recorded.
        let head = try temp.ledger.currentHead()
        let empty = try temp.submit(#"{"type":"app.configure","app":"acme","at":"2026-01-03T00:00:00Z","settings":{"revenuecat_webhook_auth":""}}"#)
        XCTAssertEqual(empty["error"]["code"], "invalid_command", empty.text)
        XCTAssertEqual(try temp.ledger.currentHead(), head)
        XCTAssertEqual(try temp.ledger.appSettings("acme").revenueCatWebhookAuth, "Bearer rc-hook-token")
    }
}
