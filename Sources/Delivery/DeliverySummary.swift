import LedgerCodec

/// What a pass (`runOnce`) or a run (`run(until:)`) of the worker did.
public struct DeliverySummary: Sendable, Equatable {
    /// Rewards recorded `fulfilled` (simulated ones included).
    public var delivered = 0
    /// Of `delivered`, sandbox rewards fulfilled without an outside call.
    public var simulated = 0
    /// Attempts recorded `delivery.failed` (the reward is retried later, or is `failed` after its last attempt).
    public var failed = 0
    /// Jobs not started because the ledger refused `delivery.started` (another worker has them, or they changed).
    public var skipped = 0
    /// Deliveries found `fulfilling` at start (a worker stopped mid-call): recorded failed and retried,
    /// or, for sandbox rewards (no call was made), recorded done.
    public var interrupted = 0
    /// Owner notifications the mail command accepted.
    public var notificationsSent = 0
    /// Owner notifications of sandbox programs, recorded as simulated and never mailed.
    public var notificationsSimulated = 0
    /// Owner notifications reported failed (no recipients, the command failed or timed out).
    public var notificationsFailed = 0
    /// Review notices whose review was decided before they went out: recorded withdrawn, not mailed.
    public var notificationsWithdrawn = 0

    public init() {}

    public static func + (a: DeliverySummary, b: DeliverySummary) -> DeliverySummary {
        var s = a
        s.delivered += b.delivered
        s.simulated += b.simulated
        s.failed += b.failed
        s.skipped += b.skipped
        s.interrupted += b.interrupted
        s.notificationsSent += b.notificationsSent
        s.notificationsSimulated += b.notificationsSimulated
        s.notificationsFailed += b.notificationsFailed
        s.notificationsWithdrawn += b.notificationsWithdrawn
        return s
    }

    public static func += (a: inout DeliverySummary, b: DeliverySummary) { a = a + b }

    /// `{"delivered", "simulated", "failed", "skipped", "interrupted", "notifications_sent",
    /// "notifications_simulated", "notifications_failed", "notifications_withdrawn"}`.
    public var json: JSONValue {
        ["delivered": .int(delivered), "simulated": .int(simulated), "failed": .int(failed), "skipped": .int(skipped),
         "interrupted": .int(interrupted), "notifications_sent": .int(notificationsSent),
         "notifications_simulated": .int(notificationsSimulated), "notifications_failed": .int(notificationsFailed),
         "notifications_withdrawn": .int(notificationsWithdrawn)]
    }
}
