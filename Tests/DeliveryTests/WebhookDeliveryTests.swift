@testable import Delivery
import Foundation
import HTTPServer
import LedgerCodec
import ReferralLedger
import Synchronization
import XCTest

/// Custom benefits: signed webhooks to a real receiver on 127.0.0.1.
final class WebhookDeliveryTests: XCTestCase {
    func testDeliversASignedWebhookAndFulfilsTheReward() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: receiver.hookURL)
        try f.createProgram("acme", "spring")
        let rid = try f.enroll("acme", "spring", inviter: "alice", friend: "bob")
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "ready")

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(summary.failed, 0)
        XCTAssertEqual(receiver.count, 1)
        let call = try XCTUnwrap(receiver.calls.first)
        XCTAssertEqual(call.method, "POST")
        XCTAssertEqual(call.path, "/hooks/rewards")
        XCTAssertEqual(call.header("Content-Type"), "application/json")
        XCTAssertEqual(call.header("Content-Length"), String(call.body.count))
        assertSigned(call, near: clock.now())
        let body = bodyJSON(call)
        XCTAssertEqual(Set(body.objectValue?.keys.map { $0 } ?? []),
                       ["reward_id", "app", "program", "program_version", "side", "user", "benefit", "attempt"])
        XCTAssertEqual(body["reward_id"].stringValue, rid)
        XCTAssertEqual(body["app"].stringValue, "acme")
        XCTAssertEqual(body["program"].stringValue, "spring")
        XCTAssertEqual(body["program_version"].intValue, 1)
        XCTAssertEqual(body["side"].stringValue, "friend")
        XCTAssertEqual(body["user"].stringValue, "bob")
        XCTAssertEqual(body["benefit"], DeliveryFixture.customBenefit)
        XCTAssertEqual(body["attempt"].intValue, 1)
        XCTAssertEqual(call.body, body.bytes, "the body is compact JSON with sorted keys")

        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "fulfilled")
        XCTAssertEqual(reward["is_usable"].boolValue, true)
        XCTAssertEqual(reward["simulated"].boolValue, false)
        XCTAssertFalse(reward["fulfilled_at"].isNull)
        let history = reward["deliveries"].arrayValue ?? []
        XCTAssertEqual(history.count, 1)
        XCTAssertEqual(history.first?["attempt"].intValue, 1)
        XCTAssertEqual(history.first?["outcome"].stringValue, "succeeded")
    }

    /// The worker reads the queue, then builds each call only after `delivery.started`: a setting
    /// changed in between (here the webhook URL; a substituted benefit the same) is what it uses.
    func testTheCallIsBuiltFromTheRewardAsStartedNotAsQueued() async throws {
        let f = try DeliveryFixture()
        let old = try Receiver(), new = try Receiver()
        let rid = try f.readyWebhookReward(url: old.hookURL)
        let job = try XCTUnwrap(f.ledger!.dueDeliveries().first)
        XCTAssertEqual(job.rewardID, rid)
        try f.configure("acme", ["webhook_url": .string(new.hookURL)])

        let summary = await f.worker(clock: TestClock()).deliver(job)

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(old.count, 0, "the URL read with the queue is no longer in force")
        XCTAssertEqual(new.count, 1)
        XCTAssertEqual(bodyJSON(try XCTUnwrap(new.calls.first))["reward_id"].stringValue, rid)
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilled")
    }

    func testAReceiverThatIsDownLeavesTheRewardReadyWithARetry() async throws {
        let f = try DeliveryFixture()
        let clock = TestClock()
        try f.readyWebhookReward(url: try Receiver.closedPortURL())

        let before = clock.now()
        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.failed, 1)
        XCTAssertEqual(summary.delivered, 0)
        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "ready")
        XCTAssertEqual(reward["attempts"].intValue, 1)
        let error = reward["last_error"].stringValue ?? ""
        XCTAssertTrue(error.hasPrefix("network error"), error)
        let retryAt = try XCTUnwrap(reward["retry_at"].stringValue.flatMap { Timestamp(rfc3339: $0) })
        XCTAssertGreaterThan(retryAt, before)
        XCTAssertLessThanOrEqual(retryAt, clock.now().adding(seconds: 10), "the first retry is due at most 10 s after the failure")
        XCTAssertEqual(reward["deliveries"].arrayValue?.first?["outcome"].stringValue, "failed")
    }

    func testA500IsRetriedWhenTheRetryIsDueAndThenFulfils() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver { _, index in
            index == 0 ? HTTPResponse(status: 500, body: Array("database is down".utf8)) : HTTPResponse(status: 204)
        }
        let clock = TestClock()
        let rid = try f.readyWebhookReward(url: receiver.hookURL)
        let worker = f.worker(clock: clock)

        let first = await worker.runOnce()
        XCTAssertEqual(first.failed, 1)
        var reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "ready")
        XCTAssertEqual(reward["last_error"].stringValue, "HTTP 500: database is down")

        let early = await worker.runOnce()
        XCTAssertEqual(early, DeliverySummary(), "the retry is not due yet")
        XCTAssertEqual(receiver.count, 1)

        clock.advance(seconds: 60)
        let second = await worker.runOnce()
        XCTAssertEqual(second.delivered, 1)
        XCTAssertEqual(receiver.count, 2)
        let retried = bodyJSON(receiver.calls[1])
        XCTAssertEqual(retried["reward_id"].stringValue, rid)
        XCTAssertEqual(retried["attempt"].intValue, 2)
        assertSigned(receiver.calls[1], near: clock.now())

        reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "fulfilled")
        XCTAssertTrue(reward["last_error"].isNull)
        XCTAssertEqual(reward["deliveries"].arrayValue?.map { $0["outcome"].stringValue ?? "" }, ["failed", "succeeded"])
        XCTAssertEqual(reward["deliveries"].arrayValue?.first?["error"].stringValue, "HTTP 500: database is down")
    }

    func testASlowReceiverTimesOutAndCountsAsAFailure() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver { _, _ in
            try? await Task.sleep(nanoseconds: 4_000_000_000)
            return HTTPResponse(status: 200)
        }
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)

        let summary = await f.worker(clock: clock, timeout: 1).runOnce()

        XCTAssertEqual(receiver.count, 1)
        try assertTimedOut(summary, f, after: 1)
    }

    /// One failed call, timed out after `seconds`: the reward is ready again, with that error.
    private func assertTimedOut(_ summary: DeliverySummary, _ f: DeliveryFixture, after seconds: Int,
                                file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(summary.failed, 1, file: file, line: line)
        XCTAssertEqual(summary.delivered, 0, file: file, line: line)
        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "ready", file: file, line: line)
        XCTAssertEqual(reward["last_error"].stringValue, "timed out after \(seconds) s", file: file, line: line)
    }

    /// A reward dated ahead of the worker's clock (a store whose clock runs ahead stamps the
    /// purchase that earned it) is delivered all the same: "due" is about retries, not earning.
    func testARewardEarnedAheadOfTheWorkersClockIsDelivered() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)
        clock.advance(seconds: -3600)

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.delivered, 1, "\(summary)")
        XCTAssertEqual(receiver.count, 1)
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilled")
    }

    /// The timeout bounds the whole call, not only the silence between bytes: a receiver that
    /// answers 200 and then trickles its body a byte a second is cut off at the timeout.
    func testATricklingReceiverIsCutOffAtTheTimeout() async throws {
        let f = try DeliveryFixture()
        let trickler = try TricklingReceiver(bodyBytes: 20, secondsPerByte: 1)
        let clock = TestClock()
        try f.readyWebhookReward(url: "http://127.0.0.1:\(trickler.port)/hooks/rewards")

        // Without a bound on the whole call it would end in 20 s with a 200: fulfilled.
        let summary = await f.worker(clock: clock, timeout: 2).runOnce()

        try assertTimedOut(summary, f, after: 2)
    }

    func testARedirectIsAFailureAndIsNotFollowed() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver { request, _ in
            request.path == "/hooks/rewards"
                ? HTTPResponse(status: 302, headers: [("Location", "/elsewhere")])
                : HTTPResponse(status: 200)
        }
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.failed, 1)
        XCTAssertEqual(receiver.calls.map(\.path), ["/hooks/rewards"], "the redirect was not followed")
        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "ready")
        XCTAssertTrue(reward["last_error"].stringValue?.hasPrefix("HTTP 302") ?? false, reward["last_error"].text)
    }

    func testAFulfilledRewardIsNeverDeliveredAgain() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        let rid = try f.readyWebhookReward(url: receiver.hookURL)
        let worker = f.worker(clock: clock)
        let first = await worker.runOnce()
        XCTAssertEqual(first.delivered, 1)

        let again = await worker.runOnce()
        clock.advance(seconds: 86_400)
        let later = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(again, DeliverySummary())
        XCTAssertEqual(later, DeliverySummary())
        XCTAssertEqual(receiver.count, 1)
        let refused = try f.ledger.submit(["type": "delivery.started", "app": "acme", "reward_id": .string(rid), "attempt": 2])
        XCTAssertEqual(refused.errorCode, "invalid_transition")
        XCTAssertEqual(try f.reward("acme", "bob")["deliveries"].arrayValue?.count, 1)
    }

    func testAMissingWebhookURLFailsWithAClearErrorAndTheWorkerGoesOn() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.configure("broken", ["webhook_secret": "s3cret"])
        try f.createProgram("broken", "spring")
        _ = try f.enroll("broken", "spring", friend: "bob")
        try f.configure("nosecret", ["webhook_url": .string(receiver.hookURL)])
        try f.createProgram("nosecret", "spring")
        _ = try f.enroll("nosecret", "spring", friend: "bob")
        try f.configureWebhookApp("good", url: receiver.hookURL)
        try f.createProgram("good", "spring")
        _ = try f.enroll("good", "spring", friend: "carol")

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(summary.failed, 2)
        XCTAssertEqual(receiver.count, 1, "only the configured app was called")
        XCTAssertEqual(bodyJSON(receiver.calls[0])["app"].stringValue, "good")
        let broken = try f.reward("broken", "bob")
        XCTAssertEqual(broken["status"].stringValue, "ready")
        XCTAssertEqual(broken["last_error"].stringValue, "app broken has no webhook_url setting: set it with app.configure")
        XCTAssertEqual(try f.reward("nosecret", "bob")["last_error"].stringValue,
                       "app nosecret has no webhook_secret setting: set it with app.configure")
        XCTAssertEqual(try f.reward("good", "carol")["status"].stringValue, "fulfilled")
    }

    func testAnInterruptedDeliveryIsRepeatedOnceWithTheSameRewardIDThenFulfilled() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        let rid = try f.readyWebhookReward(url: receiver.hookURL)
        // A worker recorded the start, (maybe) called, and died before recording the outcome.
        try f.submit(["type": "delivery.started", "app": "acme", "reward_id": .string(rid), "attempt": 1])
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilling")

        let summary = await f.worker(clock: clock).runOnce()
        XCTAssertEqual(summary.interrupted, 1)
        XCTAssertEqual(summary.delivered, 0, "due again at the retry_at it recorded, not at once")
        let retryAt = try XCTUnwrap(Timestamp(rfc3339: try f.reward("acme", "bob")["retry_at"].stringValue ?? ""))
        XCTAssertLessThanOrEqual(retryAt, clock.now().adding(seconds: 10))
        clock.advance(seconds: 15)
        let retried = await f.worker(clock: clock).runOnce()
        XCTAssertEqual(retried.delivered, 1)
        XCTAssertEqual(receiver.count, 1)
        let body = bodyJSON(receiver.calls[0])
        XCTAssertEqual(body["reward_id"].stringValue, rid)
        XCTAssertEqual(body["attempt"].intValue, 2)
        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "fulfilled")
        let history = reward["deliveries"].arrayValue ?? []
        XCTAssertEqual(history.map { $0["outcome"].stringValue ?? "" }, ["failed", "succeeded"])
        XCTAssertEqual(history.first?["error"].stringValue, DeliveryWorker.interruptedError)

        let again = await f.worker(clock: clock).runOnce()
        XCTAssertEqual(again, DeliverySummary())
        XCTAssertEqual(receiver.count, 1)
    }

    func testManyRewardsAreAllDeliveredWithBoundedConcurrency() async throws {
        let f = try DeliveryFixture()
        let gauge = Gauge()
        let receiver = try Receiver { _, _ in
            gauge.enter()
            try? await Task.sleep(nanoseconds: 50_000_000)
            gauge.leave()
            return HTTPResponse(status: 200)
        }
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: receiver.hookURL)
        try f.createProgram("acme", "spring")
        var ids: Set<String> = []
        for i in 0..<25 { ids.insert(try f.enroll("acme", "spring", inviter: "inviter-\(i % 3)", friend: "friend-\(i)")) }

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.delivered, 25)
        XCTAssertEqual(Set(receiver.calls.map { bodyJSON($0)["reward_id"].stringValue ?? "" }), ids)
        XCTAssertEqual(receiver.count, 25, "each reward called once")
        XCTAssertLessThanOrEqual(gauge.peak, 4, "never more calls in flight than maxInFlight")
        XCTAssertGreaterThan(gauge.peak, 0)
    }
}

/// Counts handlers running at once and remembers the most.
final class Gauge: Sendable {
    private let state = Mutex((now: 0, peak: 0))
    func enter() { state.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) } }
    func leave() { state.withLock { $0.now -= 1 } }
    var peak: Int { state.withLock { $0.peak } }
}
