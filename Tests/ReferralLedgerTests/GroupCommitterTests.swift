import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// Group commit across callers: commands that arrive while a commit runs are decided together,
/// and each caller still hears its own command's result (the delivery worker, the mail sender
/// and the HTTP server all write this way).
final class GroupCommitterTests: XCTestCase {
    func testConcurrentCallersEachHearTheirOwnCommand() async throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-group-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let committer = GroupCommitter(ledger: try Ledger(folder: folder))
        let setup = try await committer.submit(.configureApp(settings: ["friend_referrals_enabled": true]), app: "acme",
                                               at: Timestamp(rfc3339: "2026-03-01T00:00:00Z"))
        XCTAssertTrue(setup.ok, setup.text)
        let before = try committer.ledger.currentHead().position
        // More than one transaction holds (1,000), some malformed (refused alone, the rest go on).
        let count = 2_500
        let results = try await withThrowingTaskGroup(of: (Int, CommandResult).self) { group in
            for n in 0..<count {
                group.addTask {
                    let created: JSONValue = n % 100 == 7 ? "yesterday" : "2026-01-01T00:00:00Z"
                    let command: JSONValue = ["type": "account.verify", "app": "acme", "at": "2026-03-02T00:00:00Z",
                                              "user": .string("u\(n)"), "account_created_at": created]
                    return (n, try await committer.submit([.value(command)])[0])
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
        XCTAssertEqual(try committer.ledger.currentHead().position, before + UInt64(accepted))
        XCTAssertTrue(try committer.ledger.verify().isClean)
        committer.drain()
    }
}
