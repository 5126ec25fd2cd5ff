import Foundation
import LedgerCodec
import ReferralLedger
@testable import Delivery
import XCTest

/// The worker's commits are grouped: commands that arrive while a commit runs are decided
/// together in one transaction, and each caller still hears its own command's result.
final class GroupedCommitTests: XCTestCase {
    func testConcurrentCommitsEachAnswerTheirOwnCommand() async throws {
        let f = try DeliveryFixture()
        _ = try f.submit(["type": "app.configure", "app": "acme", "at": "2026-03-01T00:00:00Z", "settings": ["friend_referrals_enabled": true]])
        let ledger = try XCTUnwrap(f.ledger)
        let before = try ledger.currentHead().position
        // More than a group holds (1,000), some malformed (refused alone, the rest go on).
        let count = 2_500
        let results = try await withThrowingTaskGroup(of: (Int, CommandResult).self) { group in
            for n in 0..<count {
                group.addTask {
                    let command: JSONValue = n % 100 == 7
                        ? ["type": "account.verify", "app": "acme", "at": "2026-03-02T00:00:00Z", "user": .string("u\(n)"), "account_created_at": "yesterday"]
                        : ["type": "account.verify", "app": "acme", "at": "2026-03-02T00:00:00Z", "user": .string("u\(n)"), "account_created_at": "2026-01-01T00:00:00Z"]
                    return (n, try await OffPoolCommit.submit(command, to: ledger))
                }
            }
            var all: [Int: CommandResult] = [:]
            for try await (n, result) in group { all[n] = result }
            return all
        }
        XCTAssertEqual(results.count, count)
        var positions: Set<Int64> = []
        for (n, result) in results {
            let json = result.json
            if n % 100 == 7 {
                XCTAssertEqual(json["error"]["code"], "invalid_command", "\(n)")
                continue
            }
            XCTAssertEqual(json["ok"], true, "\(n): \(json.text)")
            XCTAssertEqual(json["events"][0]["data"]["user"].stringValue, "u\(n)", "command \(n) heard another's result")
            if let p = json["position"].intValue { positions.insert(p) }
        }
        let accepted = count - count / 100
        XCTAssertEqual(positions.count, accepted, "each accepted command has a position of its own")
        XCTAssertEqual(try ledger.currentHead().position, before + UInt64(accepted))
        XCTAssertTrue(try ledger.verify().isClean)
    }
}
