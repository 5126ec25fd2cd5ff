import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// `referral-ledger deliver`, run as a process against a real ledger folder.
final class DeliverCommandTests: XCTestCase {
    static var executable: String? {
        let fm = FileManager.default
        var candidates: [URL] = [Bundle.main.bundleURL, Bundle.main.bundleURL.deletingLastPathComponent()]
        for bundle in Bundle.allBundles where bundle.bundlePath.hasSuffix(".xctest") {
            candidates += [bundle.bundleURL.deletingLastPathComponent()]
        }
        let arg0 = URL(fileURLWithPath: CommandLine.arguments[0])
        candidates += [arg0.deletingLastPathComponent(), arg0.deletingLastPathComponent().deletingLastPathComponent()]
        for dir in candidates {
            let path = dir.appendingPathComponent("referral-ledger").path
            if fm.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    func cli() throws -> String {
        try XCTUnwrap(Self.executable, "the referral-ledger executable is not next to the test bundle (swift build first)")
    }

    func start(_ arguments: [String]) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try cli())
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return (process, out, err)
    }

    func finish(_ p: (Process, Pipe, Pipe)) -> (status: Int32, stdout: String, stderr: String) {
        let out = p.1.fileHandleForReading.readDataToEndOfFile()
        let err = p.2.fileHandleForReading.readDataToEndOfFile()
        p.0.waitUntilExit()
        return (p.0.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    func testDeliverOncePrintsASummaryAndRecordsTheDelivery() throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        try f.readyWebhookReward(url: receiver.hookURL)
        f.close()

        let run = finish(try start(["--data", f.folder, "deliver", "--once", "--timeout", "5"]))

        XCTAssertEqual(run.status, 0, run.stderr)
        let summary = try JSONValue(parsing: run.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(summary["delivered"].intValue, 1)
        XCTAssertEqual(summary["failed"].intValue, 0)
        XCTAssertEqual(receiver.count, 1)
        XCTAssertTrue(run.stderr.contains("delivered reward"), run.stderr)
        try f.reopen()
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilled")
    }

    func testDeliverRunsUntilSIGTERMAndExitsZero() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        try f.readyWebhookReward(url: receiver.hookURL)
        f.close()

        let process = try start(["--data", f.folder, "deliver"])
        await waitUntil("the worker called the receiver") { receiver.count == 1 }
        // Even if the signal lands mid-call, the call in flight is finished and recorded.
        kill(process.0.processIdentifier, SIGTERM)
        let run = finish(process)

        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(process.0.terminationReason, .exit)
        XCTAssertTrue(run.stderr.contains("stopping"), run.stderr)
        try f.reopen()
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "fulfilled")
        XCTAssertEqual(receiver.count, 1)
    }

    func testBadOptionsAreUsageErrors() throws {
        let f = try DeliveryFixture()
        f.close()
        let run = finish(try start(["--data", f.folder, "deliver", "--once", "--timeout", "soon"]))
        XCTAssertEqual(run.status, 2)
        XCTAssertTrue(run.stderr.contains("--timeout must be a whole number of seconds"), run.stderr)
        for (arguments, message) in [(["--mail-timeout", "5"], "--mail-timeout goes with --mail-command"),
                                     (["--mail-command", "cat", "--mail-timeout", "0"], "--mail-timeout must be a whole number of seconds")] {
            let run = finish(try start(["--data", f.folder, "deliver", "--once"] + arguments))
            XCTAssertEqual(run.status, 2, arguments.joined(separator: " "))
            XCTAssertTrue(run.stderr.contains(message), run.stderr)
        }
    }
}
