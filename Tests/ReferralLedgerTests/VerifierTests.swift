import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger
import XCTest

/// The replay verifier catches every bad history with its rule named, and passes clean ones.
final class VerifierTests: XCTestCase {
    private func lines(_ file: URL) throws -> [[UInt8]] {
        let data = try Data(contentsOf: file)
        return data.split(separator: 0x0A).map { Array($0) }
    }

    func testEveryBadHistoryIsCaughtWithItsRule() throws {
        let manifest = try JSONValue(parsing: Array(try Data(contentsOf: ProjectPaths.fixtures.appendingPathComponent("bad-histories.json"))))
        let entries = manifest.objectValue ?? [:]
        XCTAssertEqual(entries.count, 6)
        for (file, rule) in entries {
            let report = Ledger.verify(exportLines: try lines(ProjectPaths.fixtures.appendingPathComponent(file)))
            XCTAssertFalse(report.isClean, "\(file) verified clean")
            XCTAssertTrue(report.violations.contains { $0.rule == rule.stringValue }, "\(file): \(rule) not reported:\n\(report.text)")
        }
    }

    func testACleanExportVerifiesAloneAndUntilStopsEarly() throws {
        let temp = try TemporaryLedger()
        var runner = FixtureRunner(ledger: temp.ledger)
        try runner.run("refunds")
        var exported: [[UInt8]] = []
        var from: UInt64 = 1
        while true {
            let (page, next) = try temp.ledger.events(from: from, limit: 1000)
            exported += page
            guard let next else { break }
            from = next
        }
        let report = Ledger.verify(exportLines: exported)
        XCTAssertTrue(report.isClean, report.text)
        XCTAssertEqual(report.events, UInt64(exported.count))
        let partial = try temp.ledger.verify(until: 10)
        XCTAssertTrue(partial.isClean, partial.text)
        XCTAssertEqual(partial.events, 10)
    }

    func testTamperingInsideLMDBAndStaleProjectionsAreReported() throws {
        let temp = try TemporaryLedger()
        var runner = FixtureRunner(ledger: temp.ledger)
        try runner.run("caps")
        temp.close()
        // A forger rewrites the projection of alice's balance and the head hash.
        let env = try LMDBEnvironment(path: temp.folder, databases: Ledger.databases)
        try env.write { txn in
            try txn.put("proj_balances", Array("acme".utf8) + [0] + Array("alice".utf8), Array(#"{"balance":9999,"earned":9999,"spent":0}"#.utf8))
        }
        let reader = try Ledger(readingFolder: temp.folder)
        let stale = try reader.verify()
        XCTAssertTrue(stale.violations.contains { $0.rule == "projection.mismatch" }, stale.text)
        try env.write { txn in try txn.put("meta", Array("head_hash".utf8), Array(String(repeating: "f", count: 64).utf8)) }
        let headless = try reader.verify()
        XCTAssertTrue(headless.violations.contains { $0.rule == "chain.head_hash" }, headless.text)
    }
}
