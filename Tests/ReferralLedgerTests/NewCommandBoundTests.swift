import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
import ReferralRules
import XCTest

/// A bound that holds for new commands only (here: a duration's units once and in order) does not
/// turn the retry of a command an earlier version recorded into a refusal: the retry answers its
/// first result, as every retry does (SPEC §2); the same command under a new id is refused.
final class NewCommandBoundTests: XCTestCase {
    private func create(_ duration: String, id: String) -> String {
        #"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","id":""# + id
            + #"","config":{"inviter":null,"friend":{"trigger":"invite_accepted","benefit":{"type":"revenuecat_entitlement","entitlement":"pro","duration":""#
            + duration + #""}},"new_users_only":false}}"#
    }

    /// A ledger whose log holds `create("P1M1M", id: "c1")` with its idempotency entry, as a version
    /// before the bound recorded it (made by recording `P1M` and rewriting it, re-chained).
    private func ledgerRecordedBeforeTheBound() throws -> TemporaryLedger {
        let temp = try TemporaryLedger()
        XCTAssertEqual(try temp.submit(create("P1M", id: "c1"))["ok"], true)
        let events = try temp.allValues().map { String(decoding: $0, as: UTF8.self).replacingOccurrences(of: "\"P1M\"", with: "\"P1M1M\"") }
        let values = VerifierTests.rechained(try events.map { try JSONValue(parsing: $0) })
        let old = try Command(json: try JSONValue(parsing: create("P1M1M", id: "c1")), now: .now())
        XCTAssertEqual(Command.newCommandRejection(old, old.json)?.code, .invalidCommand, "the bound no longer refuses the rewritten command")
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        try env.write { txn in
            for (n, value) in values.enumerated() { try txn.put(EventLog.eventsDatabase, EventLog.key(UInt64(n + 1)), value) }
            try EventLog.writeHead(ChainHead(position: UInt64(values.count), hash: SHA256.hex(values.last!)), txn)
            var entry = try XCTUnwrap(try IdempotencyIndex.entry(app: "a", id: "c1", txn))
            entry.fingerprint = old.fingerprint
            try IdempotencyIndex.remember(app: "a", id: "c1", entry, txn)
        }
        try temp.reopen(rebuildingProjections: true)
        return temp
    }

    func testARetryOfACommandRecordedBeforeABoundAnswersItsFirstResult() throws {
        let temp = try ledgerRecordedBeforeTheBound()
        let head = try temp.ledger.currentHead().position
        XCTAssertTrue(try temp.ledger.verify().isClean)

        let retry = try temp.submit(create("P1M1M", id: "c1"))
        XCTAssertEqual(retry["ok"], true, retry.text)
        XCTAssertEqual(retry["duplicate"], true, retry.text)
        XCTAssertEqual(retry["position"].intValue, Int64(head))

        // A new command breaking the bound is refused, with an id or without, and records nothing.
        for text in [create("P1M1M", id: "c2").replacingOccurrences(of: "\"p\"", with: "\"q\""),
                     create("P1M1M", id: "x").replacingOccurrences(of: #""id":"x","#, with: "").replacingOccurrences(of: "\"p\"", with: "\"q\"")] {
            let refused = try temp.submit(text)
            XCTAssertEqual(refused["error"]["code"], "invalid_command", refused.text)
            XCTAssertTrue(refused["error"]["message"].stringValue?.contains("repeats a unit") ?? false, refused.text)
        }
        // Under the id of another command it is refused for what it is, not as an id conflict.
        let reused = try temp.submit(create("P1M1M", id: "c1").replacingOccurrences(of: "\"p\"", with: "\"q\""))
        XCTAssertEqual(reused["error"]["code"], "invalid_command", reused.text)
        XCTAssertEqual(try temp.submit(create("P1M", id: "c1").replacingOccurrences(of: "\"p\"", with: "\"q\""))["error"]["code"], "idempotency_conflict")
        XCTAssertEqual(try temp.ledger.currentHead().position, head)
        // … and its id stays free for the command put right.
        XCTAssertEqual(try temp.submit(create("P1M", id: "c2").replacingOccurrences(of: "\"p\"", with: "\"q\""))["ok"], true)
    }
}
