import Delivery
import Foundation
import LedgerCodec
import XCTest

extension DeliveryFixture {
    /// A worker on this ledger with the test's clock, a short poll and a log on stdout.
    func worker(clock: TestClock, timeout: Double = 5, mailCommand: String? = nil, mailTimeout: Double = 10) -> DeliveryWorker {
        DeliveryWorker(ledger: ledger, configuration: DeliveryConfiguration(
            requestTimeout: timeout, maxInFlight: 4, pollInterval: 0.1, mailCommand: mailCommand, mailTimeout: mailTimeout,
            clock: clock.now, log: { print("[worker] \($0)") }))
    }
}

/// Checks the webhook signature the way a receiver must: HMAC-SHA256 of `"{t}.{body}"` under
/// the secret, computed here from the raw body, and `t` close to `near`.
func assertSigned(_ call: Receiver.Call, secret: String = DeliveryFixture.secret, near: Timestamp,
                  file: StaticString = #filePath, line: UInt = #line) {
    guard let header = call.header("X-Referral-Signature") else {
        XCTFail("no X-Referral-Signature header", file: file, line: line)
        return
    }
    var fields: [String: String] = [:]
    for part in header.split(separator: ",") {
        let kv = part.split(separator: "=", maxSplits: 1)
        if kv.count == 2 { fields[String(kv[0])] = String(kv[1]) }
    }
    guard let tText = fields["t"], let t = Int64(tText), let v1 = fields["v1"] else {
        XCTFail("signature header is not t=…,v1=…: \(header)", file: file, line: line)
        return
    }
    let expected = SHA256.hmacHex(key: Array(secret.utf8), message: Array("\(t).".utf8) + call.body)
    XCTAssertEqual(v1, expected, "v1 is not the HMAC of t.body", file: file, line: line)
    XCTAssertEqual(v1.count, 64, file: file, line: line)
    XCTAssertLessThanOrEqual(abs(t - near.unixSeconds), 60, "t=\(t) is not the worker's clock (\(near.unixSeconds))", file: file, line: line)
}

/// The call's body as JSON.
func bodyJSON(_ call: Receiver.Call, file: StaticString = #filePath, line: UInt = #line) -> JSONValue {
    do { return try JSONValue(parsing: call.body) } catch {
        XCTFail("body is not JSON: \(String(decoding: call.body, as: UTF8.self))", file: file, line: line)
        return .null
    }
}
