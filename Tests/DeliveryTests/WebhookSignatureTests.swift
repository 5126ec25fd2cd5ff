import Delivery
import LedgerCodec
import XCTest

/// The receiver-side check documented for webhook receivers.
final class WebhookSignatureTests: XCTestCase {
    let body = Array(#"{"app":"acme","attempt":1,"reward_id":"rw_1"}"#.utf8)

    func testTheHeaderIsTheHMACOfTimestampDotBody() {
        let header = WebhookSignature.header(secret: "s3cret", unixSeconds: 1_767_225_600, body: body)
        let expected = SHA256.hmacHex(key: Array("s3cret".utf8), message: Array("1767225600.".utf8) + body)
        XCTAssertEqual(header, "t=1767225600,v1=" + expected)
    }

    func testVerifyAcceptsAFreshSignatureAndRejectsTamperingOldTimesAndOtherSecrets() {
        let t: Int64 = 1_767_225_600
        let header = WebhookSignature.header(secret: "s3cret", unixSeconds: t, body: body)
        XCTAssertTrue(WebhookSignature.verify(header: header, body: body, secret: "s3cret", now: t + 299))
        XCTAssertTrue(WebhookSignature.verify(header: header, body: body, secret: "s3cret", now: t - 299))
        XCTAssertFalse(WebhookSignature.verify(header: header, body: body, secret: "s3cret", now: t + 301), "replayed too late")
        XCTAssertFalse(WebhookSignature.verify(header: header, body: body + [0x20], secret: "s3cret", now: t), "body changed")
        XCTAssertFalse(WebhookSignature.verify(header: header, body: body, secret: "other", now: t), "other secret")
        XCTAssertFalse(WebhookSignature.verify(header: "t=\(t + 1),v1=" + header.split(separator: "=").last!, body: body, secret: "s3cret", now: t),
                       "t changed")
        XCTAssertFalse(WebhookSignature.verify(header: "v1=abc", body: body, secret: "s3cret", now: t))
    }
}
