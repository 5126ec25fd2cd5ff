import Delivery
import Foundation
import HTTPServer
import LedgerCodec
import ReferralLedger
import Synchronization
import XCTest

/// `run(until:)`: the long-running worker of `serve` and `deliver`.
final class RunLoopTests: XCTestCase {
    func testRunDeliversNewRewardsRetriesWhenDueAndStopsWhenAsked() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver { _, index in HTTPResponse(status: index == 1 ? 503 : 200) }
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)
        let worker = f.worker(clock: clock)
        let stop = StopFlag()
        let running = Task { await worker.run(until: { stop.isSet }) }

        try await waitUntil("bob's reward fulfilled") { try f.reward("acme", "bob")["status"].stringValue == "fulfilled" }
        // A reward earned while the worker runs is picked up; its first call fails (503).
        _ = try f.enroll("acme", "spring", friend: "carol")
        try await waitUntil("carol's first attempt failed") { try f.reward("acme", "carol")["attempts"].intValue == 1
            && f.reward("acme", "carol")["status"].stringValue == "ready" }
        XCTAssertEqual(try f.reward("acme", "carol")["last_error"].stringValue, "HTTP 503")
        clock.advance(seconds: 60)  // the retry falls due
        try await waitUntil("carol's reward fulfilled") { try f.reward("acme", "carol")["status"].stringValue == "fulfilled" }

        stop.set()
        let summary = await running.value

        XCTAssertEqual(summary.delivered, 2)
        XCTAssertEqual(summary.failed, 1)
        XCTAssertEqual(receiver.count, 3)
    }

    /// A worker whose ledger is closed (`Ledger.close()`) ends its run instead of trying to record
    /// into it, over and over; a worker given a closed ledger says why it delivers nothing.
    func testARunEndsWhenItsLedgerIsClosed() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        try f.readyWebhookReward(url: receiver.hookURL)
        let lines = LogLines()
        let worker = DeliveryWorker(ledger: f.ledger, configuration: DeliveryConfiguration(pollInterval: 0.05, log: { lines.append($0) }))
        let running = Task { await worker.run() }
        try await waitUntil("bob's reward fulfilled") { try f.reward("acme", "bob")["status"].stringValue == "fulfilled" }
        f.ledger.close()
        // A guard against a hang only: the run must end by itself, long before this.
        let guardFired = StopFlag()
        let guardTask = Task {
            try? await Task.sleep(nanoseconds: 30_000_000_000)
            guardFired.set()
            running.cancel()
        }
        let summary = await running.value
        guardTask.cancel()
        XCTAssertFalse(guardFired.isSet, "the run went on over a closed ledger until cancelled")
        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(receiver.count, 1)
        let again = await DeliveryWorker(ledger: f.ledger, configuration: DeliveryConfiguration(log: { lines.append($0) })).runOnce()
        XCTAssertEqual(again, DeliverySummary())
        XCTAssertTrue(lines.all.contains { $0.contains("was closed (Ledger.close())") }, "\(lines.all)")
    }

    func testCancellingTheRunFinishesTheCallInFlightAndRecordsIt() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver { _, _ in
            try? await Task.sleep(nanoseconds: 300_000_000)
            return HTTPResponse(status: 200)
        }
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)
        let worker = f.worker(clock: clock)
        let running = Task { await worker.run() }

        await waitUntil("the call reached the receiver") { receiver.count == 1 }
        running.cancel()
        let summary = await running.value

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilled", "not left fulfilling")
        XCTAssertTrue(f.ledger.interruptedDeliveries().isEmpty)
    }

    func testRunSendsNotificationsAlongsideDeliveries() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        let files = try makeTemporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: files) }
        try f.configureWebhookApp("acme", url: receiver.hookURL, extra: ["owner_email": "owner@example.com"])
        try f.createProgram("acme", "reviewed", delivery: "review")
        try f.createProgram("acme", "automatic")
        _ = try f.enroll("acme", "reviewed", friend: "bob")
        _ = try f.enroll("acme", "automatic", friend: "carol")
        let worker = f.worker(clock: clock, mailCommand: "cat > '\(files)/mail.txt'")
        let stop = StopFlag()
        let running = Task { await worker.run(until: { stop.isSet }) }

        await waitUntil("the notification was reported") { f.ledger.pendingNotifications().isEmpty }
        try await waitUntil("carol's reward fulfilled") { try f.reward("acme", "carol")["status"].stringValue == "fulfilled" }
        stop.set()
        let summary = await running.value

        XCTAssertEqual(summary.notificationsSent, 1)
        XCTAssertEqual(summary.delivered, 1)
        XCTAssertTrue(try String(contentsOfFile: files + "/mail.txt", encoding: .utf8).contains("To: owner@example.com\n"))
    }
}

final class StopFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
