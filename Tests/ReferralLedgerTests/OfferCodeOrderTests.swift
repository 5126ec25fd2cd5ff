import LedgerCodec
import ReferralLedger
import XCTest

/// SPEC §7 and §12 for offer codes, held against their plain definition over histories whose
/// commands come in random time order: a reward gets the first code in import order that was never
/// assigned and is unexpired at assignment (its command's time), else it waits; an import resumes
/// the waiting rewards in earning order, each unexpired at the later of the import and its earning.
final class OfferCodeOrderTests: XCTestCase {
    func testEachRewardGetsTheFirstCodeInImportOrderUnexpiredAtItsTime() throws {
        var resumedInAll = 0
        for seed in UInt64(1)...6 {
            var random = SplitMix(seed: seed)
            let temp = try TemporaryLedger()
            let day: Int64 = 86_400_000
            let start = Timestamp(rfc3339: "2026-03-01T00:00:00Z")!
            func time(_ days: Int64) -> String { Timestamp(milliseconds: start.milliseconds + days * day).description }
            try temp.submit(#"{"type":"app.configure","app":"a","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
            try temp.submit(#"{"type":"program.create","app":"a","at":"2026-03-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"lvl","reward":{"mode":"every","friends":1,"max_rewards":null,"benefit":{"type":"apple_offer_code","offer_id":"o"}}},"friend":null,"new_users_only":false}}"#)
            try temp.submit(#"{"type":"program.activate","app":"a","at":"2026-03-01T00:00:00Z","program":"p"}"#)
            // Codes expiring on days 2…40 (some never), imported on day 0, in an order of their own.
            var codes: [(code: String, expires: Int64?)] = (0..<30).map { n in
                ("C\(n)", random.next() % 5 == 0 ? nil : Int64(2 + random.next() % 39))
            }
            let imported: JSONValue = .array(codes.map { c in ["code": .string(c.code), "expires_at": .optional(c.expires.map(time))] })
            let importResult = try temp.submit(["type": "invite.create", "app": "a", "at": .string(time(0)), "program": "p", "user": "alice"])
            let code = try XCTUnwrap(importResult["code"].stringValue)
            XCTAssertEqual(try temp.submit(["type": "inventory.import", "app": "a", "at": .string(time(0)), "program": "p", "side": "inviter",
                                            "offer_id": "o", "codes": imported])["imported"], .int(Int64(codes.count)))
            let friends = 40
            for f in 0..<friends {
                XCTAssertEqual(try temp.submit(["type": "referral.enroll", "app": "a", "at": .string(time(0)), "program": "p",
                                                "user": .string("f\(f)"), "code": .string(code)])["ok"], true)
            }
            // Each friend qualifies on a random day (1…45), the reports arriving in random order.
            var assigned: Set<String> = []
            var waiting: [(reward: String, day: Int64, order: Int)] = []
            for f in 0..<friends {
                let at = Int64(1 + random.next() % 45)
                let result = try temp.submit(["type": "event.track", "app": "a", "at": .string(time(at)), "user": .string("f\(f)"),
                                              "name": "lvl", "event_id": .string("e\(f)")])
                XCTAssertEqual(result["ok"], true)
                let expected = codes.first { c in !assigned.contains(c.code) && (c.expires.map { $0 > at } ?? true) }?.code
                let events = result["events"].arrayValue ?? []
                let given = events.first { $0["type"] == "offer_code.assigned" }?["data"]["code"].stringValue
                XCTAssertEqual(given, expected, "seed \(seed), friend \(f) qualifying on day \(at)")
                if let given { assigned.insert(given) } else {
                    let reward = try XCTUnwrap(events.first { $0["type"] == "reward.earned" }?["data"]["reward_id"].stringValue)
                    waiting.append((reward, at, f))
                }
            }
            // A second import on day 20 resumes the waiting rewards in earning order, each with the
            // first code (of either import) unexpired when it is assigned: the import's time, or the
            // reward's earning when that is later.
            codes += (30..<45).map { n in ("C\(n)", random.next() % 4 == 0 ? nil : Int64(21 + random.next() % 40)) }
            let more: JSONValue = .array(codes[30...].map { c in ["code": .string(c.code), "expires_at": .optional(c.expires.map(time))] })
            let resumed = try temp.submit(["type": "inventory.import", "app": "a", "at": .string(time(20)), "program": "p", "side": "inviter",
                                           "offer_id": "o", "codes": more])
            var expectedResumed: [String: String] = [:]
            for w in waiting.sorted(by: { ($0.day, $0.order) < ($1.day, $1.order) }) {
                let at = max(20, w.day)
                if let c = codes.first(where: { c in !assigned.contains(c.code) && (c.expires.map { $0 > at } ?? true) }) {
                    expectedResumed[w.reward] = c.code
                    assigned.insert(c.code)
                }
            }
            var givenResumed: [String: String] = [:]
            for e in resumed["events"].arrayValue ?? [] where e["type"] == "offer_code.assigned" {
                givenResumed[e["data"]["reward_id"].stringValue ?? ""] = e["data"]["code"].stringValue
            }
            XCTAssertFalse(waiting.isEmpty, "seed \(seed): no reward waited")
            XCTAssertEqual(givenResumed, expectedResumed, "seed \(seed)")
            resumedInAll += givenResumed.count
            XCTAssertTrue(try temp.ledger.verify().isClean, "seed \(seed)")
            // The same state after a reopen that folds the log (or reads the snapshot) and a rebuild.
            let before = try temp.ledger.rewards(app: "a", user: "alice").bytes
            try temp.reopen(rebuildingProjections: true)
            XCTAssertEqual(try temp.ledger.rewards(app: "a", user: "alice").bytes, before, "seed \(seed)")
        }
        XCTAssertGreaterThan(resumedInAll, 0, "no import resumed a waiting reward")
    }
}
