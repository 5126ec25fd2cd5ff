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

    /// A clock anywhere in Int64's range: the worker works out its next wake without overflow
    /// (what it would record at such a time is refused as any out-of-range time is).
    func testAClockAtTheEndsOfItsRangeDoesNotTrapTheWorker() async throws {
        let f = try DeliveryFixture()
        let clock = TestClock()
        try f.readyWebhookReward(url: try Receiver.closedPortURL())
        _ = await f.worker(clock: clock).runOnce()  // a failed call: a retry is waiting
        XCTAssertNotNil(f.ledger.nextRetry())
        for extreme in [Timestamp(milliseconds: .min), Timestamp(milliseconds: .max)] {
            let worker = DeliveryWorker(ledger: f.ledger, configuration: DeliveryConfiguration(pollInterval: 0.05, clock: { extreme }))
            let running = Task { await worker.run() }
            try await Task.sleep(nanoseconds: 300_000_000)
            running.cancel()
            _ = await running.value
        }
        XCTAssertTrue(try f.ledger.verify().isClean)
    }

    /// A worker over a ledger opened for queries only delivers nothing and says why.
    func testAWorkerOverAReaderSaysItDeliversNothing() async throws {
        let f = try DeliveryFixture()
        try f.readyWebhookReward(url: try Receiver.closedPortURL())
        let reader = try Ledger(readingFolder: f.folder, forQueries: false)
        let lines = LogLines()
        let worker = DeliveryWorker(ledger: reader, configuration: DeliveryConfiguration(log: { lines.append($0) }))
        let once = await worker.runOnce()
        let running = await worker.run()
        XCTAssertEqual(once.delivered + once.failed + running.delivered + running.failed, 0)
        XCTAssertEqual(lines.all.count, 2, "\(lines.all)")
        XCTAssertTrue(lines.all.allSatisfy { $0.contains("opened for queries only") }, "\(lines.all)")
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "ready")
    }

    /// `skipping` is asked outside the ledger's lock: it may call back into the ledger.
    func testTheSkippingTestMayCallBackIntoTheLedger() async throws {
        let f = try DeliveryFixture()
        try f.configureWebhookApp("acme", url: try Receiver.closedPortURL())
        try f.createProgram("acme", "spring")
        for friend in ["bob", "carol", "dave"] { _ = try f.enroll("acme", "spring", inviter: "alice", friend: friend) }
        let ledger = f.ledger!
        let all = ledger.dueDeliveries()
        XCTAssertEqual(all.count, 3)
        let skippedID = all[1].rewardID
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var taken: [DeliveryJob] = []
        Thread.detachNewThread {
            taken = ledger.dueDeliveries { app, rewardID in
                // Each call reads the ledger again (its lock was held here before: a deadlock).
                _ = ledger.nextRetry()
                _ = ledger.startedDelivery(app: app, program: "spring", rewardID: rewardID)
                return rewardID == skippedID
            }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "dueDeliveries did not return")
        XCTAssertEqual(taken.map(\.rewardID), all.map(\.rewardID).filter { $0 != skippedID })
    }
}
