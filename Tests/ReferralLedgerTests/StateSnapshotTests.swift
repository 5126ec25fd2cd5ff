import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
@testable import ReferralRules
import XCTest

/// The writer's state snapshot: a state read back from its bytes is the state it was written
/// from, field by field (compared by reflection, so a field the snapshot forgot fails here), for
/// every fixture history; an open loads only a snapshot it can trust and folds the rest.
final class StateSnapshotTests: XCTestCase {
    /// Every stored field of `value`, recursively, as text: dictionaries and sets in sorted order
    /// (their order in memory is not part of the state). Nothing is left out by name.
    static func canonical(_ value: Any) -> String {
        let mirror = Mirror(reflecting: value)
        switch mirror.displayStyle {
        case .dictionary:
            let entries = mirror.children.map { child -> String in
                let pair = Mirror(reflecting: child.value).children.map { canonical($0.value) }
                return pair.joined(separator: ": ")
            }
            return "[" + entries.sorted().joined(separator: ", ") + "]"
        case .set:
            return "{" + mirror.children.map { canonical($0.value) }.sorted().joined(separator: ", ") + "}"
        case .optional:
            return mirror.children.first.map { "some(" + canonical($0.value) + ")" } ?? "nil"
        case .collection:
            return "[" + mirror.children.map { canonical($0.value) }.joined(separator: ", ") + "]"
        case .struct, .class, .tuple, .enum:
            if mirror.children.isEmpty { return "\(type(of: value)).\(value)" }
            return "\(type(of: value))(" + mirror.children.map { ($0.label ?? "_") + ": " + canonical($0.value) }.joined(separator: ", ") + ")"
        default:
            return String(reflecting: value)
        }
    }

    /// Where two byte strings first differ ("at byte N of M and K"), or nil when they are equal.
    static func firstDifference(_ a: [UInt8], _ b: [UInt8]) -> String? {
        guard a != b else { return nil }
        let at = zip(a.indices, zip(a, b)).first { $0.1.0 != $0.1.1 }?.0 ?? min(a.count, b.count)
        return "at byte \(at) of \(a.count) and \(b.count)"
    }

    /// The state's content, without the scratch of a decision in progress and without `changes`
    /// (what a writer has still to write to the projections).
    static func content(_ state: LedgerState) -> String {
        let kept: Set<String> = ["head", "apps", "deliveryQueue", "pendingNotifications"]
        let fields = Mirror(reflecting: state).children.filter { kept.contains($0.label ?? "") }
        XCTAssertEqual(fields.count, kept.count, "LedgerState's fields were renamed: update this test")
        return fields.map { ($0.label ?? "_") + ": " + canonical($0.value) }.joined(separator: "\n")
    }

    func testEveryFixtureStateReadsBackFromItsSnapshotFieldByField() throws {
        var compared = 0
        for name in FixtureRunner.all {
            let temp = try TemporaryLedger()
            var runner = FixtureRunner(ledger: temp.ledger)
            try runner.run(name)
            let ledger = temp.ledger!
            let (folded, head) = try Ledger.fold(ledger.environment)
            XCTAssertEqual(head.position, try ledger.currentHead().position)
            let bytes = folded.snapshotBytes()
            let loaded = try LedgerState(snapshot: bytes)
            let expected = Self.content(folded)
            XCTAssertEqual(Self.content(loaded), expected, "\(name): the state read back from its snapshot differs")
            // The writer's state, built command by command, is the fold of its log too.
            XCTAssertEqual(ledger.withState { state, _ in Self.content(state) }, expected, "\(name): the writer's state differs from a fold of its log")
            // Written again, the state read back gives the same bytes' worth of content.
            XCTAssertEqual(Self.content(try LedgerState(snapshot: loaded.snapshotBytes())), expected, name)
            // One state, one snapshot: the same bytes from the fold, from the state read back (its
            // dictionaries built in another order) and from the writer's, built command by command.
            XCTAssertNil(Self.firstDifference(loaded.snapshotBytes(), bytes), "\(name): a state read back from its snapshot writes other bytes")
            XCTAssertNil(Self.firstDifference(ledger.withState { state, _ in state.snapshotBytes() }, bytes), "\(name): the writer's state writes other bytes than the fold")
            compared += 1
        }
        XCTAssertGreaterThan(compared, 20)
    }

