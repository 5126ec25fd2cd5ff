import LedgerCodec
import ReferralLedger
import ReferralRules

/// Sends the ledger's pending owner notifications through the operator's mail command and
/// records each outcome with `notification.report` (SPEC §11). A notification without
/// recipients, or whose command fails, is reported failed; it never blocks deliveries.
public final class Notifier: Sendable {
    public let ledger: Ledger
    /// Where the reports are written (the delivery worker's committer when it made this sender).
    public let committer: GroupCommitter
    public let mailCommand: String
    /// Seconds the command may run, 0.1 to 600 (as `DeliveryConfiguration.mailTimeout`).
    public let timeout: Double
    private let clock: @Sendable () -> Timestamp
    private let log: (@Sendable (String) -> Void)?

    public static let noRecipients = "no recipients: set the program's notify or the app's owner_email"

    /// A sender writing its reports through a committer of its own.
    public convenience init(ledger: Ledger, mailCommand: String, timeout: Double = 30,
                            clock: @escaping @Sendable () -> Timestamp = { Timestamp.now() }, log: (@Sendable (String) -> Void)? = nil) {
        self.init(committer: GroupCommitter(ledger: ledger), mailCommand: mailCommand, timeout: timeout, clock: clock, log: log)
    }

    /// A sender writing its reports through `committer`.
    public init(committer: GroupCommitter, mailCommand: String, timeout: Double = 30,
                clock: @escaping @Sendable () -> Timestamp = { Timestamp.now() }, log: (@Sendable (String) -> Void)? = nil) {
        self.ledger = committer.ledger
        self.committer = committer
        self.mailCommand = mailCommand
        self.timeout = DeliveryConfiguration.seconds(timeout, default: 30, in: 0.1...600)
        self.clock = clock
        self.log = log
        MailCommand.ignoreBrokenPipes
    }

    /// Sends every pending notification once, oldest first, and reports each; answers the counts
    /// (`notificationsSent`, `notificationsSimulated`, `notificationsFailed`, `notificationsWithdrawn`).
    /// A review notice whose review was decided since it was requested is withdrawn, not mailed.
    public func sendPending() async -> DeliverySummary {
        var summary = DeliverySummary()
        for listed in ledger.pendingNotifications(dueAt: clock()) {
            if Task.isCancelled { break }
            // Asked again right before it goes out: earlier mails take time, and a review decided
            // meanwhile is withdrawn, not mailed.
            guard let n = ledger.pendingNotification(at: listed.position) else { continue }
            let error: String?
            if n.isDecided {
                error = nil
            } else if n.simulated {
                error = nil  // a sandbox program's: recorded as simulated, no mail (SPEC §11: no outside call)
            } else if n.recipients.isEmpty {
                error = Self.noRecipients
            } else {
                error = await MailCommand.run(mailCommand, input: MailMessage.compose(n), timeout: timeout)
            }
            let outcome: JSONValue = n.isDecided ? "withdrawn" : n.simulated ? "simulated" : error == nil ? "sent" : "failed"
            var command: [String: JSONValue] = ["type": "notification.report", "app": .string(n.app), "notification": .int(Int64(n.position)),
                                                "outcome": outcome, "at": .string(clock().description)]
            if let error { command["error"] = .string(error) }
            do {
                let result = try await committer.submit([.value(.object(command))])[0]
                if !result.ok {
                    log?("notification \(n.position) of app \(n.app): the ledger refused the report: \(result.json["error"]["message"].stringValue ?? result.text)")
                    continue
                }
            } catch {
                log?("notification \(n.position) of app \(n.app): could not record the report: \(error)")
                continue
            }
            if n.isDecided {
                summary.notificationsWithdrawn += 1
                log?("notification \(n.position) (\(n.kind)) of app \(n.app): the review was decided before it went out; withdrawn, not mailed")
            } else if let error {
                summary.notificationsFailed += 1
                log?("notification \(n.position) (\(n.kind)) of app \(n.app) failed: \(error)")
            } else {
                if n.simulated { summary.notificationsSimulated += 1 } else { summary.notificationsSent += 1 }
                log?(n.simulated ? "notification \(n.position) (\(n.kind)) of sandbox program \(n.program), app \(n.app): recorded as simulated, not mailed"
                     : "notification \(n.position) (\(n.kind)) of app \(n.app) sent to \(n.recipients.joined(separator: ", "))")
            }
        }
        return summary
    }
}
