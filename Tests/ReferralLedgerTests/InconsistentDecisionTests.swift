import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
import XCTest

/// A command the rules cannot decide consistently (here: a history altered outside the ledger,
/// holding bob's welcome reward before bob enrolled) is answered `internal_error` alone; the
/// other commands of its batch (in a server, other clients' commands) are decided and recorded.
final class InconsistentDecisionTests: XCTestCase {
    private let setup = [
        #"{"type":"app.configure","app":"a","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#,
        #"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":null,"friend":{"trigger":"invite_accepted","benefit":{"type":"points","amount":5}},"new_users_only":false}}"#,
        #"{"type":"program.activate","app":"a","at":"2026-01-01T00:00:00Z","program":"p"}"#,
        #"{"type":"invite.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","user":"alice"}"#,
    ]

    private func enroll(_ friend: String, code: String) -> String {
        #"{"type":"referral.enroll","app":"a","at":"2026-01-02T00:00:00Z","program":"p","user":""# + friend + #"","code":""# + code + #""}"#
    }

    /// A ledger whose log holds bob's welcome reward right after alice's invite, without his
    /// enrolment (re-chained, as a forger would); answers it and alice's code.
    private func forgedLedger() throws -> (TemporaryLedger, String) {
        let honest = try TemporaryLedger()
        for line in setup { XCTAssertEqual(try honest.submit(line)["ok"], true, line) }
        let code = try XCTUnwrap(honest.ledger.withState { state, _ in state.apps["a"]?.programs["p"]?.invites["alice"] })
        let enrolled = try honest.submit(enroll("bob", code: code))
        XCTAssertEqual(enrolled["ok"], true)
        var events = try honest.allValues().map { try JSONValue(parsing: $0) }
        let earned = try XCTUnwrap(events.firstIndex { $0["type"] == "reward.earned" })
        events = Array(events[..<setup.count]) + [events[earned]]
        let values = VerifierTests.rechained(events)
        let forged = try TemporaryLedger()
        forged.close()
        let env = try LMDBEnvironment.open(path: forged.folder, databases: Ledger.databases)
        try env.write { txn in
            for (n, value) in values.enumerated() { try txn.put(EventLog.eventsDatabase, EventLog.key(UInt64(n + 1)), value) }
            try EventLog.writeHead(ChainHead(position: UInt64(values.count), hash: SHA256.hex(values.last!)), txn)
        }
        try forged.reopen(rebuildingProjections: true)
        return (forged, code)
    }

    func testTheInconsistentCommandIsSetAsideAndTheRestOfItsBatchIsRecorded() throws {
        let (temp, code) = try forgedLedger()
        let head = try temp.ledger.currentHead().position
        let batch = [
            #"{"type":"account.verify","app":"a","at":"2026-01-02T00:00:00Z","user":"carol","account_created_at":"2026-01-01T00:00:00Z","id":"c1"}"#,
            enroll("bob", code: code),
            #"{"type":"account.verify","app":"a","at":"2026-01-02T00:00:00Z","user":"dave","account_created_at":"2026-01-01T00:00:00Z"}"#,
        ]
        let results = try temp.ledger.submit(lines: batch.map { Array($0.utf8) })
        XCTAssertEqual(results.map(\.ok), [true, false, true], results.map(\.text).joined(separator: "\n"))
        XCTAssertEqual(results[1].errorCode, "internal_error")
        XCTAssertTrue(results[1].isInternalError && !results[1].isBusinessRejection)
        XCTAssertTrue(results[1].errorMessage?.contains("referral.enroll command could not be decided consistently") ?? false, results[1].text)
        XCTAssertEqual(results[0].position, head + 1)
        XCTAssertEqual(results[2].position, head + 2, "the set-aside command recorded nothing")
        // The state goes on from the committed log: the id is remembered, the next command decided.
        XCTAssertEqual(try temp.ledger.submit(lines: [Array(batch[0].utf8)])[0].isDuplicate, true)
        XCTAssertEqual(try temp.submit(#"{"type":"account.verify","app":"a","at":"2026-01-03T00:00:00Z","user":"erin","account_created_at":"2026-01-01T00:00:00Z"}"#)["position"], .int(Int64(head + 3)))
        // Alone, the command is answered the same.
        XCTAssertEqual(try temp.ledger.submit(lines: [Array(batch[1].utf8)])[0].errorCode, "internal_error")
        XCTAssertEqual(try temp.ledger.currentHead().position, head + 3)
    }
}
