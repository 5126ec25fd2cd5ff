import Delivery
import Foundation
import HTTPServer
import LedgerCodec
import ReferralLedger
import XCTest

/// Five failed attempts end a round; the owner's `reward.retry` starts a new one.
final class RetryRoundTests: XCTestCase {
    func testFiveFailuresFailTheRewardAndNotifyThenAnOwnerRetryDelivers() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        receiver.answer(500, "nope")
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: receiver.hookURL)
        try f.createProgram("acme", "spring", notify: ["owner@example.com"])
        let rid = try f.enroll("acme", "spring", friend: "bob")
        let worker = f.worker(clock: clock)

        for attempt in 1...5 {
            let summary = await worker.runOnce()
            XCTAssertEqual(summary.failed, 1, "attempt \(attempt)")
            XCTAssertEqual(receiver.count, attempt)
            XCTAssertEqual(bodyJSON(receiver.calls[attempt - 1])["attempt"].intValue, Int64(attempt))
            clock.advance(seconds: 15 * 60)  // past any backoff
        }
        var reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "failed")
        XCTAssertEqual(reward["attempts"].intValue, 5)
        XCTAssertTrue(reward["retry_at"].isNull)
        XCTAssertEqual(reward["last_error"].stringValue, "HTTP 500: nope")
        let requested = try f.events("notification.requested")
        XCTAssertEqual(requested.count, 1)
        XCTAssertEqual(requested.first?["data"]["kind"].stringValue, "delivery_failed")
        XCTAssertEqual(requested.first?["data"]["reward_id"].stringValue, rid)
        XCTAssertEqual(requested.first?["data"]["recipients"], ["owner@example.com"])

        let idle = await worker.runOnce()
        XCTAssertEqual(idle.failed + idle.delivered, 0, "a failed reward is not tried again by itself")
        XCTAssertEqual(receiver.count, 5)

        try f.submit(["type": "reward.retry", "app": "acme", "reward_id": .string(rid), "by": "owner"])
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "ready")
        receiver.answer(200)
        let retried = await worker.runOnce()

        XCTAssertEqual(retried.delivered, 1)
        XCTAssertEqual(receiver.count, 6)
        let last = bodyJSON(receiver.calls[5])
        XCTAssertEqual(last["reward_id"].stringValue, rid)
        XCTAssertEqual(last["attempt"].intValue, 6)
        reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "fulfilled")
        XCTAssertEqual(reward["deliveries"].arrayValue?.count, 6)
    }
}