    /// The comparison sees a difference: states one event apart, or one field changed, differ.
    func testTheComparisonSeesADifferenceOfOneField() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let head = try temp.ledger.currentHead().position
        let (whole, _) = try Ledger.fold(temp.ledger.environment)
        let (shorter, _) = try Ledger.fold(temp.ledger.environment, until: head - 1)
        XCTAssertNotEqual(Self.content(whole), Self.content(shorter))
        var changed = whole
        let app = try XCTUnwrap(changed.apps.keys.sorted().first)
        changed.apps[app]!.knownUsers.insert("someone-new")
        XCTAssertNotEqual(Self.content(whole), Self.content(changed))
        var reward = whole
        let program = try XCTUnwrap(reward.apps[app]!.programs.values.first { !$0.rewards.isEmpty })
        let id = try XCTUnwrap(program.rewards.keys.sorted().first)
        reward.apps[app]!.programs[program.key]!.rewards[id]!.attempts += 1
        XCTAssertNotEqual(Self.content(whole), Self.content(reward))
    }

    /// A secret written in the clear in a log (altered outside the ledger, or older than secrets'
    /// redaction) is folded as its digest: neither the state nor its snapshot holds it.
    func testASecretInTheClearInTheLogNeverReachesTheStateNorItsSnapshot() throws {
        var state = LedgerState()
        let settings: JSONValue = ["friend_referrals_enabled": true, "webhook_secret": "hunter2-secret", "revenuecat_api_key": "sk_live_secret"]
        try state.apply(type: "app.configured", at: Timestamp(milliseconds: 0),
                        data: ["app": "a", "settings": settings, "command": ["type": "app.configure", "app": "a", "settings": settings]], position: 1)
        let app = try XCTUnwrap(state.apps["a"])
        XCTAssertNil(app.settings.webhookSecret)
        XCTAssertNil(app.settings.revenueCatAPIKey)
        XCTAssertEqual(app.settings.secretDigests["webhook_secret"], SHA256.hex("hunter2-secret"))
        XCTAssertEqual(app.settings.publicJSON["webhook_secret"], "set")
        let bytes = state.snapshotBytes()
        for secret in ["hunter2-secret", "sk_live_secret"] {
            XCTAssertFalse(String(decoding: bytes, as: UTF8.self).contains(secret), "\(secret) is in the snapshot")
        }
    }

    /// A program's enrolments, inviters and rewards are written in the order its lists keep them
    /// (no sort) only when a list names exactly the dictionary's keys: a list short of one falls
    /// back to key order and the state still reads back whole; a list naming one key twice (and
    /// missing another) makes bytes that are refused, never a state with an entry lost.
    func testAProgramsOrderListsThatDisagreeWithItsEntriesNeverLoseOne() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let (state, _) = try Ledger.fold(temp.ledger.environment)
        let app = try XCTUnwrap(state.apps.first { $0.value.programs.values.contains { $0.enrollments.count >= 2 } }?.key)
        let program = try XCTUnwrap(state.apps[app]!.programs.values.first { $0.enrollments.count >= 2 }?.key)
        let order = state.apps[app]!.programs[program]!.enrollmentOrder
        XCTAssertEqual(Set(order), Set(state.apps[app]!.programs[program]!.enrollments.keys))

        var short = state
        short.apps[app]!.programs[program]!.enrollmentOrder = Array(order.dropLast())
        XCTAssertEqual(Self.content(try LedgerState(snapshot: short.snapshotBytes())), Self.content(short), "a short list: key order, whole")

        var twice = state
        twice.apps[app]!.programs[program]!.enrollmentOrder = Array(order.dropLast()) + [order[0]]
        XCTAssertThrowsError(try LedgerState(snapshot: twice.snapshotBytes()), "a list naming one key twice") { error in
            XCTAssertTrue("\(error)".contains("twice"), "\(error)")
        }
        // The consistent state still reads back exactly.
        XCTAssertEqual(Self.content(try LedgerState(snapshot: state.snapshotBytes())), Self.content(state))
    }

    func testBytesCutShortOrOfAnotherFormatAreRefused() throws {
        let temp = try TemporaryLedger()
        try temp.play("inventory")
        let (state, _) = try Ledger.fold(temp.ledger.environment)
        let bytes = state.snapshotBytes()
        for cut in [1, bytes.count / 3, bytes.count - 1] {
            XCTAssertThrowsError(try LedgerState(snapshot: Array(bytes.prefix(cut))), "cut at \(cut)")
        }
        XCTAssertThrowsError(try LedgerState(snapshot: bytes + [0]), "a byte too many")
        var other = bytes
        other[0] = UInt8(LedgerState.snapshotFormat + 1)
        XCTAssertThrowsError(try LedgerState(snapshot: other)) { error in
            XCTAssertTrue("\(error)".contains("snapshot format"), "\(error)")
        }
    }

    /// Saved, a snapshot is loaded by the next open, which folds only the events after it; the
    /// state goes on exactly as a fold of the whole log would have it.
    func testAnOpenLoadsTheSnapshotAndFoldsOnlyTheRest() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        XCTAssertFalse(try temp.ledger.saveStateSnapshot(), "a short ledger is not worth a snapshot")
        XCTAssertTrue(try temp.ledger.saveStateSnapshot(interval: 0))
        XCTAssertFalse(try temp.ledger.saveStateSnapshot(interval: 0), "nothing new since")
        let saved = try temp.ledger.currentHead().position
        let status = try temp.ledger.status()
        XCTAssertEqual(status["state_snapshot"]["position"], .int(Int64(saved)))
        XCTAssertEqual(status["state_snapshot"]["this_build"], true)
        XCTAssertNil(status["entries"].objectValue?["state_snapshot"], "not an LMDB database")

        try temp.reopen()
        XCTAssertEqual(temp.ledger.snapshotPosition, saved, "the open loaded the snapshot")
        try temp.play("competing-inviters")
        let (folded, _) = try Ledger.fold(temp.ledger.environment)
        XCTAssertEqual(temp.ledger.withState { s, _ in Self.content(s) }, Self.content(folded))
        XCTAssertTrue(try temp.ledger.verify().isClean)

        // Reopened again: the old snapshot, then the events after it.
        try temp.reopen()
        XCTAssertEqual(temp.ledger.snapshotPosition, saved)
        XCTAssertEqual(temp.ledger.withState { s, _ in Self.content(s) }, Self.content(folded))
    }

    /// Saved while commands go on (the state is encoded outside the write lock), a snapshot holds
    /// the state at the position it names: the fold of the log up to there.
    func testASnapshotSavedWhileCommandsGoOnIsTheStateAtItsPosition() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let savedAt = try saveWhileWriting(temp.ledger)
        try temp.reopen()
        XCTAssertEqual(temp.ledger.snapshotPosition, savedAt)
        XCTAssertTrue(try temp.ledger.verify().isClean)
    }

    /// Saves snapshots while another thread submits 300 commands; answers the last one's position.
    private func saveWhileWriting(_ ledger: Ledger) throws -> UInt64 {
        let writing = DispatchGroup()
        DispatchQueue.global().async(group: writing) {
            for i in 0..<300 {
                _ = try? ledger.submit(JSONValue(parsing: #"{"type":"account.verify","app":"acme","at":"2026-03-05T00:00:00Z","user":"u\#(i)","account_created_at":"2026-03-04T00:00:00Z"}"#))
            }
        }
        /// The snapshot stored now, checked against the fold of the log up to its position.
        func checkSaved() throws -> UInt64 {
            let saved = try XCTUnwrap(StateSnapshot.read(folder: ledger.folder))
            let (state, head) = try XCTUnwrap(StateSnapshot.state(from: saved.bytes, saved.meta))
            XCTAssertEqual(Self.content(state), Self.content(try Ledger.fold(ledger.environment, until: head.position).0), "at \(head.position)")
            return head.position
        }
        var saves = 0, checkedMidway = false
        while writing.wait(timeout: .now()) == .timedOut {
            if try ledger.saveStateSnapshot(interval: 1) {
                saves += 1
                if !checkedMidway, try checkSaved() < ledger.currentHead().position { checkedMidway = true }
            }
        }
        if try ledger.saveStateSnapshot(interval: 1) { saves += 1 }
        XCTAssertGreaterThan(saves, 1)
        XCTAssertTrue(checkedMidway, "a snapshot was checked while commands went on")
        let saved = try XCTUnwrap(StateSnapshot.read(folder: ledger.folder))
        let (state, head) = try XCTUnwrap(StateSnapshot.state(from: saved.bytes, saved.meta))
        XCTAssertEqual(head.position, try ledger.currentHead().position, "the last save is at the head")
        XCTAssertEqual(Self.content(state), Self.content(try Ledger.fold(ledger.environment).0))
        return head.position
    }

    /// A snapshot that cannot be trusted is passed over for a full fold (and replaced at the next
    /// save): written by another build, altered, cut short, naming a hash its position's event does
    /// not have, or a size its file does not have (nothing is allocated for it).
    func testASnapshotThatCannotBeTrustedIsPassedOver() throws {
        let temp = try TemporaryLedger()
        try temp.play("inventory")
        XCTAssertTrue(try temp.ledger.saveStateSnapshot(interval: 0))
        let (folded, head) = try Ledger.fold(temp.ledger.environment)
        let expected = Self.content(folded)
        temp.close()
        let path = StateSnapshot.path(temp.folder)
        let file = try XCTUnwrap(FileManager.default.contents(atPath: path).map { [UInt8]($0) })
        let newline = try XCTUnwrap(file.firstIndex(of: 0x0A))
        let (meta, body) = (Array(file[..<newline]), Array(file[(newline + 1)...]))
        func edited(_ key: String, _ value: JSONValue) throws -> [UInt8] {
            guard case .object(var o) = try JSONParser.parse(meta) else { throw XCTSkip("meta is not an object") }
            o[key] = value
            return JSONValue.object(o).bytes
        }
        var flipped = body
        flipped[flipped.count / 2] ^= 0x01
        let tamperings: [(String, [UInt8], [UInt8])] = [
            ("another build", try edited("build", .string(String(repeating: "0", count: 64))), body),
            ("another format", try edited("format", .int(Int64(LedgerState.snapshotFormat + 1))), body),
            ("a hash the event does not have", try edited("hash", .string(SHA256.hex("other"))), body),
            ("a position past the log", try edited("position", .int(Int64(head.position + 5))), body),
            ("a flipped bit", meta, flipped),
            ("cut short", meta, Array(body.dropLast())),
            ("a size no file has", try edited("bytes", .int(1 << 60)), body),
            ("no meta line", [], body),
        ]
        for (what, newMeta, newBody) in tamperings {
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(newMeta + [0x0A] + newBody)))
            let ledger = try Ledger(folder: temp.folder)
            XCTAssertEqual(ledger.snapshotPosition, 0, "\(what): the snapshot was loaded")
            XCTAssertEqual(ledger.withState { s, _ in Self.content(s) }, expected, what)
        }
        // The untrusted one is replaced at the next save; a rebuild drops it.
        let ledger = try Ledger(folder: temp.folder)
        XCTAssertTrue(try ledger.saveStateSnapshot(interval: 0))
        XCTAssertEqual(ledger.snapshotPosition, head.position)
        XCTAssertEqual(StateSnapshot.meta(folder: temp.folder)?.position, head.position)
        XCTAssertEqual(try ledger.rebuildProjections(), head.position)
        XCTAssertNil(StateSnapshot.meta(folder: temp.folder))
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }

    /// Something other than a regular file under the snapshot's name (a FIFO nobody writes to)
    /// is passed over at once: an open or `status` must not wait on it.
    func testASnapshotNameThatIsNoFileIsPassedOver() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        temp.close()
        XCTAssertEqual(mkfifo(StateSnapshot.path(temp.folder), 0o600), 0)
        try temp.reopen()
        XCTAssertEqual(temp.ledger.snapshotPosition, 0)
        XCTAssertEqual(try temp.ledger.status()["state_snapshot"], .null)
    }

    /// Without an interval of its own, a save waits for the writer's interval and an eighth of the
    /// log since the last one, and for ten minutes after a save that failed.
    func testSavesWaitForAnEighthOfTheLogAndAfterAFailure() throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-snapshot-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let ledger = try Ledger(folder: folder, snapshotInterval: 1)
        var runner = FixtureRunner(ledger: ledger)
        try runner.run("caps")
        func verifyUser(_ n: Int) throws {
            _ = try ledger.submit(JSONValue(parsing: #"{"type":"account.verify","app":"acme","at":"2026-03-05T00:00:00Z","user":"e\#(n)","account_created_at":"2026-03-04T00:00:00Z"}"#))
        }
        let head = try ledger.currentHead().position
        XCTAssertGreaterThanOrEqual(head, 9)
        XCTAssertTrue(try ledger.saveStateSnapshot())
        try verifyUser(1)
        XCTAssertFalse(try ledger.saveStateSnapshot(), "one event is less than an eighth of the log")
        let eighth = Int((head + 1) / 8 + 1)
        for n in 2...eighth { try verifyUser(n) }
        XCTAssertTrue(try ledger.saveStateSnapshot())
        XCTAssertEqual(ledger.snapshotPosition, try ledger.currentHead().position)

        // A save that fails (here a folder stands where its partial file goes) is reported, and
        // the next ones without an interval of their own wait; an explicit one tries at once.
        for n in 100..<(100 + eighth + 2) { try verifyUser(n) }
        let blocker = folder + "/" + StateSnapshot.partialPrefix + String(getpid())
        try FileManager.default.createDirectory(atPath: blocker + "/inside", withIntermediateDirectories: true)
        XCTAssertThrowsError(try ledger.saveStateSnapshot()) { error in
            XCTAssertEqual((error as? LedgerError)?.code, "snapshot_not_saved", "\(error)")
        }
        try FileManager.default.removeItem(atPath: blocker)
        XCTAssertFalse(try ledger.saveStateSnapshot(), "waits after a failure")
        XCTAssertTrue(try ledger.saveStateSnapshot(interval: 1))
        XCTAssertEqual(StateSnapshot.meta(folder: folder)?.position, try ledger.currentHead().position)
    }

    /// A save killed before its rename leaves a partial file: the ledger opens as before and the
    /// next save removes it.
    func testAPartialFileLeftByAKilledSaveIsIgnoredAndRemoved() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let partial = temp.folder + "/" + StateSnapshot.partialPrefix + "999999"
        XCTAssertTrue(FileManager.default.createFile(atPath: partial, contents: Data("{\"format\":1".utf8)))
        try temp.reopen()
        XCTAssertEqual(temp.ledger.snapshotPosition, 0)
        XCTAssertTrue(try temp.ledger.saveStateSnapshot(interval: 0))
        XCTAssertFalse(FileManager.default.fileExists(atPath: partial))
        let names = try FileManager.default.contentsOfDirectory(atPath: temp.folder)
        XCTAssertEqual(names.filter { $0.hasPrefix("state.snapshot") }, [StateSnapshot.fileName])
    }
}
