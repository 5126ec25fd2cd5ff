import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger
import ReferralRules
import XCTest

/// Every fixture history runs through a real ledger on LMDB; every expectation must hold, and
/// every query answers byte for byte the same from the incremental projections, after a
/// `rebuild`, after a reopen, and as of the head position.
final class FixtureTests: XCTestCase {
    func testFixturesExist() {
        XCTAssertGreaterThanOrEqual(FixtureRunner.all.count, 1, "no fixtures found in \(ProjectPaths.fixtures.path)")
    }

    func testEveryFixture() throws {
        for name in FixtureRunner.all {
            try check(name)
        }
    }

    private func check(_ name: String) throws {
        let temp = try TemporaryLedger()
        let queries = Self.queriesOf(name)
        let head: UInt64
        let incremental: [String], rebuilt: [String]
        do {
            var runner = FixtureRunner(ledger: temp.ledger)
            try runner.run(name)
            XCTAssert(runner.failures.isEmpty, "\(name):\n" + runner.failures.joined(separator: "\n"))
            XCTAssertFalse(queries.isEmpty, "\(name) checks no query")
            head = try temp.ledger.currentHead().position
            let report = try temp.ledger.verify()
            XCTAssert(report.isClean, "\(name) does not verify:\n\(report.text)")
            XCTAssertEqual(report.events, head)
            incremental = try answers(runner, queries)
            _ = try temp.ledger.rebuildProjections()
            rebuilt = try answers(runner, queries)
        }
        try temp.reopen()
        let runner = FixtureRunner(ledger: temp.ledger)
        let reopened = try answers(runner, queries)
        var asOf = queries
        for i in asOf.indices where asOf[i].1["as_of"].isNull { asOf[i].1["as_of"] = .int(Int64(head)) }
        let folded = try answers(runner, asOf)
        XCTAssertEqual(incremental, rebuilt, "\(name): rebuilt projections differ")
        XCTAssertEqual(incremental, reopened, "\(name): projections differ after reopening")
        XCTAssertEqual(incremental, folded, "\(name): as-of answers differ from the projections")
    }

    /// A ledger that ran the fixture `name`.
    private static func played(_ name: String) throws -> TemporaryLedger {
        let temp = try TemporaryLedger()
        var runner = FixtureRunner(ledger: temp.ledger)
        try runner.run(name)
        return temp
    }

    /// A participant's reward counts (kept as rewards change) agree with their rewards, counted one
    /// by one from the reward records, in every program of every fixture.
    func testParticipantRewardCountsAgreeWithTheirRewards() throws {
        var checked = 0
        for name in FixtureRunner.all {
            let temp = try Self.played(name)
            let ledger = temp.ledger!
            let programs = try temp.allValues().compactMap { bytes -> (String, String)? in
                let event = try JSONValue(parsing: bytes)
                guard event["type"] == "program.created" else { return nil }
                return (event["data"]["app"].stringValue ?? "", event["data"]["program"].stringValue ?? "")
            }
            for (app, program) in programs {
                var cursor: String?
                repeat {
                    let page = try ledger.participants(app: app, program: program, limit: 1000, cursor: cursor)
                    for record in page["participants"].arrayValue ?? [] {
                        let user = record["user"].stringValue ?? ""
                        let rewards = try ledger.rewards(app: app, user: user, program: program)["rewards"].arrayValue ?? []
                        func count(_ test: (JSONValue) -> Bool) -> JSONValue { .int(rewards.filter(test).count) }
                        let waits: Set<String> = ["awaiting_inventory", "ready", "fulfilling", "failed"]
                        let context = "\(name) \(app)/\(program)/\(user)"
                        XCTAssertEqual(record["rewards_fulfilled"], count { $0["status"] == "fulfilled" }, context)
                        XCTAssertEqual(record["rewards_delivered"], count { $0["is_usable"] == true }, context)
                        XCTAssertEqual(record["rewards_pending_approval"], count { $0["status"] == "pending_review" }, context)
                        XCTAssertEqual(record["rewards_pending_delivery"],
                                       count { $0["is_usable"] != true && waits.contains($0["status"].stringValue ?? "") }, context)
                        if !record["inviter"].isNull {
                            XCTAssertEqual(record["inviter"]["earned_rewards"], count { $0["side"] == "inviter" && $0["status"] != "rejected" }, context)
                        }
                        if !rewards.isEmpty { checked += 1 }
                    }
                    cursor = page["next_cursor"].stringValue
                } while cursor != nil
            }
        }
        XCTAssertGreaterThan(checked, 20, "few participants with rewards were checked")
    }

