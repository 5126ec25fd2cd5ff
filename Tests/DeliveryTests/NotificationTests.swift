import Delivery
import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// Owner notifications through the operator's sendmail-compatible command.
final class NotificationTests: XCTestCase {
    var files = ""

    override func setUpWithError() throws { files = try makeTemporaryFolder() }
    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: files) }

    /// A stand-in for `sendmail -t`: writes its arguments and the message it reads to a file.
    func captureScript() throws -> (command: String, output: String) {
        let output = files + "/mail.txt"
        let script = try writeScript("#!/bin/sh\necho \"ARGS: $*\" >> '\(output)'\ncat >> '\(output)'\n", in: files, name: "fake-sendmail")
        return (script + " -t", output)
    }

    func testTheMailCommandGetsTheNotificationAndItIsRecordedSent() async throws {
        let f = try DeliveryFixture()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: try Receiver.closedPortURL())
        try f.createProgram("acme", "spring", delivery: "review", notify: ["owner@example.com", "ops@example.com"])
        let rid = try f.enroll("acme", "spring", friend: "bob")
        XCTAssertEqual(try f.reward("acme", "bob")["status"].stringValue, "pending_review")
        let pending = f.ledger.pendingNotifications()
        XCTAssertEqual(pending.count, 1)
        let (command, output) = try captureScript()

        let summary = await f.worker(clock: clock, mailCommand: command).runOnce()

        XCTAssertEqual(summary.notificationsSent, 1)
        XCTAssertEqual(summary.notificationsFailed, 0)
        let mail = try String(contentsOfFile: output, encoding: .utf8)
        XCTAssertTrue(mail.hasPrefix("ARGS: -t\n"), mail)
        XCTAssertTrue(mail.contains("\nTo: owner@example.com,\n ops@example.com\n"), mail)
        XCTAssertTrue(mail.contains("\nSubject: [referral-ledger] Reward \(rid) for bob in spring is waiting for review\n"), mail)
        XCTAssertTrue(mail.contains("\n\n"), "headers end with an empty line")
        XCTAssertTrue(mail.contains("App:          acme\n"), mail)
        XCTAssertTrue(mail.contains("Program:      spring\n"), mail)
        XCTAssertTrue(mail.contains("Kind:         reward_review"), mail)
        XCTAssertTrue(mail.contains("Reward:       \(rid)\n"), mail)
        // The commands that settle it, ready to send.
        XCTAssertTrue(mail.contains(#"{"type":"reward.approve","app":"acme","reward_id":"\#(rid)","by":"YOUR NAME"}"#), mail)
        let sent = try f.events("notification.sent")
        XCTAssertEqual(sent.count, 1)
        XCTAssertEqual(sent.first?["data"]["notification"].intValue, Int64(pending[0].position))
        XCTAssertTrue(f.ledger.pendingNotifications().isEmpty)

        let again = await f.worker(clock: clock, mailCommand: command).runOnce()
        XCTAssertEqual(again.notificationsSent, 0, "a notification is sent once")
    }

    /// Sandbox programs never call outside, e-mail included: their notifications are recorded as
    /// simulated and the mail command never runs; a live program's cannot be reported simulated.
    func testASandboxProgramsNotificationsAreRecordedSimulatedNotMailed() async throws {
        let f = try DeliveryFixture()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: try Receiver.closedPortURL())
        try f.createProgram("acme", "trial", environment: "sandbox", delivery: "review", notify: ["owner@example.com"])
        try f.createProgram("acme", "spring", delivery: "review", notify: ["owner@example.com"])
        _ = try f.enroll("acme", "trial", friend: "bob")
        _ = try f.enroll("acme", "spring", friend: "carol")
        let pending = f.ledger.pendingNotifications()
        XCTAssertEqual(pending.map(\.simulated), [true, false])
        let refused = try f.ledger.submit(["type": "notification.report", "app": "acme", "notification": .int(Int64(pending[1].position)),
                                           "outcome": "simulated"])
        XCTAssertEqual(refused.errorCode, "invalid_transition", refused.text)
        let (command, output) = try captureScript()

        let summary = await f.worker(clock: clock, mailCommand: command).runOnce()

        XCTAssertEqual(summary.notificationsSent, 1, "only the live program's was mailed")
        XCTAssertEqual(summary.notificationsSimulated, 1)
        let mail = try String(contentsOfFile: output, encoding: .utf8)
        XCTAssertEqual(mail.components(separatedBy: "ARGS: -t").count - 1, 1, "one mail, the live program's: \(mail)")
        XCTAssertTrue(mail.contains("Program:      spring\n"), mail)
        let sent = try f.events("notification.sent")
        XCTAssertEqual(sent.map { $0["data"]["simulated"].boolValue }, [true, nil])
        XCTAssertTrue(f.ledger.pendingNotifications().isEmpty)
    }

    /// A review decided before its notice went out (a worker running late) is withdrawn, not
    /// mailed; the rules accept the withdrawal only for a decided review. An eligibility notice
    /// names its friend in the command it suggests.
    func testAReviewDecidedBeforeItsNoticeWentOutIsWithdrawnNotMailed() async throws {
        let f = try DeliveryFixture()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: try Receiver.closedPortURL())
        try f.createProgram("acme", "spring", delivery: "review", notify: ["owner@example.com"])
        let approved = try f.enroll("acme", "spring", friend: "bob")
        let waiting = try f.enroll("acme", "spring", inviter: "inviter-2", friend: "carol")
        try f.submit(["type": "program.update", "app": "acme", "program": "spring", "config": [
            "inviter": .null, "friend": ["trigger": "invite_accepted", "benefit": DeliveryFixture.customBenefit], "new_users_only": true,
            "delivery": "review", "notify": ["owner@example.com"]]])
        let invite = try f.submit(["type": "invite.create", "app": "acme", "program": "spring", "user": "inviter-3"])
        try f.submit(["type": "referral.enroll", "app": "acme", "program": "spring", "user": "dora", "code": invite["code"]])
        try f.submit(["type": "referral.enroll", "app": "acme", "program": "spring", "user": "erin", "code": invite["code"]])
        try f.submit(["type": "eligibility.verify", "app": "acme", "program": "spring", "user": "erin", "by": "owner", "decision": "ineligible"])
        let pending = f.ledger.pendingNotifications()
        XCTAssertEqual(pending.map(\.kind), ["reward_review", "reward_review", "eligibility_review", "eligibility_review"])
        XCTAssertEqual(pending.compactMap(\.user), ["dora", "erin"])
        XCTAssertEqual(pending.map(\.isDecided), [false, false, false, true])
        // Still waiting: a withdrawal is refused.
        let refused = try f.ledger.submit(["type": "notification.report", "app": "acme", "notification": .int(Int64(pending[0].position)),
                                           "outcome": "withdrawn"])
        XCTAssertEqual(refused.errorCode, "invalid_transition", refused.text)
        try f.submit(["type": "reward.approve", "app": "acme", "reward_id": .string(approved), "by": "owner"])
        let (command, output) = try captureScript()

        let summary = await f.worker(clock: clock, mailCommand: command).runOnce()

        XCTAssertEqual(summary.notificationsWithdrawn, 2, "bob's approved reward and erin's decided eligibility")
        XCTAssertEqual(summary.notificationsSent, 2, "carol's reward and dora's eligibility")
        let mail = try String(contentsOfFile: output, encoding: .utf8)
        XCTAssertEqual(mail.components(separatedBy: "ARGS: -t").count - 1, 2, mail)
        XCTAssertTrue(mail.contains(waiting), mail)
        XCTAssertFalse(mail.contains(approved), mail)
        XCTAssertTrue(mail.contains(#""user":"dora","by":"YOUR NAME","decision":"eligible""#), mail)
        XCTAssertFalse(mail.contains("erin"), mail)
        let withdrawn = try f.events("notification.withdrawn")
        XCTAssertEqual(withdrawn.map { $0["data"]["notification"].intValue }, [Int64(pending[0].position), Int64(pending[3].position)])
        XCTAssertEqual(withdrawn.first?["data"]["reason"], "already_decided")
        XCTAssertTrue(f.ledger.pendingNotifications().isEmpty)
        XCTAssertTrue(try f.ledger.verify().isClean)
    }

    /// A refund that sends a reward back to review requests a notice of its own: the older notice,
    /// about a review that is over, is withdrawn, so the owner gets one mail for the one review.
    func testAReviewSupersededByARefundIsWithdrawnInFavourOfTheNewNotice() async throws {
        let f = try DeliveryFixture()
        try f.configureWebhookApp("acme", url: try Receiver.closedPortURL())
        try f.submit(["type": "program.create", "app": "acme", "program": "spring", "environment": "live", "config": [
            "inviter": .null, "friend": ["trigger": "paid_purchase", "benefit": DeliveryFixture.customBenefit],
            "new_users_only": false, "delivery": "review", "notify": ["owner@example.com"]]])
        try f.submit(["type": "program.activate", "app": "acme", "program": "spring"])
        let invite = try f.submit(["type": "invite.create", "app": "acme", "program": "spring", "user": "alice"])
        try f.submit(["type": "referral.enroll", "app": "acme", "program": "spring", "user": "bob", "code": invite["code"]])
        let purchase: JSONValue = ["id": "rc-1", "type": "INITIAL_PURCHASE", "app_user_id": "bob", "price": 4.99, "period_type": "NORMAL",
                                   "store": "APP_STORE", "environment": "PRODUCTION", "transaction_id": "T1", "original_transaction_id": "T1"]
        try f.submit(["type": "revenuecat.event", "app": "acme", "event": purchase])
        XCTAssertEqual(f.ledger.pendingNotifications().count, 1)
        var refund = purchase
        refund["id"] = "rc-2"
        refund["type"] = "CANCELLATION"
        refund["cancel_reason"] = "CUSTOMER_SUPPORT"
        try f.submit(["type": "revenuecat.event", "app": "acme", "event": refund])
        let pending = f.ledger.pendingNotifications()
        XCTAssertEqual(pending.map(\.kind), ["reward_review", "reward_review"])
        XCTAssertEqual(pending.map(\.isDecided), [true, false], "the first review was superseded by the refund's")
        let (command, output) = try captureScript()

        let summary = await f.worker(clock: TestClock(), mailCommand: command).runOnce()

        XCTAssertEqual(summary.notificationsWithdrawn, 1)
        XCTAssertEqual(summary.notificationsSent, 1)
        let mail = try String(contentsOfFile: output, encoding: .utf8)
        XCTAssertEqual(mail.components(separatedBy: "ARGS: -t").count - 1, 1, mail)
        XCTAssertTrue(mail.contains("qualifying purchase was refunded"), mail)
        XCTAssertEqual(try f.events("notification.withdrawn").first?["data"]["reason"], "superseded")
        XCTAssertTrue(try f.ledger.verify().isClean)
    }

    /// The worker asks again right before each mail: a review decided while an earlier notice was
    /// being mailed is withdrawn, not mailed (under `serve`, decisions arrive while it works).
    func testAReviewDecidedWhileEarlierMailsGoOutIsWithdrawn() async throws {
        let f = try DeliveryFixture()
        try f.configureWebhookApp("acme", url: try Receiver.closedPortURL())
        try f.createProgram("acme", "spring", delivery: "review", notify: ["owner@example.com"])
        _ = try f.enroll("acme", "spring", friend: "bob")
        let second = try f.enroll("acme", "spring", inviter: "inviter-2", friend: "carol")
        let output = files + "/mail.txt", started = files + "/started", go = files + "/go"
        // The first mail waits until the test says go; the test decides the second review meanwhile.
        let script = try writeScript("#!/bin/sh\ntouch '\(started)'\nwhile [ ! -f '\(go)' ]; do sleep 0.02; done\ncat >> '\(output)'\n",
                                     in: files, name: "slow-sendmail")
        let worker = f.worker(clock: TestClock(), mailCommand: script)
        let run = Task { await worker.runOnce() }
        await waitUntil("the first mail has started") { FileManager.default.fileExists(atPath: started) }
        try f.submit(["type": "reward.approve", "app": "acme", "reward_id": .string(second), "by": "owner"])
        XCTAssertTrue(FileManager.default.createFile(atPath: go, contents: Data()))
        let summary = await run.value

        XCTAssertEqual(summary.notificationsSent, 1)
        XCTAssertEqual(summary.notificationsWithdrawn, 1)
        let mail = try String(contentsOfFile: output, encoding: .utf8)
        XCTAssertFalse(mail.contains(second), mail)
        XCTAssertTrue(try f.ledger.verify().isClean)
    }

    func testAFailingMailCommandIsRecordedFailedAndDeliveryStillProceeds() async throws {
        let f = try DeliveryFixture()
        let receiver = try Receiver()
        let clock = TestClock()
        try f.configureWebhookApp("acme", url: receiver.hookURL, extra: ["owner_email": "owner@example.com"])
        try f.createProgram("acme", "reviewed", delivery: "review")
        try f.createProgram("acme", "automatic")
        _ = try f.enroll("acme", "reviewed", friend: "bob")
        _ = try f.enroll("acme", "automatic", friend: "carol")
        XCTAssertEqual(f.ledger.pendingNotifications().first?.recipients, ["owner@example.com"])

        let summary = await f.worker(clock: clock, mailCommand: "cat > /dev/null; echo 'relay refused' >&2; exit 75").runOnce()

        XCTAssertEqual(summary.notificationsFailed, 1)
        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(receiver.count, 1)
        XCTAssertEqual(try f.reward("acme", "carol")["status"].stringValue, "fulfilled")
        let failed = try f.events("notification.failed")
        XCTAssertEqual(failed.count, 1)
        XCTAssertEqual(failed.first?["data"]["error"].stringValue, "the mail command exited with status 75: relay refused")
        XCTAssertEqual(failed.first?["data"]["final"], false)
        // Not due again before its retry_at; then sent once the mail command works.
        XCTAssertTrue(f.ledger.pendingNotifications(dueAt: clock.now()).isEmpty)
        let (command, output) = try captureScript()
        let early = await f.worker(clock: clock, mailCommand: command).runOnce()
        XCTAssertEqual(early.notificationsSent, 0)
        clock.advance(seconds: 10)
        let retried = await f.worker(clock: clock, mailCommand: command).runOnce()
        XCTAssertEqual(retried.notificationsSent, 1)
        XCTAssertTrue(try String(contentsOfFile: output, encoding: .utf8).contains("To: owner@example.com"))
        XCTAssertTrue(f.ledger.pendingNotifications(dueAt: clock.now().adding(seconds: 3600)).isEmpty)
        XCTAssertTrue(try f.ledger.verify().isClean)
    }

    /// A notification that failed 5 times is given up (final), and one requested before anyone was
    /// set to receive it goes to whoever is set when it is retried.
    func testFailedNotificationsAreRetriedFiveTimesAndFindLateRecipients() async throws {
        let f = try Self.rewardUnderReview(settings: [:])
        let clock = TestClock()
        XCTAssertEqual(f.ledger.pendingNotifications().first?.recipients, [])
        let first = await f.worker(clock: clock, mailCommand: "cat > /dev/null").runOnce()
        XCTAssertEqual(first.notificationsFailed, 1)
        try f.configure("acme", ["owner_email": "late@example.com"])
        clock.advance(seconds: 3600)
        let (command, output) = try captureScript()
        let second = await f.worker(clock: clock, mailCommand: command).runOnce()
        XCTAssertEqual(second.notificationsSent, 1)
        XCTAssertTrue(try String(contentsOfFile: output, encoding: .utf8).contains("To: late@example.com"))
        XCTAssertEqual(try f.events("notification.sent").first?["data"]["recipients"], ["late@example.com"])

        let g = try Self.rewardUnderReview(settings: ["owner_email": "owner@example.com"])
        for round in 1...6 {
            let summary = await g.worker(clock: clock, mailCommand: "cat > /dev/null; exit 75").runOnce()
            XCTAssertEqual(summary.notificationsFailed, round <= 5 ? 1 : 0, "round \(round)")
            clock.advance(seconds: 3600)
        }
        XCTAssertEqual(try g.events("notification.failed").last?["data"]["final"], true)
        XCTAssertTrue(g.ledger.pendingNotifications(dueAt: clock.now()).isEmpty)
        XCTAssertTrue(try g.ledger.verify().isClean)
    }

    func testAMailCommandThatCannotRunIsRecordedFailed() async throws {
        let f = try Self.rewardUnderReview(settings: ["owner_email": "owner@example.com"])
        let clock = TestClock()

        let summary = await f.worker(clock: clock, mailCommand: files + "/no-such-sendmail -t").runOnce()

        XCTAssertEqual(summary.notificationsFailed, 1)
        let error = try f.events("notification.failed").first?["data"]["error"].stringValue ?? ""
        XCTAssertTrue(error.hasPrefix("the mail command exited with status 127"), error)
    }

    func testAMailCommandThatHangsIsStoppedAndRecordedFailed() async throws {
        let f = try Self.rewardUnderReview(settings: ["owner_email": "owner@example.com"])
        let clock = TestClock()

        let summary = await f.worker(clock: clock, mailCommand: "exec sleep 30", mailTimeout: 0.5).runOnce()

        XCTAssertEqual(summary.notificationsFailed, 1)
        XCTAssertEqual(try f.events("notification.failed").first?["data"]["error"].stringValue,
                       "the mail command did not finish within 0.5 s and was stopped")
    }

    /// A command that says more on stderr than a pipe holds (64 KiB) is read as it writes: it ends,
    /// and its failure is reported with the start of what it said, not as a timeout.
    func testAMailCommandThatSaysALotOnStderrIsNotStoppedAsTimedOut() async throws {
        let f = try Self.rewardUnderReview(settings: ["owner_email": "owner@example.com"])
        let clock = TestClock()
        let command = "cat > /dev/null; echo 'smtp: relay refused' >&2; head -c 300000 /dev/zero | tr '\\0' 'x' >&2; exit 75"

        let summary = await f.worker(clock: clock, mailCommand: command, mailTimeout: 10).runOnce()

        XCTAssertEqual(summary.notificationsFailed, 1)
        let error = try f.events("notification.failed").first?["data"]["error"].stringValue ?? ""
        XCTAssertTrue(error.hasPrefix("the mail command exited with status 75: smtp: relay refused; xxx"), error)
        XCTAssertLessThan(error.utf8.count, 1200, "only the start of stderr is kept")
    }

    func testTheMailCommandStartsWithDefaultSignalsAndOnlyItsOwnDescriptors() async throws {
        let f = try Self.rewardUnderReview(settings: ["owner_email": "owner@example.com"])
        let clock = TestClock()
        let out = files + "/state.txt"
        let command = "grep -E '^Sig(Blk|Ign)' /proc/self/status > '\(out)'; ls /proc/self/fd >> '\(out)'; cat > /dev/null"

        let summary = await f.worker(clock: clock, mailCommand: command).runOnce()

        XCTAssertEqual(summary.notificationsSent, 1)
        let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("SigBlk:\t0000000000000000"), "no signal blocked (SIGTERM must stop it): \(lines)")
        let ignored = try XCTUnwrap(lines.first { $0.hasPrefix("SigIgn:") }.flatMap { UInt64($0.dropFirst(8), radix: 16) })
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP] {
            XCTAssertEqual(ignored & (1 << UInt64(signal - 1)), 0, "signal \(signal) is back to its default action: \(lines)")
        }
        let fds = lines.filter { Int($0) != nil }.compactMap { Int($0) }
        XCTAssertEqual(fds.filter { $0 > 3 }, [], "only stdin, stdout, stderr (and ls's own directory) are open: \(fds)")
    }

    func testANotificationWithoutRecipientsIsReportedFailedWithoutRunningTheCommand() async throws {
        let f = try Self.rewardUnderReview(settings: [:])
        let clock = TestClock()
        let (command, output) = try captureScript()

        let summary = await f.worker(clock: clock, mailCommand: command).runOnce()

        XCTAssertEqual(summary.notificationsFailed, 1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: output), "the mail command was not run")
        XCTAssertEqual(try f.events("notification.failed").first?["data"]["error"].stringValue,
                       "no recipients: set the program's notify or the app's owner_email")
    }

    func testWithoutAMailCommandNotificationsStayPending() async throws {
        let f = try Self.rewardUnderReview(settings: ["owner_email": "owner@example.com"])
        let clock = TestClock()

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.notificationsSent + summary.notificationsFailed, 0)
        XCTAssertEqual(f.ledger.pendingNotifications().count, 1)
        XCTAssertTrue(try f.events("notification.sent").isEmpty)
        XCTAssertTrue(try f.events("notification.failed").isEmpty)
    }

    /// A ledger where bob's enrolment earned a reward held for review, so one owner notification
    /// (`reward_review`) is waiting to be sent.
    static func rewardUnderReview(settings: [String: JSONValue]) throws -> DeliveryFixture {
        let f = try DeliveryFixture()
        try f.configure("acme", settings)
        try f.createProgram("acme", "reviewed", delivery: "review")
        _ = try f.enroll("acme", "reviewed", friend: "bob")
        return f
    }
}
