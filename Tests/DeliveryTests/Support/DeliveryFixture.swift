import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// A real ledger in a fresh temporary folder, set up through real commands, removed at the end.
final class DeliveryFixture {
    let folder: String
    private(set) var ledger: Ledger!
    static let secret = "whsec_test_5f2c9a"

    init() throws {
        folder = NSTemporaryDirectory() + "referral-delivery-test-" + UUID().uuidString
        ledger = try Ledger(folder: folder)
    }

    /// Releases the writer lock (so a `referral-ledger` process can open the folder).
    func close() { ledger = nil }

    func reopen() throws { ledger = try Ledger(folder: folder) }

    deinit {
        ledger = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Submits a command and fails the test unless the ledger accepted it.
    @discardableResult
    func submit(_ command: JSONValue, file: StaticString = #filePath, line: UInt = #line) throws -> JSONValue {
        let result = try ledger.submit(command)
        XCTAssertTrue(result.ok, "refused: \(result.text)", file: file, line: line)
        return result.json
    }

    /// `app.configure` with referrals on and the given settings.
    func configure(_ app: String, _ settings: [String: JSONValue]) throws {
        var all = settings
        all["friend_referrals_enabled"] = true
        try submit(["type": "app.configure", "app": .string(app), "settings": .object(all)])
    }

    /// An app whose webhooks go to `url`, signed with `secret`.
    func configureWebhookApp(_ app: String, url: String, extra: [String: JSONValue] = [:]) throws {
        var settings = extra
        settings["webhook_url"] = .string(url)
        settings["webhook_secret"] = .string(Self.secret)
        try configure(app, settings)
    }

    /// App acme sending webhooks to `url`, live program spring (custom benefit, automatic) and bob
    /// enrolled: one `ready` reward to deliver. Answers its ID.
    @discardableResult
    func readyWebhookReward(url: String) throws -> String {
        try configureWebhookApp("acme", url: url)
        try createProgram("acme", "spring")
        return try enroll("acme", "spring", friend: "bob")
    }

    static let customBenefit: JSONValue = ["type": "custom", "feature": "pro", "payload": ["days": 7]]

    /// An active program whose friends earn `benefit` when they accept an invite.
    func createProgram(_ app: String, _ program: String, environment: String = "live", benefit: JSONValue = customBenefit,
                       delivery: String = "automatic", notify: [String]? = nil) throws {
        var config: [String: JSONValue] = [
            "inviter": .null,
            "friend": ["trigger": "invite_accepted", "benefit": benefit],
            "new_users_only": false,
            "delivery": .string(delivery),
        ]
        if let notify { config["notify"] = .array(notify.map { .string($0) }) }
        try submit(["type": "program.create", "app": .string(app), "program": .string(program),
                    "environment": .string(environment), "config": .object(config)])
        try submit(["type": "program.activate", "app": .string(app), "program": .string(program)])
    }

    /// Enrols `friend` through `inviter`'s code; answers the friend's reward ID.
    func enroll(_ app: String, _ program: String, inviter: String = "inviter-1", friend: String,
                file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let invite = try submit(["type": "invite.create", "app": .string(app), "program": .string(program), "user": .string(inviter)],
                                file: file, line: line)
        let code = try XCTUnwrap(invite["code"].stringValue, "invite.create gave no code: \(invite.text)", file: file, line: line)
        try submit(["type": "referral.enroll", "app": .string(app), "program": .string(program), "user": .string(friend),
                    "code": .string(code)], file: file, line: line)
        let reward = try self.reward(app, friend, file: file, line: line)
        return try XCTUnwrap(reward["reward_id"].stringValue, file: file, line: line)
    }

    /// The user's only reward, as the rewards query shows it.
    func reward(_ app: String, _ user: String, program: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> JSONValue {
        let list = try ledger.rewards(app: app, user: user, program: program)["rewards"].arrayValue ?? []
        XCTAssertEqual(list.count, 1, "expected one reward for \(user): \(list)", file: file, line: line)
        return list.first ?? .null
    }

    /// Every stored event of a type, in order.
    func events(_ type: String) throws -> [JSONValue] {
        var all: [JSONValue] = []
        var from: UInt64 = 1
        while true {
            let (page, next) = try ledger.events(from: from, limit: 1000)
            all += try page.map { try JSONValue(parsing: $0) }
            guard let next else { break }
            from = next
        }
        return all.filter { $0["type"].stringValue == type }
    }
}
