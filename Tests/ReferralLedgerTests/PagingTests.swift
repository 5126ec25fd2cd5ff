import Foundation
import LedgerCodec
@testable import ReferralLedger
import XCTest

/// Paged dashboard queries: a page is full while more entries match, `next_cursor` is null exactly
/// when none is left, and the stored answer equals the folded one (`asOf`) for any cursor.
final class PagingTests: XCTestCase {
    /// Two programs, an inviter in both, an account check between: alice's audit interleaves them.
    private func twoPrograms() throws -> TemporaryLedger {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        for p in ["p", "q"] {
            try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"\#(p)","environment":"live","config":{"inviter":null,"friend":null,"new_users_only":false}}"#)
            try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"\#(p)"}"#)
        }
        try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-02T00:00:00Z","program":"p","user":"alice"}"#)
        try temp.submit(#"{"type":"account.verify","app":"a","at":"2026-03-02T00:00:00Z","user":"alice","account_created_at":"2026-01-01T00:00:00Z"}"#)
        try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-02T00:00:00Z","program":"q","user":"alice"}"#)
        for (n, p) in ["p", "q", "q", "p", "q"].enumerated() {
            let code = try temp.ledger.participants(app: "a", program: p, user: "alice")["participants"].arrayValue![0]["invite_code"].stringValue!
            try temp.submit(#"{"type":"referral.enroll","app":"a","at":"2026-03-03T00:00:00Z","program":"\#(p)","user":"f\#(String(n))","code":"\#(code)"}"#)
        }
        return temp
    }

    private func walkAudit(_ ledger: Ledger, program: String?, user: String?, type: String? = nil, limit: Int, asOf: UInt64? = nil) throws -> [[Int64]] {
        var pages: [[Int64]] = []
        var cursor: UInt64 = 0
        while true {
            let answer = try ledger.audit(app: "a", program: program, user: user, type: type, limit: limit, after: cursor, asOf: asOf)
            let page = answer["entries"].arrayValue!.map { $0["position"].intValue! }
            pages.append(page)
            guard let next = answer["next_cursor"].intValue else { return pages }
            XCTAssertEqual(page.count, limit, "a page short of its limit promised more")
            cursor = UInt64(next)
        }
    }

    func testAuditPagesAreFullWhileMoreMatchWithEveryFilter() throws {
        let temp = try twoPrograms()
        let ledger = temp.ledger!
        let all = try ledger.audit(app: "a", program: "q", user: "alice", limit: 1000)["entries"].arrayValue!
        XCTAssertTrue(all.allSatisfy { $0["program"] == "q" })
        let expected = all.map { $0["position"].intValue! }
        XCTAssertGreaterThan(expected.count, 3)
        for limit in [1, 2, 3, 7] {
            let pages = try walkAudit(ledger, program: "q", user: "alice", limit: limit)
            XCTAssertEqual(pages.flatMap { $0 }, expected, "limit \(limit)")
            XCTAssertFalse(pages.dropLast().contains { $0.isEmpty }, "limit \(limit): an empty page before the end: \(pages)")
            XCTAssertEqual(pages, try walkAudit(ledger, program: "q", user: "alice", limit: limit, asOf: 1000))
        }
        // By type: one event type, or a subject with its dot.
        let enrolments = try walkAudit(ledger, program: "q", user: nil, type: "referral.enrolled", limit: 2).flatMap { $0 }
        XCTAssertEqual(enrolments.count, 3)
        let referral = try ledger.audit(app: "a", user: "alice", type: "referral.", limit: 1000)["entries"].arrayValue!
        XCTAssertEqual(referral.count, 5)
        XCTAssertTrue(referral.allSatisfy { $0["type"].stringValue!.hasPrefix("referral.") })
        XCTAssertThrowsError(try ledger.audit(app: "a", type: "referral")) { error in
            XCTAssertEqual((error as? QueryError)?.code, "invalid_query")
        }
    }

    /// The audit index keeps one entry per user, program or app and block of 250 positions: a
    /// block filled by several batches, and pages whose cursor falls inside a block, answer every
    /// event that names them once, in log order; a rebuild writes the same entries.
    func testAuditEntriesAcrossBlocksAndBatchesAnswerEveryEventOnce() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"level_up","reward":{"mode":"every","friends":3,"max_rewards":null,"benefit":{"type":"points","amount":5}}},"friend":null,"new_users_only":false}}"#)
        try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        let code = try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-02T00:00:00Z","program":"p","user":"alice"}"#)["code"].stringValue!
        let bob = try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-02T00:00:00Z","program":"p","user":"bob"}"#)["code"].stringValue!
        var n = 0
        for size in [1, 7, 50, 1, 3, 120, 2, 90, 33, 1] {
            let lines: [[UInt8]] = (0..<size).flatMap { _ -> [[UInt8]] in
                n += 1
                return [Array(#"{"type":"referral.enroll","app":"a","at":"2026-03-03T00:00:00Z","program":"p","user":"f\#(n)","code":"\#(n % 3 == 0 ? bob : code)"}"#.utf8),
                        Array(#"{"type":"event.track","app":"a","at":"2026-03-04T00:00:00Z","user":"f\#(n)","name":"level_up","event_id":"e\#(n)"}"#.utf8)]
            }
            for result in try temp.ledger.submit(lines: lines) { XCTAssertTrue(result.ok, result.text) }
        }
        let ledger = temp.ledger!
        var events: [JSONValue] = []
        var from: UInt64? = 1
        while let start = from { let (page, next) = try ledger.events(from: start); events += try page.map { try JSONValue(parsing: $0) }; from = next }
        XCTAssertGreaterThan(events.count, 700)
        func naming(_ user: String) -> [Int64] {
            events.filter { e in ["user", "friend", "inviter", "recipient"].contains { e["data"][$0].stringValue == user } }.map { $0["position"].intValue! }
        }
        let cases: [(String?, String?, [Int64])] = [
            (nil, "alice", naming("alice")), (nil, "bob", naming("bob")), (nil, "f250", naming("f250")),
            ("p", nil, events.filter { $0["data"]["program"] == "p" }.map { $0["position"].intValue! }),
            (nil, nil, events.map { $0["position"].intValue! }),
        ]
        for (program, user, expected) in cases {
            XCTAssertGreaterThan(expected.count, 1)
            for limit in [1, 7, 250, 1000] {
                let pages = try walkAudit(ledger, program: program, user: user, limit: limit)
                XCTAssertEqual(pages.flatMap { $0 }, expected, "\(program ?? "-")/\(user ?? "-") limit \(limit)")
            }
        }
        // One entry per name and block, not per event and name.
        func auditIndex() throws -> [[UInt8]] {
            try ledger.environment.read { txn in
                var all: [[UInt8]] = []
                try txn.scan(ProjectionStore.audit) { k, v in all.append(Array(k) + [0xFF] + Array(v)); return true }
                return all
            }
        }
        let incremental = try auditIndex()
        XCTAssertLessThan(incremental.count, events.count)
        _ = try ledger.rebuildProjections()
        XCTAssertTrue(try auditIndex() == incremental, "a rebuild wrote another audit index")
        XCTAssertTrue(try ledger.verify().isClean)
    }

    /// One recipient's delivery history (read from their reward index) pages like the whole app's
    /// (a scan of every reward) filtered to them, stored and folded alike.
    func testAUsersRewardsPageInEarningOrderWhenAskedTo() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        for p in ["p", "q"] {
            try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"\#(p)","environment":"live","config":{"inviter":{"qualifying_event":"invite_accepted","reward":{"mode":"every","friends":1,"benefit":{"type":"points","amount":5}}},"friend":null,"new_users_only":false}}"#)
            try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"\#(p)"}"#)
            try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-02T00:00:00Z","program":"\#(p)","user":"alice"}"#)
        }
        for (n, p) in ["p", "q", "q", "p", "q", "p", "p"].enumerated() {
            let code = try temp.ledger.participants(app: "a", program: p, user: "alice")["participants"][0]["invite_code"].stringValue!
            try temp.submit(#"{"type":"referral.enroll","app":"a","at":"2026-03-03T00:00:00Z","program":"\#(p)","user":"f\#(String(n))","code":"\#(code)"}"#)
        }
        let ledger = temp.ledger!
        let all = try ledger.rewards(app: "a", user: "alice")
        XCTAssertNil(all.objectValue?["next_cursor"], "the unpaged answer is SPEC's list alone")
        XCTAssertEqual(all["rewards"].arrayValue?.count, 7)
        for (program, limit) in [(nil, 2), (nil, 1), (nil, 7), ("q", 2), ("p", 3), (nil, 1000)] as [(String?, Int)] {
            let expected = try ledger.rewards(app: "a", user: "alice", program: program)["rewards"].arrayValue!
            var got: [JSONValue] = []
            var cursor: UInt64?
            repeat {
                let page = try ledger.rewards(app: "a", user: "alice", program: program, limit: limit, cursor: cursor)
                XCTAssertEqual(page, try ledger.rewards(app: "a", user: "alice", program: program, limit: limit, cursor: cursor, asOf: 1000))
                let rewards = page["rewards"].arrayValue!
                got += rewards
                cursor = page["next_cursor"].intValue.map { UInt64($0) }
                if cursor != nil { XCTAssertEqual(rewards.count, limit, "a page short of its limit promised more") }
                XCTAssertLessThanOrEqual(got.count, expected.count)
            } while cursor != nil && got.count <= expected.count
            XCTAssertEqual(got, expected, "\(program ?? "all") by \(limit)")
        }
        XCTAssertEqual(try ledger.rewards(app: "a", user: "alice", cursor: .max)["rewards"], [])
        XCTAssertEqual(try ledger.rewards(app: "a", user: "alice", cursor: .max)["next_cursor"], .null)
    }

    /// The worker's page of due deliveries is the head of the whole due order (longest due first,
    /// reward ID breaking ties), whatever its size, and leaves out what the worker skips.
    func testAPageOfDueDeliveriesIsTheHeadOfTheWholeOrder() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true,"webhook_url":"http://127.0.0.1:9/x"}}"#)
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":null,"friend":{"trigger":"invite_accepted","benefit":{"type":"custom","feature":"pro","payload":{}}},"new_users_only":false}}"#)
        try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        let code = try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","user":"inv"}"#)["code"].stringValue!
        for n in 0..<60 {  // earned at a few distinct times, out of order: ties on time are common
            try temp.submit(#"{"type":"referral.enroll","app":"a","at":"2026-03-0\#(2 + (n * 7) % 5)T00:00:00Z","program":"p","user":"f\#(n)","code":"\#(code)"}"#)
        }
        let ledger = temp.ledger!
        let all = ledger.dueDeliveries(limit: 1000)
        XCTAssertEqual(all.count, 60)
        XCTAssertEqual(all, all.sorted { ($0.dueAt.milliseconds, $0.rewardID) < ($1.dueAt.milliseconds, $1.rewardID) })
        for k in [1, 2, 5, 14, 15, 16, 59, 60, 61] {
            XCTAssertEqual(ledger.dueDeliveries(limit: k), Array(all.prefix(k)), "limit \(k)")
        }
        let skipped = Set(all.enumerated().filter { $0.offset % 3 == 0 }.map(\.element.rewardID))
        XCTAssertEqual(ledger.dueDeliveries(limit: 7) { _, id in skipped.contains(id) }, Array(all.filter { !skipped.contains($0.rewardID) }.prefix(7)))
        // The selection itself, against a sort, with many ties.
        var generator = SplitMix(seed: 11)
        for _ in 0..<50 {
            let items = (0..<Int(generator.next() % 300)).map { _ in Int(generator.next() % 40) }
            for k in [0, 1, 3, 10, 75, 400] {
                XCTAssertEqual(Ledger.smallest(k, of: items, by: <), Array(items.sorted().prefix(k)))
            }
        }
    }

    func testTheAppsProgramsPageInKeyOrderEachAsProgramAnswersIt() throws {
        let temp = try twoPrograms()
        let ledger = temp.ledger!
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-04T00:00:00Z","program":"b","environment":"sandbox","config":{"inviter":null,"friend":null}}"#)
        let now = Timestamp(rfc3339: "2026-03-05T00:00:00Z")!
        let all = try ledger.programs(app: "a", now: now)
        XCTAssertEqual(all["app"], "a")
        XCTAssertEqual(all["programs"].arrayValue?.map { $0["program"].stringValue ?? "" }, ["b", "p", "q"])
        XCTAssertEqual(all["next_cursor"], .null)
        for entry in all["programs"].arrayValue! {
            XCTAssertEqual(entry, try ledger.program(app: "a", program: entry["program"].stringValue!, now: now))
        }
        XCTAssertEqual(all["programs"][0]["status"], "draft")
        XCTAssertEqual(all["programs"][0]["accepting_new_referrals"], false)
        XCTAssertEqual(all["programs"][1]["accepting_new_referrals"], true)
        // Pages of one, from each page's cursor; the fold (`asOf`) pages the same.
        var keys: [String] = []
        var cursor: String?
        repeat {
            let page = try ledger.programs(app: "a", limit: 1, cursor: cursor, now: now)
            XCTAssertEqual(page, try ledger.programs(app: "a", limit: 1, cursor: cursor, asOf: 1000, now: now))
            keys += page["programs"].arrayValue!.map { $0["program"].stringValue! }
            cursor = page["next_cursor"].stringValue
            XCTAssertTrue(cursor == nil || keys.count < 3, "a cursor after the last program")
        } while cursor != nil
        XCTAssertEqual(keys, ["b", "p", "q"])
        // A cursor between keys, or past them all; before `q` was created there was only `p`.
        XCTAssertEqual(try ledger.programs(app: "a", cursor: "o", now: now)["programs"].arrayValue?.count, 2)
        XCTAssertEqual(try ledger.programs(app: "a", cursor: "zz", now: now)["programs"], [])
        XCTAssertEqual(try ledger.programs(app: "a", asOf: 3, now: now)["programs"].arrayValue?.map { $0["program"].stringValue ?? "" }, ["p"])
        XCTAssertThrowsError(try ledger.programs(app: "nope")) { error in
            XCTAssertEqual((error as? QueryError)?.code, "unknown_app")
        }
    }

    func testARecipientsDeliveriesPageLikeTheAppsFilteredToThem() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let ledger = temp.ledger!
        let everyone = try ledger.deliveries(app: "acme", limit: 1000)["deliveries"].arrayValue!
        let recipient = try XCTUnwrap(everyone.first?["recipient"].stringValue)
        let expected = everyone.filter { $0["recipient"].stringValue == recipient }.map { $0["reward_id"].stringValue! }
        XCTAssertGreaterThan(expected.count, 1)
        for asOf in [nil, 100_000] as [UInt64?] {
            var walked: [String] = []
            var cursor: String?
            repeat {
                let answer = try ledger.deliveries(app: "acme", user: recipient, limit: 1, cursor: cursor, asOf: asOf)
                walked += answer["deliveries"].arrayValue!.map { $0["reward_id"].stringValue! }
                cursor = answer["next_cursor"].stringValue
            } while cursor != nil
            XCTAssertEqual(walked, expected, "as of \(String(describing: asOf))")
        }
    }

    /// The app's delivery history pages from its cursor (each page reads from there, not from the
    /// first reward): walked a reward at a time, it is the whole list, stored and folded alike.
    func testTheAppsDeliveriesPageFromTheirCursor() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let ledger = temp.ledger!
        let everyone = try ledger.deliveries(app: "acme", limit: 1000)["deliveries"].arrayValue!.map { $0["reward_id"].stringValue! }
        XCTAssertGreaterThan(everyone.count, 2)
        XCTAssertEqual(everyone, everyone.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        for asOf in [nil, 100_000] as [UInt64?] {
            var walked: [String] = []
            var cursor: String?
            repeat {
                let answer = try ledger.deliveries(app: "acme", limit: 1, cursor: cursor, asOf: asOf)
                walked += answer["deliveries"].arrayValue!.map { $0["reward_id"].stringValue! }
                cursor = answer["next_cursor"].stringValue
            } while cursor != nil
            XCTAssertEqual(walked, everyone, "as of \(String(describing: asOf))")
            // A cursor between two IDs (a client's own "after this") starts after it.
            let between = String(everyone[1].dropLast()) + "~"
            let rest = try ledger.deliveries(app: "acme", limit: 1000, cursor: between, asOf: asOf)["deliveries"].arrayValue!.map { $0["reward_id"].stringValue! }
            XCTAssertEqual(rest, everyone.filter { between.utf8.lexicographicallyPrecedes($0.utf8) }, "as of \(String(describing: asOf))")
        }
    }

    func testAParticipantsCursorBeforeThePrefixStillFindsThePrefix() throws {
        let temp = try twoPrograms()
        let ledger = temp.ledger!
        for asOf in [nil, 1000] as [UInt64?] {
            let users = try ledger.participants(app: "a", program: "q", userPrefix: "f", cursor: "alice", asOf: asOf)["participants"]
                .arrayValue!.map { $0["user"].stringValue! }
            XCTAssertEqual(users, ["f1", "f2", "f4"], "as of \(String(describing: asOf))")
            let one = try ledger.participants(app: "a", program: "q", user: "f2", cursor: "alice", asOf: asOf)["participants"]
            XCTAssertEqual(one.arrayValue?.count, 1)
        }
    }

    /// A cursor is a client's text: one longer than any LMDB key still pages from where it sorts.
    func testACursorLongerThanAnyKeyPagesLikeTheFold() throws {
        let temp = try twoPrograms()
        let ledger = temp.ledger!
        for cursor in [String(repeating: "a", count: 600), "f1" + String(repeating: "z", count: 600)] {
            let stored = try ledger.participants(app: "a", program: "q", cursor: cursor)
            let folded = try ledger.participants(app: "a", program: "q", cursor: cursor, asOf: 1000)
            XCTAssertEqual(stored, folded)
            XCTAssertFalse(stored["participants"].arrayValue!.isEmpty, cursor)
        }
        let users = try ledger.participants(app: "a", program: "q", cursor: "f1" + String(repeating: "z", count: 600))["participants"]
            .arrayValue!.map { $0["user"].stringValue! }
        XCTAssertEqual(users, ["f2", "f4"])
    }
}

