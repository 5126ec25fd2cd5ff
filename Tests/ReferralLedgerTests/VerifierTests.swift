import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger
import Synchronization
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
        let files = try FileManager.default.contentsOfDirectory(atPath: ProjectPaths.fixtures.path).filter { $0.hasPrefix("bad-") && $0.hasSuffix(".jsonl") }
        XCTAssertEqual(Set(entries.keys), Set(files), "every bad-history fixture names its rule in bad-histories.json")
        for (file, rule) in entries {
            let report = try Ledger.verify(exportLines: try lines(ProjectPaths.fixtures.appendingPathComponent(file)))
            XCTAssertFalse(report.isClean, "\(file) verified clean")
            XCTAssertTrue(report.violations.contains { $0.rule == rule.stringValue }, "\(file): \(rule) not reported:\n\(report.text)")
        }
    }

    /// The fast replay (one state) proves clean histories alone, and hands every bad one to the
    /// full replay, so the report names exactly what a full replay names.
    func testTheFastReplayDefersToTheFullReplayOnEverySurprise() throws {
        func replay(_ mode: LedgerVerifier.Replay, _ values: [[UInt8]]) -> (LedgerVerifier, [Violation]) {
            var verifier = LedgerVerifier(replay: mode)
            for v in values { verifier.add(key: nil, value: v) }
            let violations = verifier.finish(head: nil)
            return (verifier, violations)
        }
        let manifest = try JSONValue(parsing: Array(try Data(contentsOf: ProjectPaths.fixtures.appendingPathComponent("bad-histories.json"))))
        var deferred = 0
        for file in (manifest.objectValue ?? [:]).keys.sorted() {
            let values = try lines(ProjectPaths.fixtures.appendingPathComponent(file))
            let (fast, _) = replay(.fast, values)  // `finish` re-decides the last command too
            let (_, full) = replay(.full, values)
            if fast.needsFullReplay { deferred += 1 }
            XCTAssertEqual(try Ledger.verify(exportLines: values).violations, full, file)
        }
        XCTAssertGreaterThan(deferred, 0, "no bad history reached the full replay")
        let temp = try TemporaryLedger()
        try temp.play("edit-threshold-lowered")
        let values = try temp.allValues()
        let (fast, fastViolations) = replay(.fast, values)
        XCTAssertFalse(fast.needsFullReplay)
        XCTAssertEqual(fastViolations, [])
        // One re-decided command whose recorded events were altered (re-chained): the fast replay defers.
        var altered = values
        guard let index = altered.firstIndex(where: { String(decoding: $0, as: UTF8.self).contains(#""type":"invite.created""#) }) else {
            return XCTFail("no invite in the fixture")
        }
        altered[index] = Array(String(decoding: altered[index], as: UTF8.self).replacingOccurrences(of: #""url":null"#, with: #""url":"https://x.test""#).utf8)
        var previous = SHA256.hex(altered[index])
        for n in (index + 1)..<altered.count {
            var event = try JSONValue(parsing: altered[n])
            event["prev_hash"] = .string(previous)
            altered[n] = event.bytes
            previous = SHA256.hex(altered[n])
        }
        XCTAssertTrue(replay(.fast, altered).0.needsFullReplay)
        let report = try Ledger.verify(exportLines: altered)
        XCTAssertEqual(report.violations.map(\.rule), ["replay.mismatch"], report.text)
        // The message names the field that differs, with both values.
        XCTAssertTrue(report.violations.first?.message.contains(#"an invite.created event whose data.url is "https://x.test" in the log, null re-decided"#) ?? false, report.text)
    }

    /// The rules are audited beside the replay, a batch of events at a time: a forgery made after
    /// thousands of other events (several batches in) is named as when it stands alone.
    func testAForgeryDeepInALongLogIsNamedAsAlone() throws {
        /// The fixture played after `padding` configurations of other apps, exported, forged by
        /// `forge` (a forger's edit of the events, re-chained), and verified.
        func violations(padding: Int, _ fixture: String, _ forge: (inout [JSONValue]) -> Void) throws -> [Violation] {
            let temp = try TemporaryLedger()
            let configures = (0..<padding).map { n in
                Array(#"{"type":"app.configure","app":"pad-\#(n)","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#.utf8)
            }
            XCTAssertTrue(try temp.ledger.submit(lines: configures).allSatisfy { $0.json["ok"] == true })
            try temp.play(fixture)
            var events = try temp.allValues().map { try JSONValue(parsing: $0) }
            XCTAssertTrue(try Ledger.verify(exportLines: Self.rechained(events)).isClean, fixture)
            forge(&events)
            return try Ledger.verify(exportLines: Self.rechained(events)).violations
        }
        let forgeries: [(String, String, (inout [JSONValue]) -> Void)] = [
            ("competing-inviters", "referral.self_referral", { events in
                guard let n = events.firstIndex(where: { $0["type"] == "referral.enrolled" }) else { return XCTFail("no enrolment") }
                events[n]["data"]["friend"] = events[n]["data"]["inviter"]
            }),
            ("inventory", "offer_code.assigned_twice", { events in
                let assigned = events.indices.filter { events[$0]["type"] == "offer_code.assigned" }
                guard assigned.count >= 2 else { return XCTFail("fewer than two assignments") }
                events[assigned[1]]["data"]["code"] = events[assigned[0]]["data"]["code"]
            }),
        ]
        let padding = 5_000
        for (fixture, rule, forge) in forgeries {
            let alone = try violations(padding: 0, fixture, forge)
            XCTAssertTrue(alone.contains { $0.rule == rule }, "\(fixture): \(alone)")
            let deep = try violations(padding: padding, fixture, forge)
            XCTAssertEqual(deep.map(\.rule), alone.map(\.rule), fixture)
            XCTAssertEqual(deep.map(\.position), alone.map { $0.position + UInt64(padding) }, fixture)
        }
    }

    /// The stored values of one ledger that played these fixture histories in turn.
    static func export(of fixtures: String...) throws -> [[UInt8]] {
        let temp = try TemporaryLedger()
        for name in fixtures { try temp.play(name) }
        return try temp.allValues()
    }

    /// Events renumbered 1, 2, … and re-chained, as a forger who recomputes the hashes would.
    static func rechained(_ events: [JSONValue]) -> [[UInt8]] {
        var previous = SHA256.zeroHex
        return events.enumerated().map { n, e in
            var event = e
            event["position"] = .int(Int64(n + 1))
            event["prev_hash"] = .string(previous)
            let out = event.bytes
            previous = SHA256.hex(out)
            return out
        }
    }

    /// A bound added to new commands (at most 50 `notify` addresses) does not apply to what the log
    /// already holds: a ledger written before it still folds, replays and verifies clean.
    func testALogWrittenBeforeANewBoundStillVerifies() throws {
        let temp = try TemporaryLedger()
        let fifty = (0..<50).map { JSONValue.string("o\($0)@example.com") }
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        XCTAssertEqual(try temp.submit(["type": "program.create", "app": "a", "at": "2026-01-01T00:00:00Z", "program": "p", "environment": "live",
                                        "config": ["inviter": .null, "friend": .null, "notify": .array(fifty)]])["ok"], true)
        // As an older version recorded it: 51 addresses, in the command and in the published config.
        var events = try temp.allValues().map { try JSONValue(parsing: $0) }
        let more = JSONValue.array(fifty + ["o50@example.com"])
        events[1]["data"]["command"]["config"]["notify"] = more
        events[1]["data"]["config"]["notify"] = more
        let report = try Ledger.verify(exportLines: Self.rechained(events))
        XCTAssertTrue(report.isClean, report.text)
        XCTAssertEqual(try temp.submit(["type": "program.create", "app": "a", "at": "2026-01-01T00:00:00Z", "program": "q", "environment": "live",
                                        "config": ["inviter": .null, "friend": .null, "notify": more]])["error"]["code"], "invalid_command")
    }

    /// IDs of only white space in a config (a milestone's id, a benefit's feature or offer id) are
    /// refused in new commands since a later version; a ledger that recorded them before still
    /// opens for writing, takes commands and rebuilds (its configs are read as they were accepted).
    func testALedgerHoldingBlankConfigIDsFromAnOlderVersionStillOpens() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        let config: JSONValue = [
            "inviter": ["qualifying_event": "level_up", "reward": ["mode": "milestones", "milestones": [
                ["id": "five", "friends": 5, "benefit": ["type": "apple_offer_code", "offer_id": "offer"]],
            ]]],
            "friend": ["trigger": "invite_accepted", "benefit": ["type": "custom", "feature": "pro", "payload": [:]]],
        ]
        XCTAssertEqual(try temp.submit(["type": "program.create", "app": "a", "at": "2026-01-01T00:00:00Z", "program": "p",
                                        "environment": "live", "config": config])["ok"], true)
        try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-01-01T00:00:00Z","program":"p"}"#)
        // As an older version accepted and recorded them: blank IDs, in the command and in the config.
        var events = try temp.allValues().map { try JSONValue(parsing: $0) }
        for path in ["command", "config"] {
            var c = path == "command" ? events[1]["data"]["command"]["config"] : events[1]["data"]["config"]
            c["inviter"]["reward"]["milestones"] = [["id": " ", "friends": 5, "benefit": ["type": "apple_offer_code", "offer_id": "\u{3000}"]]]
            c["friend"]["benefit"]["feature"] = " "
            if path == "command" { events[1]["data"]["command"]["config"] = c } else { events[1]["data"]["config"] = c }
        }
        let values = Self.rechained(events)
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        try env.write { txn in
            for (n, value) in values.enumerated() { try txn.put(EventLog.eventsDatabase, EventLog.key(UInt64(n + 1)), value) }
            try EventLog.writeHead(ChainHead(position: UInt64(values.count), hash: SHA256.hex(values.last!)), txn)
        }
        let reopened = try Ledger(folder: temp.folder, rebuildingProjections: true)
        let invite = try reopened.submit(try JSONValue(parsing: #"{"type":"invite.create","app":"a","at":"2026-01-02T00:00:00Z","program":"p","user":"ann"}"#))
        XCTAssertTrue(invite.ok, invite.json.text)
        let program = try reopened.program(app: "a", program: "p")
        XCTAssertEqual(program["config"]["friend"]["benefit"]["feature"], " ")
        // The recorded command re-reads as it was accepted: its replay gives the recorded events.
        let report = try reopened.verify()
        XCTAssertTrue(report.isClean, report.text)
        // New commands are held to the rule.
        var blank = config
        blank["friend"]["benefit"]["feature"] = "\u{3000}"
        let refused = try reopened.submit(["type": "program.update", "app": "a", "at": "2026-01-02T00:00:00Z", "program": "p", "config": blank])
        XCTAssertEqual(refused.json["error"]["code"], "invalid_command")
        XCTAssertTrue(refused.json["error"]["message"].stringValue?.contains("config.friend.benefit.feature is only white space") ?? false, refused.json.text)
    }

    /// Forgeries that leave the replay on a state the rules cannot continue from (a reward moved to
    /// another user, an event deleted or two swapped, all re-chained) are reported, never a crash.
    func testForgedHistoriesAreReportedNotCrashedOn() throws {
        let clean = try Self.export(of: "caps", "competing-inviters")
        var forgeries: [[[UInt8]]] = []
        var movedRewards: [[[UInt8]]] = []
        for (n, bytes) in clean.enumerated() {
            var event = try JSONValue(parsing: bytes)
            if event["type"] == "reward.earned" {
                var data = event["data"]
                data["recipient"] = "mallory"
                event["data"] = data
                var moved = clean
                moved[n] = event.bytes
                movedRewards.append(moved)
            }
            var deleted = clean
            deleted.remove(at: n)
            forgeries.append(deleted)
            if n + 1 < clean.count {
                var swapped = clean
                swapped.swapAt(n, n + 1)
                forgeries.append(swapped)
            }
        }
        var caught = 0
        for forged in forgeries {
            let report = try Ledger.verify(exportLines: Self.rechained(try forged.map { try JSONValue(parsing: $0) }))
            if !report.isClean { caught += 1 }
        }
        // Deleting or swapping independent commands can leave a history the rules allow; moving a
        // reward never does.
        XCTAssertGreaterThan(caught, forgeries.count / 2)
        XCTAssertFalse(movedRewards.isEmpty)
        for forged in movedRewards { XCTAssertFalse(try Ledger.verify(exportLines: Self.rechained(try forged.map { try JSONValue(parsing: $0) })).isClean) }
    }

    /// Idempotency and the origin of purchases are rules too: a command id that appends twice, an
    /// event whose command_id is not its command's, a paid_purchase that no RevenueCat event caused.
    func testForgedIDsAndPurchasesAreNamed() throws {
        let events = try Self.export(of: "points-review", "refunds").map { try JSONValue(parsing: $0) }
        func rules(_ forged: [JSONValue]) throws -> Set<String> {
            Set(try Ledger.verify(exportLines: Self.rechained(forged)).violations.map(\.rule))
        }
        XCTAssertEqual(try rules(events), [])
        // The spend with id spend-1 appended twice.
        let spend = try XCTUnwrap(events.firstIndex { $0["command_id"] == "spend-1" })
        var twice = events
        twice.insert(events[spend], at: spend + 1)
        XCTAssertTrue(try rules(twice).contains("command.id_reused"))
        // An event claiming another command's id.
        var claimed = events
        claimed[spend]["command_id"] = "spend-2"
        XCTAssertTrue(try rules(claimed).contains("command.id_mismatch"))
        // A tracked app event dressed up as a RevenueCat purchase.
        let purchase = try XCTUnwrap(events.firstIndex { $0["type"] == "event.tracked" && $0["data"]["name"] == "paid_purchase" })
        var dressed = events
        var data = dressed[purchase]["data"]
        var command = data["command"]
        command = ["type": "event.track", "app": command["app"], "at": command["at"], "user": data["user"], "name": "paid_purchase", "event_id": "forged"]
        data["command"] = command
        dressed[purchase]["data"] = data
        XCTAssertTrue(try rules(dressed).contains("paid_purchase.source"))
        // An invite code no draw of the program's format gives, and one issued twice.
        let invite = try XCTUnwrap(events.firstIndex { $0["type"] == "invite.created" })
        var misdrawn = events
        misdrawn[invite]["data"]["code"] = "IO01"
        XCTAssertTrue(try rules(misdrawn).contains("invite.code_format"))
        var reissued = events
        reissued.insert(events[invite], at: invite + 1)
        XCTAssertTrue(try rules(reissued).contains("invite.code_twice"))
    }

    func testACleanExportVerifiesAloneAndUntilStopsEarly() throws {
        let temp = try TemporaryLedger()
        try temp.play("refunds")
        let exported = try temp.allValues()
        let report = try Ledger.verify(exportLines: exported)
        XCTAssertTrue(report.isClean, report.text)
        XCTAssertEqual(report.events, UInt64(exported.count))
        let partial = try temp.ledger.verify(until: 10)
        XCTAssertTrue(partial.isClean, partial.text)
        XCTAssertEqual(partial.events, 10)
    }

    func testTamperingInsideLMDBAndStaleProjectionsAreReported() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        temp.close()  // the forger below opens the folder on its own: the ledger must be closed first
        // A forger rewrites the projection of alice's balance and the head hash.
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        try env.write { txn in
            try txn.put("proj_balances", Array("acme".utf8) + [0] + Array("alice".utf8), Array(#"{"balance":9999,"earned":9999,"spent":0}"#.utf8))
        }
        let reader = try Ledger(readingFolder: temp.folder)
        let stale = try reader.verify()
        XCTAssertTrue(stale.violations.contains { $0.rule == "projection.mismatch" }, stale.text)
        try env.write { txn in try txn.put("meta", Array("head_hash".utf8), Array(String(repeating: "f", count: 64).utf8)) }
        let headless = try reader.verify()
        XCTAssertTrue(headless.violations.contains { $0.rule == "chain.head_hash" }, headless.text)
        // The log is whole, so the forged balance is still named; rebuilding is not the advice
        // while the head is broken (rebuild refuses it, and says why).
        let stillStale = try XCTUnwrap(headless.violations.first { $0.rule == "projection.mismatch" }, headless.text)
        XCTAssertTrue(stillStale.message.contains("settle the log's own violations"), stillStale.message)
        XCTAssertFalse(stillStale.message.contains("run `referral-ledger rebuild`"), stillStale.message)
        XCTAssertThrowsError(try Ledger(folder: temp.folder).rebuildProjections()) { error in
            XCTAssertEqual((error as? LedgerError)?.code, "broken_log")
            XCTAssertTrue("\(error)".contains("head_hash ffffffffffff…, but that event's SHA-256 is"), "\(error)")
        }
    }

    /// A forger who rewrites an event and recomputes the chain and the head leaves the projections
    /// as the honest log made them: `verify` names the rules the new log breaks and also that the
    /// stored read models are not a fold of it.
    func testARechainedForgeryIsAlsoNamedByTheProjectionsItLeftBehind() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        var values = try env.read { try EventLog.values($0, from: 1, limit: 10_000).map(\.1) }
        let forged = try XCTUnwrap(values.firstIndex { v in
            let text = String(decoding: v, as: UTF8.self)
            return text.contains(#""type":"reward.earned""#) && text.contains(#""amount":100"#)
        })
        values[forged] = Array(String(decoding: values[forged], as: UTF8.self).replacingOccurrences(of: #""amount":100"#, with: #""amount":999"#).utf8)
        for i in (forged + 1)..<values.count {
            let text = String(decoding: values[i], as: UTF8.self)
            let range = try XCTUnwrap(text.range(of: #""prev_hash":""#))
            let hashEnd = text.index(range.upperBound, offsetBy: 64)
            values[i] = Array((text[..<range.upperBound] + SHA256.hex(values[i - 1]) + text[hashEnd...]).utf8)
        }
        try env.write { txn in
            for i in forged..<values.count { try txn.put(EventLog.eventsDatabase, EventLog.key(UInt64(i + 1)), values[i]) }
            try txn.put("meta", Array("head_hash".utf8), Array(SHA256.hex(values[values.count - 1]).utf8))
        }
        let report = try Ledger(readingFolder: temp.folder).verify()
        let rules = Set(report.violations.map(\.rule))
        XCTAssertFalse(rules.contains { $0.hasPrefix("chain.") }, report.text)
        XCTAssertTrue(rules.contains("replay.mismatch"), report.text)
        let stale = try XCTUnwrap(report.violations.first { $0.rule == "projection.mismatch" }, report.text)
        XCTAssertTrue(stale.message.contains("settle the log's own violations"), stale.message)
        // The export alone (no projections) names the same log violations and nothing else.
        let alone = try Ledger.verify(exportLines: values)
        XCTAssertEqual(Set(alone.violations.map(\.rule)), rules.subtracting(["projection.mismatch", "projection.extra"]), alone.text)
    }

    /// A head in meta that a lenient reader parses as the right one is still not the log's form.
    func testTheHeadInMetaIsHeldToItsWrittenForm() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        let (position, hash) = try env.read { txn in
            (String(decoding: try txn.get("meta", Array("head_position".utf8))!, as: UTF8.self), try txn.get("meta", Array("head_hash".utf8))!)
        }
        let reader = try Ledger(readingFolder: temp.folder)
        XCTAssertEqual(try reader.verify().violations.map(\.rule), [])
        for forged in ["0" + position, "+" + position] {
            try env.write { txn in try txn.put("meta", Array("head_position".utf8), Array(forged.utf8)) }
            let report = try reader.verify()
            XCTAssertEqual(report.violations.map(\.rule), ["chain.head_format"], "\(forged): \(report.text)")
        }
        try env.write { txn in
            try txn.put("meta", Array("head_position".utf8), Array(position.utf8))
            try txn.put("meta", Array("head_hash".utf8), Array(String(decoding: hash, as: UTF8.self).uppercased().utf8))
        }
        XCTAssertTrue(try reader.verify().violations.map(\.rule).contains("chain.head_format"))
        // A head no event has is never signed: a checkpoint of it would fail every later proof.
        XCTAssertThrowsError(try reader.confirmedHead()) { XCTAssertEqual(($0 as? LedgerError)?.code, "head_mismatch", "\($0)") }
        try env.write { txn in try txn.put("meta", Array("head_hash".utf8), Array(String(repeating: "0", count: 64).utf8)) }
        XCTAssertThrowsError(try reader.confirmedHead())
        try env.write { txn in try txn.put("meta", Array("head_hash".utf8), hash) }
        XCTAssertEqual(try reader.verify().violations.map(\.rule), [])
        XCTAssertEqual(try reader.confirmedHead(), try reader.currentHead())
    }

    /// A verify while the writer appends checks the history up to the head it read first: what is
    /// appended meanwhile is no violation (it used to be read as events past the recorded head).
    func testAVerifyWhileCommandsAreWrittenIsClean() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let ledger = temp.ledger!
        let done = Atomic<Bool>(false)
        let writer = Thread {
            // Single-command commits, so the head moves often while the verifies run.
            for n in 0..<1500 {
                _ = try? ledger.submit(.verifyAccount(user: "w\(n)", accountCreatedAt: Timestamp(milliseconds: 0)), app: "acme", id: "w\(n)")
            }
            done.store(true, ordering: .releasing)
        }
        writer.start()
        var rounds = 0
        while !done.load(ordering: .acquiring) && rounds < 200 {
            rounds += 1
            let report = try ledger.verify()
            XCTAssertTrue(report.isClean, "round \(rounds): \(report.text)")
            if !report.isClean { break }
        }
        while !done.load(ordering: .acquiring) { usleep(10_000) }
        XCTAssertGreaterThan(rounds, 1)
        XCTAssertTrue(try ledger.verify().isClean)
    }

    /// The idempotency index and the secrets store are not projections (`rebuild` keeps them), but
    /// a folder's `verify` holds them to the log: a lost id would let a retry apply twice, a ghost
    /// one would refuse an honest command, a swapped secret would sign with a key never configured.
    func testTheIdempotencyIndexAndSecretsAreHeldToTheLog() throws {
        let temp = try TemporaryLedger()
        try temp.play("points-review", "failed-delivery")
        XCTAssertTrue(try temp.ledger.verify().isClean)
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        let spend = Array("acme".utf8) + [0] + Array("spend-1".utf8)
        let entry = try XCTUnwrap(try env.read { txn in try txn.get("idempotency", spend) })
        let secret = Array("acme".utf8) + [0] + Array("webhook_secret".utf8)
        func rules() throws -> Set<String> { Set(try Ledger(readingFolder: temp.folder).verify().violations.map(\.rule)) }

        try env.write { txn in try txn.delete("idempotency", spend) }
        XCTAssertEqual(try rules(), ["idempotency.mismatch"], "a lost id")
        try env.write { txn in try txn.put("idempotency", spend, entry) }
        XCTAssertEqual(try rules(), [], "put back")
        try env.write { txn in try txn.put("idempotency", Array("acme".utf8) + [0] + Array("ghost".utf8), entry) }
        XCTAssertEqual(try rules(), ["idempotency.mismatch"], "a ghost id")
        try env.write { txn in try txn.delete("idempotency", Array("acme".utf8) + [0] + Array("ghost".utf8)) }
        var moved = entry
        moved[76] &+= 1  // the stored count of events
        try env.write { txn in try txn.put("idempotency", spend, moved) }
        XCTAssertEqual(try rules(), ["idempotency.mismatch"], "an id pointing elsewhere")
        try env.write { txn in try txn.put("idempotency", spend, entry) }

        try env.write { txn in try txn.put("secrets", secret, Array("forged".utf8)) }
        XCTAssertEqual(try rules(), ["secrets.mismatch"], "a swapped secret")
        try env.write { txn in try txn.put("secrets", secret, Array("s3cret".utf8)) }
        XCTAssertEqual(try rules(), [], "the configured one")
        try env.write { txn in try txn.put("secrets", Array("acme".utf8) + [0] + Array("revenuecat_api_key".utf8), Array("k".utf8)) }
        XCTAssertEqual(try rules(), ["secrets.mismatch"], "a secret never configured")
    }

    /// Keys of the `events` database that are no position of the log are reported, never a crash
    /// or a silent skip: another length, position 0, the largest key, one far past the head.
    func testStrayKeysInTheLogAreReported() throws {
        for stray in [Array("abc".utf8), [UInt8](repeating: 0, count: 8), [UInt8](repeating: 0xFF, count: 8),
                      [0x80, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 1, 0]] {
            let temp = try TemporaryLedger()
            try temp.play("caps")
            temp.close()
            let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
            let value = try env.read { try EventLog.values($0, from: 1, limit: 1)[0].1 }
            try env.write { txn in try txn.put(EventLog.eventsDatabase, stray, value) }
            let report = try Ledger(readingFolder: temp.folder).verify()
            XCTAssertTrue(report.violations.contains { $0.rule == "chain.format" }, "\(stray): \(report.text)")
        }
    }

    /// Every read model is compared with a fresh fold: each record database, the audit and code
    /// indexes, and the position the projections claim to cover.
    func testEveryReadModelAndTheCheckpointAreCompared() throws {
        let temp = try TemporaryLedger()
        try temp.play("links", "caps")
        let head = try temp.ledger.currentHead().position
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        XCTAssertTrue(try Ledger(readingFolder: temp.folder).verify().isClean)
        func firstKey(_ database: String) throws -> [UInt8] {
            try env.read { txn in
                var first: [UInt8] = []
                try txn.scan(database) { k, _ in first = Array(k); return false }
                return first
            }
        }
        for database in ["proj_user_rewards", "proj_users", "proj_audit", "proj_codes"] {
            let key = try firstKey(database)
            XCTAssertFalse(key.isEmpty, database)
            let value = try env.read { try $0.get(database, key) } ?? []
            try env.write { txn in try txn.delete(database, key) }
            let report = try Ledger(readingFolder: temp.folder).verify()
            XCTAssertTrue(report.violations.contains { $0.rule.hasPrefix("projection.") }, "\(database): \(report.text)")
            try env.write { txn in try txn.put(database, key, value) }
        }
        XCTAssertTrue(try Ledger(readingFolder: temp.folder).verify().isClean)
        // An audit block holding the right events out of log order, or one event twice, or a record
        // changed in place: each is found, and the record named.
        let block = try env.read { txn -> ([UInt8], [UInt8])? in
            var found: ([UInt8], [UInt8])?
            try txn.scan("proj_audit") { k, v in
                if v.count >= 2 { found = (Array(k), Array(v)); return false }
                return true
            }
            return found
        }
        let (blockKey, offsets) = try XCTUnwrap(block)
        for altered in [Array(offsets.reversed()), offsets + [offsets.last!]] {
            try env.write { txn in try txn.put("proj_audit", blockKey, altered) }
            let report = try Ledger(readingFolder: temp.folder).verify()
            XCTAssertTrue(report.violations.contains { $0.rule == "projection.mismatch" && $0.message.contains("audit index") }, report.text)
        }
        try env.write { txn in try txn.put("proj_audit", blockKey, offsets) }
        let participant = try firstKey("proj_participants")
        let record = try XCTUnwrap(try env.read { try $0.get("proj_participants", participant) })
        try env.write { txn in try txn.put("proj_participants", participant, Array(record.dropLast()) + Array(",\"x\":1}".utf8)) }
        let changed = try Ledger(readingFolder: temp.folder).verify()
        XCTAssertTrue(changed.violations.contains { $0.rule == "projection.mismatch" && $0.message.contains("participants record") }, changed.text)
        try env.write { txn in try txn.put("proj_participants", participant, record) }
        XCTAssertTrue(try Ledger(readingFolder: temp.folder).verify().isClean)
        // Projections that claim to cover another position than the log's end (no writer running).
        try env.write { txn in try txn.put("proj_meta", Array("checkpoint".utf8), Array(String(head - 1).utf8)) }
        let stale = try Ledger(readingFolder: temp.folder).verify()
        XCTAssertEqual(stale.violations.map(\.rule), ["projection.checkpoint"], stale.text)
    }
}

/// Signed checkpoints: an auditor pins a head and later proves the history contains it.
final class CheckpointTests: XCTestCase {
    func testAPinnedCheckpointIsProvenAndRewritesAreCaught() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let (privateKey, publicKey) = try Ed25519.generateKeyPair()
        let pinned = try temp.ledger.currentHead()
        let cp = try Checkpoint.sign(pinned, privateKeyPEM: privateKey)
        XCTAssertEqual(try Checkpoint(json: cp.json), cp)

        // Newer history extends the pinned one.
        try temp.submit(#"{"type":"points.spend","app":"acme","at":"2026-03-05T00:00:00Z","user":"alice","amount":10,"reason":"mug"}"#)
        let extended = try temp.ledger.verify(checkpoint: (cp, publicKey))
        XCTAssertTrue(extended.isClean, extended.text)

        // Another key's signature does not verify; an altered checkpoint is reported as such, not
        // as a rewritten history.
        let (_, otherPublic) = try Ed25519.generateKeyPair()
        XCTAssertEqual(try temp.ledger.verify(checkpoint: (cp, otherPublic)).violations.map(\.rule), ["checkpoint.signature"])
        var altered = cp
        altered.headHash = String(repeating: "0", count: 64)
        XCTAssertEqual(try temp.ledger.verify(checkpoint: (altered, publicKey)).violations.map(\.rule), ["checkpoint.signature"])
        // A checkpoint file is read strictly: what `checkpoint` did not write is refused.
        for (key, value) in [("algorithm", "rsa"), ("head_position", 2.1e1), ("head_hash", .string(pinned.hash.uppercased())), ("note", "x")] as [(String, JSONValue)] {
            var json = cp.json
            json[key] = value
            XCTAssertThrowsError(try Checkpoint(json: json), key)
        }

        // A history that was rewritten before the pinned head, or cut short, is caught.
        let values = try temp.allValues()
        XCTAssertTrue(try Ledger.verify(exportLines: values, checkpoint: (cp, publicKey)).isClean)
        let cut = Array(values.prefix(Int(pinned.position) - 1))
        XCTAssertTrue(try Ledger.verify(exportLines: cut, checkpoint: (cp, publicKey)).violations.contains { $0.rule == "checkpoint.missing" })
        var forged = values
        var event = try JSONValue(parsing: forged[Int(pinned.position) - 1])
        event["recorded_at"] = "2030-01-01T00:00:00Z"
        forged[Int(pinned.position) - 1] = event.bytes
        let report = try Ledger.verify(exportLines: forged, checkpoint: (cp, publicKey))
        XCTAssertTrue(report.violations.contains { $0.rule == "checkpoint.mismatch" }, report.text)
    }
}

/// Projections whose stored schema differs from the code's are rebuilt by the next writer, and
/// refused (with a message naming `rebuild`) by a read-only open.
final class ProjectionSchemaTests: XCTestCase {
    func testAnotherSchemaIsRebuiltAtOpen() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let before = try temp.ledger.progress(app: "acme", program: "capped", user: "alice").text
        temp.close()
        let env = try LMDBEnvironment.open(path: temp.folder, databases: Ledger.databases)
        try env.write { txn in
            try txn.put("proj_meta", Array("schema".utf8), Array(#"{"apps":1}"#.utf8))
            try txn.put("proj_participants", Array("acme".utf8) + [0] + Array("capped".utf8) + [0] + Array("alice".utf8), Array("{}".utf8))
        }
        XCTAssertThrowsError(try Ledger(readingFolder: temp.folder)) { error in
            XCTAssertTrue("\(error)".contains("rebuild"), "\(error)")
        }
        try temp.reopen()
        XCTAssertEqual(try temp.ledger.progress(app: "acme", program: "capped", user: "alice").text, before)
        XCTAssertTrue(try temp.ledger.verify().isClean)
        temp.close()
        XCTAssertNoThrow(try Ledger(readingFolder: temp.folder))
    }
}
