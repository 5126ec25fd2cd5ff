import Foundation
import LedgerCodec
import ReferralLedger
import ReferralRules
import XCTest

/// Commands built in code (`Command.Body`) are sent as the JSON a client sends: read back they are
/// the same command, and submitted they are decided like any other.
final class TypedCommandTests: XCTestCase {
    let at = Timestamp(rfc3339: "2026-03-01T10:00:00Z")!
    let config = ProgramConfig(
        inviter: .init(qualifyingEvent: "level_up", reward: .every(friends: 2, maxRewards: 3, benefit: .points(amount: 50)), maxEnrollmentsPer30Days: 40),
        friend: .init(trigger: "invite_accepted", benefit: .custom(feature: "pro", payload: ["days": 7])),
        newUsersOnly: false, delivery: .review, notify: ["owner@example.com"],
        invites: .init(format: .prefixed, prefix: "ACME", length: 8, expiresAfterDays: 30, maxEnrollments: 10))

    /// One body of every command type, each field set (optional ones both ways where they exist).
    var everyBody: [Command.Body] {
        [
            .configureApp(settings: ["friend_referrals_enabled": true, "signup_grace_days": .null]),
            .createProgram(program: "spring", environment: .sandbox, config: config),
            .updateProgram(program: "spring", config: ProgramConfig(inviter: .init(qualifyingEvent: "signup_completed", reward: .milestones([
                .init(id: "five", friends: 5, benefit: .revenueCatEntitlement(entitlement: "pro", duration: ISODuration("P1M")!)),
                .init(id: "ten", friends: 10, benefit: .appleOfferCode(offerID: "offer-10")),
            ])))),
            .activateProgram(program: "spring"),
            .pauseProgram(program: "spring"),
            .verifyAccount(user: "bob", accountCreatedAt: at),
            .createInvite(program: "spring", user: "alice"),
            .enroll(program: "spring", friend: "bob", code: "ACME-23456789"),
            .enroll(program: "spring", friend: "bob", code: "acme-23456789", accountCreatedAt: at, deviceID: "device-1"),
            .track(user: "bob", name: "level_up", eventID: "t-1"),
            .revenueCat(event: ["id": "rc-1", "type": "INITIAL_PURCHASE", "app_user_id": "bob", "price": 4.99]),
            .approveReward(rewardID: "r1", by: "owner"),
            .rejectReward(rewardID: "r1", by: "owner", reason: "fraud"),
            .substituteReward(rewardID: "r1", by: "owner", benefit: .points(amount: 5)),
            .retryReward(rewardID: "r1", by: "owner"),
            .recordDelivery(rewardID: "r1", by: "owner", note: "mailed a voucher"),
            .verifyEligibility(program: "spring", friend: "bob", by: "owner", eligible: false),
            .importInventory(program: "spring", side: .friend, offerID: "offer-10", codes: [.init(code: "AB12", expiresAt: at), .init(code: "CD34", expiresAt: nil)]),
            .deliveryStarted(rewardID: "r1", attempt: 1),
            .deliverySucceeded(rewardID: "r1", attempt: 1),
            .deliveryFailed(rewardID: "r1", attempt: 2, error: "HTTP 503"),
            .spendPoints(user: "alice", amount: 20, reason: "sticker"),
            .reportNotification(position: 12, outcome: "sent"),
            .reportNotification(position: 12, outcome: "failed", error: "mail command exited 1"),
        ]
    }

    func testEveryTypeReadsBackAsTheSameCommand() throws {
        XCTAssertEqual(Set(everyBody.map(\.type)), Set(Command.types), "one body of every command type")
        for body in everyBody {
            let json = Command.json(body, app: "acme", at: at, id: "k-1")
            let read = try Command(json: json, now: Timestamp(milliseconds: 0))
            XCTAssertEqual(read.body, body, json.text)
            XCTAssertEqual(read.type, body.type)
            XCTAssertEqual(read.app, "acme")
            XCTAssertEqual(read.at, at)
            XCTAssertEqual(read.id, "k-1")
        }
        // Left out, `at` is the ledger's now and `id` absent.
        let read = try Command(json: Command.json(.activateProgram(program: "spring"), app: "acme"), now: at)
        XCTAssertEqual(read.at, at)
        XCTAssertNil(read.id)
    }

    func testTypedCommandsAreDecidedLikeClientJSON() throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-typed-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let ledger = try Ledger(folder: folder)
        let program = ProgramConfig(inviter: .init(qualifyingEvent: "level_up", reward: .once(friends: 1, benefit: .points(amount: 10))), newUsersOnly: false)
        for body: Command.Body in [.configureApp(settings: ["friend_referrals_enabled": true]),
                                   .createProgram(program: "spring", environment: .live, config: program),
                                   .activateProgram(program: "spring")] {
            XCTAssertTrue(try ledger.submit(body, app: "acme", at: at).ok)
        }
        let invite = try ledger.submit(.createInvite(program: "spring", user: "alice"), app: "acme", at: at)
        let code = try XCTUnwrap(invite.inviteCode, invite.text)
        XCTAssertEqual(invite.events.map { $0["type"].stringValue }, ["invite.created"])
        let enrolled = try ledger.submit(.enroll(program: "spring", friend: "bob", code: code), app: "acme", at: at, id: "enrol-bob")
        XCTAssertTrue(enrolled.ok, enrolled.text)
        XCTAssertTrue(try ledger.submit(.enroll(program: "spring", friend: "bob", code: code), app: "acme", at: at, id: "enrol-bob").isDuplicate)
        XCTAssertTrue(try ledger.submit(.track(user: "bob", name: "level_up", eventID: "t1"), app: "acme", at: at).ok)
        XCTAssertEqual(try ledger.progress(app: "acme", program: "spring", user: "alice")["earned_rewards"], 1)
        XCTAssertEqual(try ledger.balance(app: "acme", user: "alice")["balance"], 10)

