@testable import Delivery
import LedgerCodec
@testable import ReferralLedger
@testable import ReferralRules
import XCTest

/// The pieces the worker builds: paths, mail headers, error texts.
final class MessageBuildingTests: XCTestCase {
    func testUserIDsStayInOnePathSegment() {
        XCTAssertEqual(CallBuilder.percentEncoded("bob"), "bob")
        XCTAssertEqual(CallBuilder.percentEncoded("a/b?c#d e"), "a%2Fb%3Fc%23d%20e")
        XCTAssertEqual(CallBuilder.percentEncoded("$RCAnonymousID:1f"), "%24RCAnonymousID%3A1f")
        XCTAssertEqual(CallBuilder.percentEncoded(".."), "%2E%2E")
        XCTAssertEqual(CallBuilder.percentEncoded("john.doe_1~x-y"), "john.doe_1~x-y")
    }

    func testMailHeadersCannotBeInjectedFromLedgerText() {
        let n = PendingNotification(position: 7, app: "acme", program: "spring", kind: "delivery_failed", rewardID: "rw_1",
                                    recipients: ["owner@example.com\nBcc: evil@example.com"],
                                    subject: "Delivery failed: HTTP 500\r\nBcc: evil@example.com", at: Timestamp(seconds: 0))
        let text = String(decoding: MailMessage.compose(n), as: UTF8.self)
        let headers = text.components(separatedBy: "\n\n")[0].split(separator: "\n")
        XCTAssertEqual(headers.filter { $0.hasPrefix("Bcc:") }, [])
        XCTAssertTrue(headers[0].hasPrefix("To: owner@example.com Bcc: evil@example.com"))
        XCTAssertTrue(text.contains("Kind:         delivery_failed"))
    }

    func testNonASCIISubjectsAreEncoded() {
        XCTAssertEqual(MailMessage.encodedHeader("plain"), "plain")
        XCTAssertEqual(MailMessage.encodedHeader("Prämie"), "=?UTF-8?B?UHLDpG1pZQ==?=")
        // Long text: encoded words of at most 75 characters on folded lines, decoding to the text.
        let long = String(repeating: "Prämie für Zoë ", count: 20)
        let folded = MailMessage.encodedHeader(long).components(separatedBy: "\n ")
        XCTAssertGreaterThan(folded.count, 1)
        XCTAssertTrue(folded.allSatisfy { $0.count <= 75 && $0.hasPrefix("=?UTF-8?B?") && $0.hasSuffix("?=") }, "\(folded)")
        let decoded = folded.map { Data(base64Encoded: String($0.dropFirst(10).dropLast(2)))! }.reduce(Data(), +)
        XCTAssertEqual(String(decoding: decoded, as: UTF8.self), long)
        // As a header: no line over 76 characters, the first one holding "Subject: " too (RFC 2047 §2).
        let header = "Subject: " + MailMessage.encodedHeader(long, after: "Subject: ".count)
        let lines = header.components(separatedBy: "\n")
        XCTAssertGreaterThan(lines.count, 1)
        XCTAssertTrue(lines.allSatisfy { $0.count <= 76 }, "\(lines.map(\.count))")
        let words = lines.map { $0.hasPrefix("Subject: ") ? String($0.dropFirst(9)) : String($0.dropFirst()) }
        XCTAssertEqual(String(decoding: words.map { Data(base64Encoded: String($0.dropFirst(10).dropLast(2)))! }.reduce(Data(), +), as: UTF8.self), long)
    }

    func testAnswerTexts() {
        typealias A = DeliveryHTTPClient.Answer
        XCTAssertEqual(DeliveryHTTPClient.outcome(A(status: 204), timeout: 10), .fulfilled)
        XCTAssertEqual(DeliveryHTTPClient.outcome(A(status: 500, body: Array("oops\nline two".utf8)), timeout: 10), .failed("HTTP 500: oops line two"))
        XCTAssertEqual(DeliveryHTTPClient.outcome(A(status: 404), timeout: 10), .failed("HTTP 404"))
        XCTAssertEqual(DeliveryHTTPClient.outcome(A(status: 301), timeout: 10),
                       .failed("HTTP 301 (redirects are not followed: set the app's webhook_url or revenuecat_api_base to the final address)"))
    }

    func testBenefitsTheWorkerDoesNotDeliverAreRefusedWithAReason() {
        let job = DeliveryJob(app: "acme", program: "p", programVersion: 1, rewardID: "rw", side: "friend", user: "u",
                              benefit: ["type": "apple_offer_code", "offer_id": "o"], attempt: 1, simulated: false, retryAt: nil,
                              status: "ready", webhookURL: nil, webhookSecret: nil, revenueCatAPIBase: "https://api.revenuecat.com",
                              revenueCatAPIKey: nil)
        guard case .failure(let e) = CallBuilder.call(for: job, at: Timestamp(seconds: 0), userAgent: "t") else {
            return XCTFail("an offer-code benefit has no call")
        }
        XCTAssertTrue(e.message.contains("apple_offer_code"))
    }
}

/// Secrets are kept out of recorded error text in every form an answer may quote them.
final class RedactionTests: XCTestCase {
    func testASecretIsRedactedAsSentEscapedAndOnOneLine() {
        let secret = "s3cr\"et\\with\ttab"
        let quoted = "raw \(secret) json \(String(JSONValue.string(secret).text.dropFirst().dropLast())) line s3cr\"et\\with tab"
        XCTAssertEqual(Redaction.redact(quoted, secrets: [secret]), "raw [secret] json [secret] line [secret]")
        XCTAssertEqual(Redaction.redact("a key abc", secrets: ["abc"]), "a key abc", "short secrets would match ordinary words")
    }
}
