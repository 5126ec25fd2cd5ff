import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
import XCTest

/// `rebuild`'s pipeline: the audit index written in batches by a stage of its own while the fold
/// goes on, and the state snapshot saved while the projections are written.
final class RebuildTests: XCTestCase {
    /// A program with `inviters` inviters, each with `friends` enrolled friends (trusted evidence),
    /// played through the ledger: a few thousand audit index entries.
    private func playReferrals(_ temp: TemporaryLedger, inviters: Int, friends: Int) throws {
        try temp.submit(#"{"type":"app.configure","app":"acme","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        try temp.submit(#"{"type":"program.create","app":"acme","at":"2026-01-01T00:00:00Z","program":"spring","environment":"live","config":{"inviter":{"qualifying_event":"signup_completed","reward":{"mode":"every","friends":2,"max_rewards":null,"benefit":{"type":"points","amount":10}}},"friend":{"trigger":"invite_accepted","benefit":{"type":"points","amount":5}},"new_users_only":true,"delivery":"automatic","notify":[]}}"#)
        try temp.submit(#"{"type":"program.activate","app":"acme","at":"2026-01-01T00:00:00Z","program":"spring"}"#)
        for i in 0..<inviters {
            let invite = try temp.submit(["type": "invite.create", "app": "acme", "at": "2026-01-02T00:00:00Z", "program": "spring", "user": .string("inviter-\(i)")])
            let code = try XCTUnwrap(invite["code"].stringValue)
            let enrolments: [[UInt8]] = (0..<friends).map { f in
                JSONValue.object(["type": "referral.enroll", "app": "acme", "at": "2026-01-03T00:00:00Z", "program": "spring",
                                  "user": .string("friend-\(i)-\(f)"), "code": .string(code), "account_created_at": "2026-01-03T00:00:00Z"]).bytes
            }
            for result in try temp.ledger.submit(lines: enrolments) { XCTAssertTrue(result.json["ok"].boolValue ?? false, result.json.text) }
        }
    }

    /// Every projection database, entry by entry.
    private func projections(_ ledger: Ledger) throws -> [String: [[UInt8]]] {
        try ledger.environment.read { txn in
            var all: [String: [[UInt8]]] = [:]
            for name in ProjectionStore.all {
                var entries: [[UInt8]] = []
                try txn.scan(name) { key, value in
                    entries.append(Array(key) + [0xFF] + Array(value))
                    return true
                }
                all[name] = entries
            }
            return all
        }
    }

    /// Participant and reward records are written member by member, not as trees: across every
    /// fixture history, each stored one is canonical JSON (what writing its tree gives, byte for
    /// byte), as a command wrote it and as a rebuild writes it again.
    func testRecordsWrittenMemberByMemberAreCanonical() throws {
        var checked = 0
        for name in FixtureRunner.all {
            let temp = try TemporaryLedger()
            try temp.play(name)
            let incremental = try projections(temp.ledger)
            _ = try temp.ledger.rebuildProjections()
            let rebuilt = try projections(temp.ledger)
            for database in [ProjectionStore.participants, ProjectionStore.rewards] {
                XCTAssertTrue(rebuilt[database] == incremental[database], "\(name): \(database) differs after a rebuild")
                try temp.ledger.environment.read { txn in
                    try txn.scan(database) { _, value in
                        let bytes = Array(value)
                        let (parsed, canonical) = try JSONParser.parseNotingForm(bytes)
                        XCTAssertEqual(canonical, true, "\(name): \(String(decoding: bytes, as: UTF8.self))")
                        XCTAssertEqual(parsed.bytes, bytes)
                        XCTAssertNotNil(parsed["program"].stringValue)
                        checked += 1
                        return true
                    }
                }
            }
        }
        XCTAssertGreaterThan(checked, 200)
    }

    func testTheAuditIndexWrittenInBatchesEqualsTheIncrementalProjections() throws {
        let temp = try TemporaryLedger(mapSize: 64 << 10)
        try playReferrals(temp, inviters: 30, friends: 20)
        try temp.play("caps")
        let incremental = try projections(temp.ledger)
        XCTAssertGreaterThan(try temp.ledger.currentHead().position, 2000)
        XCTAssertGreaterThan(incremental[ProjectionStore.audit]?.count ?? 0, 200, "too small a ledger to send many batches through the stage")
        for batch in [7, 1000, Ledger.auditBatch] {
            _ = try temp.ledger.rebuildProjections(progress: nil, auditBatch: batch)
            let rebuilt = try projections(temp.ledger)
            for name in ProjectionStore.all {
                XCTAssertEqual(rebuilt[name]?.count, incremental[name]?.count, "\(name), batches of \(batch)")
                XCTAssertTrue(rebuilt[name] == incremental[name], "\(name) differs after a rebuild in batches of \(batch)")
            }
            XCTAssertTrue(try temp.ledger.verify().isClean)
        }
    }

    /// A rebuild of a ledger past the snapshot interval encodes the state snapshot from its fold as
    /// it writes the projections, and the next save writes those bytes (after the projections'
    /// commit, never beside it): the next writer's open loads it and has the same state.
    func testARebuildSavesTheStateSnapshotFromItsFold() throws {
        let temp = try TemporaryLedger()
        try playReferrals(temp, inviters: 5, friends: 4)
        let folder = temp.folder
        temp.close()
        let head: UInt64
        do {
            let ledger = try Ledger(folder: folder, snapshotInterval: 10)
            head = try ledger.currentHead().position
            XCTAssertEqual(try ledger.rebuildProjections(progress: nil, auditBatch: 5), head)
            XCTAssertNil(StateSnapshot.read(folder: folder), "the rebuild wrote a snapshot file while it wrote the projections")
            XCTAssertEqual(ledger.preparedSnapshot?.head.position, head, "the rebuild encoded no snapshot")
            XCTAssertTrue(try ledger.saveStateSnapshot())
            XCTAssertNil(ledger.preparedSnapshot, "the save kept the encoded bytes")
            XCTAssertEqual(ledger.snapshotPosition, head)
            XCTAssertFalse(try ledger.saveStateSnapshot(), "a second save of the same state")
        }
        let meta = try XCTUnwrap(StateSnapshot.read(folder: folder)?.meta)
        XCTAssertEqual(meta.position, head)
        let reopened = try Ledger(folder: folder)
        XCTAssertEqual(reopened.snapshotPosition, head, "the open did not load the rebuild's snapshot")
        XCTAssertTrue(try reopened.verify().isClean)
    }

    /// A snapshot due at a writer's open that cannot be written does not fail the open; the
    /// ledger says why (`snapshotErrorAtOpen`, which the CLI reports) and works on.
    func testASnapshotThatCannotBeSavedAtTheOpenIsReportedNotFatal() throws {
        let temp = try TemporaryLedger()
        try playReferrals(temp, inviters: 2, friends: 3)
        let folder = temp.folder
        temp.close()
        // The save's partial file cannot be created: a folder stands at its name.
        let partial = folder + "/" + StateSnapshot.partialPrefix + String(getpid())
        try FileManager.default.createDirectory(atPath: partial, withIntermediateDirectories: false)
        do {
            let ledger = try Ledger(folder: folder, snapshotInterval: 1)
            XCTAssertNotNil(ledger.snapshotErrorAtOpen)
            XCTAssertNil(StateSnapshot.read(folder: folder))
            let late = try JSONValue(parsing: #"{"type":"account.verify","app":"acme","user":"late","account_created_at":"2026-01-01T00:00:00Z"}"#)
            XCTAssertEqual(try ledger.submit(late).json["ok"], true)
        }
        try FileManager.default.removeItem(atPath: partial)
        let reopened = try Ledger(folder: folder, snapshotInterval: 1)
        XCTAssertNil(reopened.snapshotErrorAtOpen)
        XCTAssertNotNil(StateSnapshot.read(folder: folder), "the next open saved it")
    }

    /// The stage works through its items in order; its first error drops the rest and is
    /// rethrown by the next submit and by `finish`.
    func testASerialStageKeepsOrderAndStopsAtItsFirstError() throws {
        struct Refused: Error, Equatable { let item: Int }
        let seen = Shared<[Int]>([])
        let stage = SerialStage<Int>(label: "test", depth: 2) { item in
            if item == 5 { throw Refused(item: item) }
            seen.mutate { $0.append(item) }
        }
        var refusedAt: Int?
        for item in 0..<50 {
            do { try stage.submit(item) } catch {
                XCTAssertEqual(error as? Refused, Refused(item: 5))
                refusedAt = item
                break
            }
        }
        XCTAssertThrowsError(try stage.finish()) { XCTAssertEqual($0 as? Refused, Refused(item: 5)) }
        XCTAssertEqual(seen.value, [0, 1, 2, 3, 4])
        XCTAssertNotNil(refusedAt, "submit went on after the stage failed")

        let clean = SerialStage<Int>(label: "test", depth: 1) { item in seen.mutate { $0.append(item) } }
        seen.value = []
        for item in 0..<100 { try clean.submit(item) }
        try clean.finish()
        XCTAssertEqual(seen.value, Array(0..<100))
    }

    /// An event's audit subjects: each user it names once (as user, friend, inviter or recipient,
    /// in that order), its program, its app; consecutive events of a block share one entry each.
    func testAnEventIsIndexedOnceUnderEachSubjectItNames() {
        struct Event: LoggedEvent { var position: UInt64; var type: String; var data: JSONValue }
        let events = [
            Event(position: 1, type: "reward.earned", data: ["app": "acme", "program": "spring", "inviter": "ann", "recipient": "ann", "friend": "bo"]),
            Event(position: 2, type: "referral.enrolled", data: ["app": "acme", "program": "spring", "user": "bo", "friend": "bo", "inviter": "ann"]),
            Event(position: 3, type: "account.verified", data: ["app": "acme", "user": "cy"]),
            Event(position: 251, type: "account.verified", data: ["app": "acme", "user": "ann"]),
        ]
        var entries = ProjectionStore.indexEntries(events)
        ProjectionStore.Entry.sortInKeyOrder(&entries)
        func described(_ e: ProjectionStore.Entry) -> String {
            let subject = e.key.dropLast(9).map { $0 == 0 ? "/" : String(UnicodeScalar($0)) }.joined()
            return e.key.withUnsafeBytes { k in e.value.withUnsafeBytes { v in
                subject + " " + ProjectionStore.auditPositions(key: k, value: v).map(String.init).joined(separator: ",")
            } }
        }
        XCTAssertEqual(entries.map(described), [
            "acme/a 1,2,3", "acme/a 251",
            "acme/p/spring 1,2",
            "acme/u/ann 1,2", "acme/u/ann 251",
            "acme/u/bo 1,2",
            "acme/u/cy 3",
        ])
        // Each event's own entries (what `verify` recomputes) name the same subjects, once each.
        var own: [ProjectionStore.Entry] = []
        ProjectionStore.auditEntries(events[0], into: &own)
        XCTAssertEqual(own.map { described($0).split(separator: " ")[0] }, ["acme/u/bo", "acme/u/ann", "acme/p/spring", "acme/a"])
    }
}