    /// The expiry counts an inventory keeps (as codes are imported, handed out and dropped) are those
    /// of the codes still available, after every event of every fixture.
    func testInventoryExpiryCountsFollowTheAvailableCodes() throws {
        var checked = 0
        for name in FixtureRunner.all {
            var state = LedgerState()
            for bytes in try Self.played(name).allValues() {
                let event = try StoredEvent(bytes: bytes)
                try state.apply(type: event.type, at: event.at, data: event.data, position: event.position)
                guard event.type.hasPrefix("inventory.") || event.type.hasPrefix("offer_code.") else { continue }
                for (_, app) in state.apps {
                    for (_, program) in app.programs {
                        for (key, inventory) in program.inventory {
                            var expected: [Timestamp: Int] = [:]
                            for n in inventory.available { if let e = inventory.codes[n].expiresAt { expected[e, default: 0] += 1 } }
                            XCTAssertEqual(inventory.expiringAvailable, expected, "\(name) at \(event.position): \(key)")
                            if !expected.isEmpty { checked += 1 }
                        }
                    }
                }
            }
        }
        XCTAssertGreaterThan(checked, 10, "few inventories with expiring codes were checked")
    }

    /// A reopened ledger (its state folded from the log, on two threads) decides exactly as the one
    /// that wrote the log: half of each history, a reopen, the other half — every expectation holds
    /// and re-deciding every command (verify) agrees.
    func testAReopenedLedgerDecidesLikeTheOneThatWroteIt() throws {
        for name in FixtureRunner.all {
            let temp = try TemporaryLedger()
            let lines = try FixtureRunner.lines(of: name)
            let count = lines.count
            // Split before a command, so that no expectation is cut from the result it checks.
            let half = (count / 2..<count).first { !lines[$0]["type"].isNull } ?? count
            var codes: [String: String] = [:]
            do {
                var first = FixtureRunner(ledger: temp.ledger)
                try first.run(name, lines: 0..<half)
                XCTAssert(first.failures.isEmpty, "\(name):\n" + first.failures.joined(separator: "\n"))
                codes = first.codes
            }
            try temp.reopen()
            var second = FixtureRunner(ledger: temp.ledger)
            second.codes = codes
            try second.run(name, lines: half..<count)
            XCTAssert(second.failures.isEmpty, "\(name) after a reopen:\n" + second.failures.joined(separator: "\n"))
            let report = try temp.ledger.verify()
            XCTAssert(report.isClean, "\(name) after a reopen:\n\(report.text)")
        }
    }

    private func answers(_ runner: FixtureRunner, _ queries: [(String, JSONValue)]) throws -> [String] {
        try queries.map { try runner.query($0.0, $0.1).text }
    }

    static func queriesOf(_ name: String) -> [(String, JSONValue)] {
        let lines = (try? FixtureRunner.lines(of: name)) ?? []
        return lines.compactMap { line in
            guard let kind = line["expect"].stringValue, kind != "result" else { return nil }
            return (kind, line["args"])
        }
    }
}

/// Every refusal code of the rules is produced by some fixture through the real ledger.
final class RejectionCoverageTests: XCTestCase {
    func testEveryRejectionCodeIsProducedByAFixture() throws {
        var seen = Set<String>()
        for name in FixtureRunner.all {
            let temp = try TemporaryLedger()
            var runner = FixtureRunner(ledger: temp.ledger)
            for raw in try FixtureRunner.lines(of: name) where raw["expect"].isNull {
                let line = runner.substitute(raw)
                let result = try temp.ledger.submit(line).json
                if let code = result["error"]["code"].stringValue { seen.insert(code) }
                if line["type"].stringValue == "invite.create", let code = result["code"].stringValue {
                    runner.codes["\(line["user"].stringValue!):\(line["program"].stringValue!)"] = code
                }
            }
        }
        // A code format run out of codes takes a million codes of one stem: InviteCodeExhaustionTests draws with
        // a source that repeats itself instead.
        let missing = RejectionCode.allCases.filter { $0 != .codeSpaceExhausted }.map(\.rawValue).filter { !seen.contains($0) }
        XCTAssertEqual(missing, [], "no fixture produces these codes")
    }
}
