import LedgerCodec
import ReferralRules

/// The read models, as pure functions of the folded state. The ledger stores each record in
/// its projection database in the same transaction as the events it reflects; an `--as-of`
/// query computes the same records from a fold of the log up to a position.
public enum Records {
    /// An app: its public settings (secrets hidden), monthly enrolment counts, programs.
    public static func app(_ a: AppState) -> JSONValue {
        var months: [String: JSONValue] = [:]
        for (k, v) in a.enrollmentsByMonth { months[k] = .int(v) }
        return ["app": .string(a.name), "settings": a.settings.publicJSON, "enrollments_by_month": .object(months),
                "programs": .array(a.programOrder.map { .string($0) })]
    }

    /// A program: status, version, current config and the dashboard counts.
    public static func program(_ a: AppState, _ p: ProgramState) -> JSONValue {
        var byStatus: [String: JSONValue] = [:]
        for status in ["pending_review", "awaiting_inventory", "ready", "fulfilling", "fulfilled", "failed", "rejected"] {
            byStatus[status] = .int(p.counts.rewardsByStatus[status] ?? 0)
        }
        let earned = p.counts.rewardsByStatus.filter { $0.key != "rejected" }.values.reduce(0, +)
        var inventory: [String: JSONValue] = [:]
        for (key, inv) in p.inventory {
            // Codes not handed out yet, and when those that expire do (a query counts as remaining
            // only those unexpired at its time, as an assignment does).
            var expiring: [String: JSONValue] = [:]
            for (e, n) in inv.expiringAvailable { expiring[e.description] = .int(n) }
            inventory[String(key.map { $0 == "\u{1F}" ? ":" : $0 })] = ["imported": .int(inv.codes.count), "remaining": .int(inv.remaining),
                                                                        "expiring": .object(expiring)]
        }
        return [
            "app": .string(a.name), "program": .string(p.key), "environment": .string(p.environment.rawValue),
            "status": .string(p.status.rawValue), "version": .int(p.version), "config": p.current.json,
            "created_at": .string(p.createdAt.description), "first_activated_at": .optional(p.firstActivatedAt?.description),
            "counts": [
                "invites": .int(p.counts.invites), "enrolled": .int(p.counts.enrolled), "pending_review": .int(p.counts.pendingReview),
                "ineligible": .int(p.counts.ineligible), "qualified": .int(p.counts.qualified), "inviters": .int(p.inviterOrder.count),
                "welcome_withheld": .int(p.counts.withheld), "rewards_earned": .int(earned), "rewards_by_status": .object(byStatus),
                "waiting_for_inventory": .int(p.awaitingInventory.count),
            ],
            "inventory": .object(inventory),
        ]
    }

    /// A participant of a program: as inviter, as friend, and their rewards' state.
    public static func participant(_ a: AppState, _ p: ProgramState, _ user: String) -> JSONValue {
        let tally = p.tallies[user] ?? RewardTally()
        var inviter = JSONValue.null
        if let s = p.inviters[user] {
            inviter = [
                "earned_rewards": .int(tally.inviterEarned), "enrolled_count": .int(s.enrolledCount), "friends": .int(s.friends.count),
                "milestones_earned": .array(s.milestones.sorted().map { .string($0) }),
                "qualified_count": .int(s.qualified.count), "slots_earned": .int(s.numericSlots),
            ]
        }
        var friend = JSONValue.null
        if let e = p.enrollments[user] {
            friend = [
                "code": .string(e.code), "eligibility": .string(e.eligibility.rawValue), "enrolled_at": .string(e.at.description),
                "friend_reward_id": .optional(e.friendRewardID), "inviter": .string(e.inviter),
                "program_version": .int(e.version), "qualified": .bool(e.qualified), "welcome_withheld": .bool(e.friendWithheld),
            ]
        }
        // The dashboard's per-recipient counts: delivered (usable: fulfilled, or an Apple code handed
        // out), waiting for the owner's approval, and waiting for delivery (no code yet, queued,
        // in flight or failed). `rewards_pending` is the two waits together.
        // (Keys written in their sorted order: the literal then needs no sorting.)
        return [
            "app": .string(a.name), "friend": friend, "invite_code": .optional(p.invites[user]), "inviter": inviter,
            "program": .string(p.key),
            "rewards_delivered": .int(tally.usable), "rewards_fulfilled": .int(tally.fulfilled),
            "rewards_pending": .int(tally.pendingApproval + tally.pendingDelivery),
            "rewards_pending_approval": .int(tally.pendingApproval), "rewards_pending_delivery": .int(tally.pendingDelivery),
            "user": .string(user),
        ]
    }

    /// A reward with the fields of SPEC §8 and its delivery history.
    public static func reward(_ r: Reward) -> JSONValue {
        // (Keys in their sorted order: the literal then needs no sorting.)
        [
            "attempts": .int(r.attempts), "benefit": r.benefit.json, "code": .optional(r.code),
            "code_expires_at": .optional(r.codeExpiresAt?.description), "delivered_outside": .bool(r.deliveredOutside),
            "deliveries": .array(r.deliveries.map { d in
                ["attempt": .int(d.attempt), "by": .optional(d.by), "error": .optional(d.error), "finished_at": .optional(d.finishedAt?.description),
                 "note": .optional(d.note), "outcome": .string(d.outcome.rawValue), "retry_at": .optional(d.retryAt?.description),
                 "started_at": .string(d.startedAt.description)]
            }),
            "earned_at": .string(r.earnedAt.description), "fulfilled_at": .optional(r.fulfilledAt?.description), "inviter": .optional(r.inviter),
            "is_usable": .bool(r.isUsable), "last_error": .optional(r.lastError), "milestone_id": .optional(r.milestoneID),
            "position": .int(Int64(r.position)), "program": .string(r.program), "program_version": .int(r.programVersion),
            "recipient": .string(r.recipient), "refund_flagged": .bool(r.refundFlagged), "rejection_reason": .optional(r.rejectionReason),
            "retry_at": .optional(r.retryAt?.description), "review_reason": .optional(r.reviewReason), "reward_id": .string(r.id),
            "side": .string(r.side.rawValue), "simulated": .bool(r.simulated), "slot": .string(r.slot), "status": .string(r.status.rawValue),
            "threshold": .optional(r.threshold),
        ]
    }

    public static func balance(_ b: PointsBalance) -> JSONValue {
        ["balance": .int(b.balance), "earned": .int(b.earned), "spent": .int(b.spent)]
    }
}
