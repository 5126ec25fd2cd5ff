import Delivery
import Foundation
import LedgerCodec
import ReferralLedger
import ReferralRules
import XCTest

/// The README's "Embedding the library" example, line for line (in a temporary folder), so the
/// example keeps compiling and doing what it says.
final class EmbeddingExampleTests: XCTestCase {
    func testTheReadmeExampleRuns() async throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-embedding-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }

        // The example:
        let ledger = try Ledger(folder: folder)
        let program = ProgramConfig(inviter: .init(qualifyingEvent: "signup_completed", reward: .once(friends: 1, benefit: .points(amount: 10))),
                                    newUsersOnly: false)
        for (id, setup) in [("setup-acme", Command.Body.configureApp(settings: ["friend_referrals_enabled": true])),
                            ("setup-spring", .createProgram(program: "spring", environment: .live, config: program)),
                            ("setup-spring-on", .activateProgram(program: "spring"))] {
            let answer = try ledger.submit(setup, app: "acme", id: id)
            guard answer.ok else { fatalError("\(id) refused: \(answer.text)") }
        }
        let result = try ledger.submit(.createInvite(program: "spring", user: "alice"), app: "acme")
        print(result.text)
        guard let code = result.inviteCode else {
            fatalError("no invite: \(result.errorCode ?? "") \(result.errorMessage ?? "")")
        }
        let enrolled = try ledger.submit(.enroll(program: "spring", friend: "bob", code: code), app: "acme", id: "enrol-bob")
        let sameAsJSON = try ledger.submit(try JSONValue(parsing: #"{"type":"referral.enroll","app":"acme","program":"spring","user":"bob","code":"\#(code)","id":"enrol-bob"}"#))
        let progress = try ledger.progress(app: "acme", program: "spring", user: "alice")
        let committer = GroupCommitter(ledger: ledger)
        let lines: [[UInt8]] = [Array(#"{"type":"invite.create","app":"acme","program":"spring","user":"bob"}"#.utf8)]
        let results = try await committer.submit(lines)
        let worker = DeliveryWorker(ledger: ledger, configuration: DeliveryConfiguration(mailCommand: "/usr/sbin/sendmail -t"))
        let delivering = Task { await worker.run() }
        delivering.cancel()
        let delivered = await delivering.value
        committer.drain()
        worker.committer.drain()
        ledger.close()

        XCTAssertEqual(result.json["ok"], true, result.json.text)
        XCTAssertNotNil(result.json["code"].stringValue)
        XCTAssertTrue(enrolled.ok, enrolled.text)
        XCTAssertTrue(sameAsJSON.isDuplicate, "the typed command and its JSON are the same command: \(sameAsJSON.text)")
        XCTAssertEqual(progress["required_count"], 1, progress.text)
        XCTAssertEqual(progress["enrolled_count"], 1, progress.text)
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(results[0].json["ok"], true, results[0].json.text)
        XCTAssertNotEqual(results[0].json["code"], result.json["code"])
        XCTAssertEqual(delivered.failed, 0, "nothing of this program needs an outside call")
        // Drained: later submissions are refused, not lost in a queue nobody empties.
        do {
            _ = try await committer.submit(lines)
            XCTFail("a drained committer took a command")
        } catch let error as LedgerError {
            XCTAssertEqual(error.code, "shutting_down")
        }
        // Closed: the folder opens again at once, for the checks below.
        XCTAssertThrowsError(try ledger.submit(.createInvite(program: "spring", user: "carol"), app: "acme")) {
            XCTAssertEqual(($0 as? LedgerError)?.code, "ledger_closed", "\($0)")
        }
        let reopened = try Ledger(folder: folder)
        // The set-up runs again safely: each id answers its first result and records nothing.
        let head = try reopened.currentHead()
        for (id, setup) in [("setup-acme", Command.Body.configureApp(settings: ["friend_referrals_enabled": true])),
                            ("setup-spring", .createProgram(program: "spring", environment: .live, config: program)),
                            ("setup-spring-on", .activateProgram(program: "spring"))] {
            let again = try reopened.submit(setup, app: "acme", id: id)
            XCTAssertTrue(again.ok && again.isDuplicate, again.text)
        }
        XCTAssertEqual(try reopened.currentHead(), head)
        XCTAssertTrue(try reopened.verify().isClean)

        // What a backend reads off a result without digging in its JSON.
        XCTAssertNil(result.inviteURL, "no share_link_host yet")
        XCTAssertTrue(try reopened.submit(.configureApp(settings: ["share_link_host": "go.acme.test"]), app: "acme").ok)
        let again = try reopened.submit(.createInvite(program: "spring", user: "alice"), app: "acme")
        XCTAssertEqual(again.inviteCode, code)
        XCTAssertEqual(again.inviteURL, "https://go.acme.test/r/\(code)")
        let stranger = try reopened.submit(.track(user: "stranger", name: "signup_completed", eventID: "e-1"), app: "acme")
        XCTAssertTrue(stranger.ok, stranger.text)
        XCTAssertEqual(stranger.appended, 0, "a user who is not enrolled: acknowledged, not stored")
        XCTAssertEqual(stranger.position, try reopened.currentHead().position, "the head it was decided at")
        XCTAssertEqual("\(Reward.Status.pendingReview)", "pending_review", "statuses print their wire names")
        XCTAssertEqual("\(ProgramState.Status.active)", "active")
        // The owner's views filtered by typed statuses answer what the wire names do.
        let signup = try reopened.submit(.track(user: "bob", name: "signup_completed", eventID: "bob-signup"), app: "acme")
        XCTAssertTrue(signup.events.contains { $0["type"] == "reward.earned" }, "bob qualifies alice: \(signup.text)")
        let every = try reopened.deliveries(app: "acme")["deliveries"].arrayValue ?? []
        XCTAssertFalse(every.isEmpty)
        for status in [Reward.Status.pendingReview, .awaitingInventory, .ready, .fulfilling, .fulfilled, .failed, .rejected] {
            let typed = try reopened.deliveries(app: "acme", status: status)
            XCTAssertEqual(typed, try reopened.deliveries(app: "acme", status: status.rawValue))
            XCTAssertEqual(typed["deliveries"].arrayValue?.count, every.filter { $0["status"].stringValue == status.rawValue }.count, "\(status)")
        }
        for status in ParticipantStatus.allCases {
            XCTAssertEqual(try reopened.participants(app: "acme", program: "spring", status: status),
                           try reopened.participants(app: "acme", program: "spring", status: status.rawValue), "\(status)")
        }
        let inviters = try reopened.participants(app: "acme", program: "spring", status: .inviter)["participants"].arrayValue ?? []
        XCTAssertTrue(inviters.contains { $0["user"] == "alice" }, "\(inviters)")
        XCTAssertEqual(Ledger.participantStatuses, ["inviter", "friend", "eligible", "pending_review", "ineligible", "qualified"])
    }

    /// The example in the README is the one above: every line of its code (comments aside), in
    /// its order, is a line of this test.
    func testTheReadmeShowsThisExample() throws {
        let here = URL(fileURLWithPath: #filePath)
        let root = here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let section = try XCTUnwrap(readme.components(separatedBy: "## Embedding the library").dropFirst().first)
        let block = try XCTUnwrap(section.components(separatedBy: "```swift\n").dropFirst().first?.components(separatedBy: "```").first)
        func code(_ text: String) -> [String] {
            text.split(separator: "\n").map { line in
                // A comment starts at `//` outside a string literal (the example's strings hold none).
                let kept = line.range(of: "//").map { line[..<$0.lowerBound] } ?? line[...]
                return kept.trimmingCharacters(in: .whitespaces)
            }.filter { !$0.isEmpty }
        }
        // The README's folder is the test's temporary one.
        let shown = code(block).filter { !$0.hasPrefix("import ") }.map { $0.replacingOccurrences(of: #""/var/lib/referrals""#, with: "folder") }
        let tested = code(try String(contentsOf: here, encoding: .utf8))
        XCTAssertGreaterThan(shown.count, 20)
        var next = tested.startIndex
        for line in shown {
            guard let found = tested[next...].firstIndex(of: line) else {
                return XCTFail("the README's line is not in this test (in order): \(line)")
            }
            next = found + 1
        }
    }
}
