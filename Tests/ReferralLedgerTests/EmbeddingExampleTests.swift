import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// The README's "Embedding the library" example, line for line (with a temporary folder and a
/// program set up first), so the example keeps compiling and doing what it says.
final class EmbeddingExampleTests: XCTestCase {
    func testTheReadmeExampleRuns() async throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-embedding-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        do {
            let setup = try Ledger(folder: folder)
            for text in [#"{"type":"app.configure","app":"acme","at":"2026-03-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#,
                         #"{"type":"program.create","app":"acme","at":"2026-03-01T00:00:00Z","program":"spring","environment":"live","config":{"inviter":{"qualifying_event":"signup_completed","reward":{"mode":"once","friends":1,"benefit":{"type":"points","amount":10}}},"friend":null,"new_users_only":false}}"#,
                         #"{"type":"program.activate","app":"acme","at":"2026-03-01T00:00:00Z","program":"spring"}"#] {
                XCTAssertEqual(try setup.submit(try JSONValue(parsing: text)).json["ok"], true)
            }
        }

        // The example:
        let ledger = try Ledger(folder: folder)
        let result = try ledger.submit(.createInvite(program: "spring", user: "alice"), app: "acme")
        print(result.text)
        let code = result.inviteCode!
        let enrolled = try ledger.submit(.enroll(program: "spring", friend: "bob", code: code), app: "acme", id: "enrol-bob")
        let sameAsJSON = try ledger.submit(try JSONValue(parsing: #"{"type":"referral.enroll","app":"acme","program":"spring","user":"bob","code":"\#(code)","id":"enrol-bob"}"#))
        let progress = try ledger.progress(app: "acme", program: "spring", user: "alice")
        let committer = GroupCommitter(ledger: ledger)
        let lines: [[UInt8]] = [Array(#"{"type":"invite.create","app":"acme","program":"spring","user":"bob"}"#.utf8)]
        let results = try await committer.submit(lines)
        committer.drain()

        XCTAssertEqual(result.json["ok"], true, result.json.text)
        XCTAssertNotNil(result.json["code"].stringValue)
        XCTAssertTrue(enrolled.ok, enrolled.text)
        XCTAssertTrue(sameAsJSON.isDuplicate, "the typed command and its JSON are the same command: \(sameAsJSON.text)")
        XCTAssertEqual(progress["required_count"], 1, progress.text)
        XCTAssertEqual(progress["enrolled_count"], 1, progress.text)
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(results[0].json["ok"], true, results[0].json.text)
        XCTAssertNotEqual(results[0].json["code"], result.json["code"])
        // Drained: later submissions are refused, not lost in a queue nobody empties.
        do {
            _ = try await committer.submit(lines)
            XCTFail("a drained committer took a command")
        } catch let error as LedgerError {
            XCTAssertEqual(error.code, "shutting_down")
        }
    }
}