/// The delivery worker's queue: longest due first, a retry from its `retry_at`, a first attempt
/// from its earning.
final class DeliveryQueueTests: XCTestCase {
    func testAFailedDeliveryIsNotKeptBehindRewardsEarnedAfterIt() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true,"webhook_url":"http://127.0.0.1:9/hook","webhook_secret":"s"}}"#)
        try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"invite_accepted","reward":{"mode":"every","friends":1,"max_rewards":null,"benefit":{"type":"custom","feature":"pro","payload":{}}}},"friend":null,"new_users_only":false}}"#)
        try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"p"}"#)
        let code = try temp.submit(#"{"type":"invite.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","user":"alice"}"#)["code"].stringValue!
        func enrol(_ friend: String, at: String) throws -> String {
            let result = try temp.submit(#"{"type":"referral.enroll","app":"a","at":"\#(at)","program":"p","user":"\#(friend)","code":"\#(code)"}"#)
            return try XCTUnwrap(result["events"].arrayValue?.first { $0["type"] == "reward.earned" }?["data"]["reward_id"].stringValue, result.text)
        }
        let first = try enrol("f0", at: "2026-03-02T00:00:00Z")
        try temp.submit(#"{"type":"delivery.started","app":"a","at":"2026-03-02T00:00:01Z","reward_id":"\#(first)","attempt":1}"#)
        let failed = try temp.submit(#"{"type":"delivery.failed","app":"a","at":"2026-03-02T00:00:02Z","reward_id":"\#(first)","attempt":1,"error":"HTTP 500"}"#)
        XCTAssertFalse(failed["retry_at"].isNull, failed.text)
        for n in 1...5 { _ = try enrol("f\(n)", at: "2026-03-02T01:00:0\(n)Z") }
        let due = temp.ledger.dueDeliveries(now: Timestamp(rfc3339: "2026-03-03T00:00:00Z")!, limit: 3)
        XCTAssertEqual(due.first?.rewardID, first, "the retry due since 00:00:07 waits behind rewards earned at 01:00")
        XCTAssertEqual(due.first?.attempt, 2)
        XCTAssertEqual(due.count, 3)
    }
}