        // The same answers as values.
        let progress = try ledger.inviterProgress(app: "acme", program: "spring", user: "alice")
        XCTAssertEqual(progress.qualifiedCount, 1)
        XCTAssertEqual(progress.enrolledCount, 1)
        XCTAssertEqual(progress.earnedRewards, 1)
        XCTAssertNil(progress.nextThreshold, "a once-only reward, earned")
        XCTAssertEqual(progress.requiredCount, 1)
        XCTAssertEqual(progress.remainingCount, 0)
        XCTAssertEqual(try ledger.pointsBalance(app: "acme", user: "alice").balance, 10)
        let rewards = try ledger.rewardSummaries(app: "acme", user: "alice")
        XCTAssertEqual(rewards.count, 1)
        XCTAssertEqual(rewards.first?.side, .inviter)
        XCTAssertEqual(rewards.first?.status, .fulfilled, "points are fulfilled when earned")
        XCTAssertEqual(rewards.first?.benefit, .points(amount: 10))
        XCTAssertEqual(rewards.first?.programVersion, 1)
        XCTAssertEqual(rewards.first?.isUsable, true)
        XCTAssertEqual(rewards.first?.rewardID, try ledger.rewards(app: "acme", user: "alice")["rewards"][0]["reward_id"].stringValue)
        XCTAssertThrowsError(try ledger.inviterProgress(app: "acme", program: "nope", user: "alice"))
        let summary = try ledger.programSummary(app: "acme", program: "spring", now: at)
        let programJSON = try ledger.program(app: "acme", program: "spring", now: at)
        XCTAssertEqual(summary.program, "spring")
        XCTAssertEqual(summary.environment, .live)
        XCTAssertEqual(summary.status, .active)
        XCTAssertEqual(summary.version, 1)
        XCTAssertEqual(summary.config.json, program.json, "the config in force, as created")
        XCTAssertTrue(summary.isAcceptingNewReferrals)
        XCTAssertEqual(summary.createdAt, at)
        XCTAssertEqual(summary.firstActivatedAt, at)
        XCTAssertEqual([summary.inviters, summary.invites, summary.enrolled, summary.qualified, summary.rewardsEarned], [1, 1, 1, 1, 1])
        XCTAssertEqual(summary.rewardsByStatus[.fulfilled], 1)
        XCTAssertEqual(summary.rewardsByStatus.values.reduce(0, +), 1)
        XCTAssertEqual(programJSON["counts"]["enrolled"].intValue, 1)
        XCTAssertThrowsError(try ledger.programSummary(app: "acme", program: "nope")) { error in
            XCTAssertEqual((error as? CodedError)?.errorCode, "unknown_program")
        }

        // The same checks as a client's JSON: a refusal is a result, and records nothing.
        let head = try ledger.currentHead().position
        let selfReferral = try ledger.submit(.enroll(program: "spring", friend: "alice", code: code), app: "acme", at: at)
        XCTAssertEqual(selfReferral.rejection, .selfReferral, selfReferral.text)
        XCTAssertNotNil(selfReferral.errorMessage)
        let tooMuch = try ledger.submit(.spendPoints(user: "alice", amount: 11, reason: "x"), app: "acme", at: at)
        XCTAssertEqual(tooMuch.errorCode, "insufficient_points", tooMuch.text)
        let malformed = try ledger.submit(.createInvite(program: "not a key", user: "alice"), app: "acme", at: at)
        XCTAssertEqual(malformed.errorCode, "invalid_command", malformed.text)
        XCTAssertEqual(try ledger.currentHead().position, head + 1, "only the self-referral is recorded (as audit evidence)")
        XCTAssertTrue(try ledger.verify().isClean)

        // A time RFC 3339 cannot write (microseconds taken for milliseconds: year 58133) is
        // refused, not recorded as a four-digit year that names another time.
        let micros = Timestamp(milliseconds: at.milliseconds * 1000)
        XCTAssertFalse(micros.isWritable)
        let mistaken = try ledger.submit(.track(user: "bob", name: "level_up", eventID: "t2"), app: "acme", at: micros)
        XCTAssertEqual(mistaken.errorCode, "invalid_command", mistaken.text)
        XCTAssertTrue(mistaken.errorMessage?.contains("command.at must be an RFC 3339 time") == true, mistaken.text)
        XCTAssertTrue(mistaken.errorMessage?.contains("+5") == true, "names the time it was given: \(mistaken.text)")
        let expiring = try ledger.submit(.importInventory(program: "spring", side: .friend, offerID: "o", codes: [.init(code: "AB12", expiresAt: .init(milliseconds: .max))]),
                                         app: "acme", at: at)
        XCTAssertEqual(expiring.errorCode, "invalid_command", expiring.text)
        XCTAssertEqual(try ledger.currentHead().position, head + 1, "neither is recorded")
    }

    func testGroupCommitterTakesTypedCommands() async throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-typed-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let committer = GroupCommitter(ledger: try Ledger(folder: folder))
        let result = try await committer.submit(.configureApp(settings: ["friend_referrals_enabled": true]), app: "acme", id: "setup")
        XCTAssertTrue(result.ok, result.text)
        let again = try await committer.submit(.configureApp(settings: ["friend_referrals_enabled": true]), app: "acme", id: "setup")
        XCTAssertTrue(again.isDuplicate, again.text)
        committer.drain()
    }
}
