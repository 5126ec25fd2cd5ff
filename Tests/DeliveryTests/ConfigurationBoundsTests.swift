import Delivery
import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// A worker's settings come from code an embedder writes: each is brought into its range, so a
/// setting past an end (or NaN) neither traps the worker nor stalls it.
final class ConfigurationBoundsTests: XCTestCase {
    func testSettingsPastTheirEndsAreBroughtIntoRange() {
        let wild = DeliveryConfiguration(requestTimeout: .infinity, maxInFlight: .max, pollInterval: .greatestFiniteMagnitude,
                                         batchSize: .max, mailTimeout: .infinity).bounded
        XCTAssertEqual(wild.requestTimeout, 600)
        XCTAssertEqual(wild.maxInFlight, 64)
        XCTAssertEqual(wild.pollInterval, 600)
        XCTAssertEqual(wild.batchSize, 10_000)
        XCTAssertEqual(wild.mailTimeout, 600)
        let none = DeliveryConfiguration(requestTimeout: .nan, maxInFlight: .min, pollInterval: -1, batchSize: 0, mailTimeout: .nan).bounded
        XCTAssertEqual(none.requestTimeout, 10, "NaN is the default")
        XCTAssertEqual(none.maxInFlight, 1)
        XCTAssertEqual(none.pollInterval, 1, "a negative interval is the default")
        XCTAssertEqual(none.batchSize, 1)
        XCTAssertEqual(none.mailTimeout, 30)
        let small = DeliveryConfiguration(requestTimeout: 0.2, pollInterval: 0.001, mailTimeout: 0.01).bounded
        XCTAssertEqual(small.requestTimeout, 1)
        XCTAssertEqual(small.pollInterval, 0.05)
        XCTAssertEqual(small.mailTimeout, 0.1)
        let kept = DeliveryConfiguration(requestTimeout: 7, maxInFlight: 3, pollInterval: 0.5, batchSize: 250, mailTimeout: 12).bounded
        XCTAssertEqual([kept.requestTimeout, kept.pollInterval, kept.mailTimeout], [7, 0.5, 12])
        XCTAssertEqual([kept.maxInFlight, kept.batchSize], [3, 250])
    }

    func testAWorkerGivenTheLargestSettingsStillDelivers() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: receiver.hookURL)
        try f.createProgram("acme", "spring")
        _ = try f.enroll("acme", "spring", inviter: "alice", friend: "bob")
        // Every page size a caller may ask for, the largest too.
        XCTAssertEqual(f.ledger.dueDeliveries(now: clock.now(), limit: .max).count, 1)
        XCTAssertEqual(f.ledger.dueDeliveries(now: clock.now(), limit: 0).count, 0)

        let worker = DeliveryWorker(ledger: f.ledger, configuration: DeliveryConfiguration(
            requestTimeout: .infinity, maxInFlight: .max, pollInterval: .infinity, batchSize: .max,
            mailCommand: "cat > /dev/null", mailTimeout: .nan, clock: clock.now))
        let summary = await worker.runOnce()

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(receiver.count, 1)
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilled")
        XCTAssertEqual(worker.configuration.requestTimeout, 600)
        XCTAssertEqual(worker.configuration.batchSize, 10_000)
    }
}
