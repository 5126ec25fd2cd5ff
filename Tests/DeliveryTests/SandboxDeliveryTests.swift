import Delivery
import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// Sandbox programs never call outside: the delivery is simulated and marked so.
final class SandboxDeliveryTests: XCTestCase {
    func testASandboxRewardIsFulfilledWithoutAnyCall() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: receiver.hookURL,
                                  extra: ["revenuecat_api_base": .string(receiver.base), "revenuecat_api_key": "sk_rc"])
        try f.createProgram("acme", "trial", environment: "sandbox")
        try f.createProgram("acme", "trial-rc", environment: "sandbox", benefit: RevenueCatDeliveryTests.benefit)
        _ = try f.enroll("acme", "trial", friend: "bob")
        _ = try f.enroll("acme", "trial-rc", friend: "carol")
        XCTAssertEqual(try f.reward("acme", "bob")["simulated"].boolValue, true)

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.delivered, 2)
        XCTAssertEqual(summary.simulated, 2)
        XCTAssertEqual(receiver.count, 0, "no outside call for sandbox programs")
        for user in ["bob", "carol"] {
            let reward = try f.reward("acme", user)
            XCTAssertEqual(reward["status"].stringValue, "fulfilled")
            XCTAssertEqual(reward["simulated"].boolValue, true)
            XCTAssertEqual(reward["deliveries"].arrayValue?.first?["outcome"].stringValue, "succeeded")
        }
        let succeeded = try f.events("delivery.succeeded")
        XCTAssertEqual(succeeded.map { $0["data"]["simulated"].boolValue }, [true, true])
    }

    /// A worker that stopped between recording a sandbox delivery's start and its outcome: nothing
    /// was called, so the next run records it done (simulated); a failure could not be recorded.
    func testAnInterruptedSandboxDeliveryIsRecordedDone() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        try f.configureWebhookApp("acme", url: receiver.hookURL)
        try f.createProgram("acme", "trial", environment: "sandbox")
        _ = try f.enroll("acme", "trial", friend: "bob")
        let rid = try XCTUnwrap(try f.reward("acme", "bob")["reward_id"].stringValue)
        try f.submit(["type": "delivery.started", "app": "acme", "reward_id": .string(rid), "attempt": 1])
        let refused = try f.ledger.submit(["type": "delivery.failed", "app": "acme", "reward_id": .string(rid), "attempt": 1, "error": "HTTP 500"])
        XCTAssertEqual(refused.rejection, .invalidTransition)

        let summary = await f.worker(clock: TestClock()).runOnce()

        XCTAssertEqual(summary.interrupted, 1)
        XCTAssertEqual(summary.simulated, 1)
        XCTAssertEqual(receiver.count, 0)
        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "fulfilled")
        XCTAssertEqual(reward["deliveries"].arrayValue?.map { $0["outcome"].stringValue ?? "" }, ["succeeded"])
    }
}
