@testable import Delivery
import Foundation
import HTTPServer
import LedgerCodec
import ReferralLedger
import Synchronization
import XCTest

/// An outcome the ledger cannot record at once (a full disk for a while, a failing commit): the
/// worker keeps it, with the time the call ended, and records it at its next look, instead of
/// leaving the reward `fulfilling` until a restart records it "interrupted" and calls again.
final class UnrecordedOutcomeTests: XCTestCase {
    /// Commits through the real ledger, except worker outcomes while `failing` is set: those throw,
    /// as a commit on a full disk does.
    final class FlakyDisk: Sendable {
        let failing = Mutex(true)
        let refused = Mutex(0)

        func commit(_ command: JSONValue, _ ledger: Ledger) throws -> CommandResult {
            let outcome = ["delivery.succeeded", "delivery.failed"].contains(command["type"].stringValue ?? "")
            if outcome, failing.withLock({ $0 }) {
                refused.withLock { $0 += 1 }
                throw LedgerError(code: "storage_error", message: "No space left on device (test)")
            }
            return try ledger.submit(command)
        }
    }

    private func worker(_ f: DeliveryFixture, _ clock: TestClock, _ disk: FlakyDisk, log: LogLines = LogLines()) -> DeliveryWorker {
        DeliveryWorker(ledger: f.ledger, configuration: DeliveryConfiguration(
            requestTimeout: 5, maxInFlight: 4, pollInterval: 0.1, clock: clock.now, log: { line in
                print("[worker] \(line)")
                log.append(line)
            })) { command, ledger in
            try disk.commit(command, ledger)
        }
    }

    func testAnOutcomeThatCannotBeRecordedIsRecordedAtTheNextLookWithItsOwnTime() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)
        let disk = FlakyDisk()
        let worker = worker(f, clock, disk)
        let stop = StopFlag()
        let running = Task { await worker.run(until: { stop.isSet }) }

        await waitUntil("the call was made and its record refused three times") { receiver.count == 1 && disk.refused.withLock { $0 } >= 3 }
        let ended = clock.now()  // the call ended before this
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilling")
        // Meanwhile nothing records the delivery interrupted, nor calls again.
        clock.advance(seconds: 120)
        try await Task.sleep(nanoseconds: 400_000_000)
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilling")
        XCTAssertEqual(receiver.count, 1)

        disk.failing.withLock { $0 = false }  // the disk has room again
        try await waitUntil("the kept outcome recorded") { try f.reward("acme", "bob")["status"].stringValue == "fulfilled" }
        stop.set()
        let summary = await running.value

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(summary.interrupted, 0)
        XCTAssertEqual(receiver.count, 1, "one call: the outcome was known")
        let succeeded = try f.events("delivery.succeeded")
        XCTAssertEqual(succeeded.count, 1)
        // Recorded with the time the call ended, before the clock moved on 120 s (same-format UTC
        // times order as text).
        let at = try XCTUnwrap(succeeded.first?["at"].stringValue)
        XCTAssertLessThanOrEqual(at, ended.description, "recorded with the time the call ended")
        XCTAssertTrue(try f.events("delivery.failed").isEmpty)
        XCTAssertEqual(try f.ledger.verify().violations, [])
    }

    func testAFailedCallWaitsTooAndARunThatStopsFirstLeavesItToTheNextStart() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver { _, _ in HTTPResponse(status: 503) }
        let clock = TestClock()
        try f.readyWebhookReward(url: receiver.hookURL)
        let disk = FlakyDisk()
        // One pass: the failure cannot be recorded, not even at the pass's last try.
        let log = LogLines()
        let once = await worker(f, clock, disk, log: log).runOnce()
        XCTAssertEqual(once.failed, 0)
        // The operator is told the known outcome goes with the process.
        XCTAssertTrue(log.all.contains { $0.contains("could not be recorded in this pass") }, "\(log.all)")
        XCTAssertEqual(receiver.count, 1)
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilling")
        // The next worker (a restart: the outcome is gone with the process) records it interrupted.
        disk.failing.withLock { $0 = false }
        let next = await worker(f, clock, disk).runOnce()
        XCTAssertEqual(next.interrupted, 1)
        XCTAssertEqual(try f.reward("acme", "bob")["last_error"].stringValue, DeliveryWorker.interruptedError)
        XCTAssertEqual(try f.ledger.verify().violations, [])
    }
}
