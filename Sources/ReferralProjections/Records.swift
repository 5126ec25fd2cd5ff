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
        try! JSONValue(parsing: participantBytes(a, p, user))  // canonical JSON (`participantBytes`)
    }

    /// The bytes of `participant(a, p, user)`, written member by member (the record a rebuild or a
    /// command writes most often: no tree is made for it).
    public static func participantBytes(_ a: AppState, _ p: ProgramState, _ user: String) -> [UInt8] {
        let tally = p.tallies[user] ?? RewardTally()
        var w = JSONWriter(capacity: 512)
        w.beginObject()
        w.key("app"); w.writeString(a.name)
        w.key("friend")
        if let e = p.enrollments[user] {
            w.beginObject()
            w.key("code"); w.writeString(e.code)
            w.key("eligibility"); w.writeString(e.eligibility.rawValue)
            w.key("enrolled_at"); w.writeTimestamp(e.at)
            w.key("friend_reward_id"); w.writeString(e.friendRewardID)
            w.key("inviter"); w.writeString(e.inviter)
            w.key("program_version"); w.writeInteger(Int64(e.version))
            w.key("qualified"); w.writeBool(e.qualified)
            w.key("welcome_withheld"); w.writeBool(e.friendWithheld)
            w.endObject()
        } else {
            w.writeNull()
        }
        w.key("invite_code"); w.writeString(p.invites[user])
        w.key("inviter")
        if let s = p.inviters[user] {
            w.beginObject()
            w.key("earned_rewards"); w.writeInteger(Int64(tally.inviterEarned))
            w.key("enrolled_count"); w.writeInteger(Int64(s.enrolledCount))
            w.key("friends"); w.writeInteger(Int64(s.friends.count))
            w.key("milestones_earned"); w.write(.array(s.milestones.sorted().map { .string($0) }))
            w.key("qualified_count"); w.writeInteger(Int64(s.qualified.count))
            w.key("slots_earned"); w.writeInteger(Int64(s.numericSlots))
            w.endObject()
        } else {
            w.writeNull()
        }
        w.key("program"); w.writeString(p.key)
        // The dashboard's per-recipient counts: delivered (usable: fulfilled, or an Apple code handed
        // out), waiting for the owner's approval, and waiting for delivery (no code yet, queued,
        // in flight or failed). `rewards_pending` is the two waits together.
        w.key("rewards_delivered"); w.writeInteger(Int64(tally.usable))
        w.key("rewards_fulfilled"); w.writeInteger(Int64(tally.fulfilled))
        w.key("rewards_pending"); w.writeInteger(Int64(tally.pendingApproval + tally.pendingDelivery))
        w.key("rewards_pending_approval"); w.writeInteger(Int64(tally.pendingApproval))
        w.key("rewards_pending_delivery"); w.writeInteger(Int64(tally.pendingDelivery))
        w.key("user"); w.writeString(user)
        w.endObject()
        return w.bytes
    }

    /// A reward: what was earned, by whom, under which version, and its delivery so far.
    public static func reward(_ r: Reward) -> JSONValue {
        try! JSONValue(parsing: rewardBytes(r))  // canonical JSON (`rewardBytes`)
    }

    /// The bytes of `reward(r)`, written member by member.
    public static func rewardBytes(_ r: Reward) -> [UInt8] {
        var w = JSONWriter(capacity: 768)
        w.beginObject()
        w.key("attempts"); w.writeInteger(Int64(r.attempts))
        w.key("benefit"); w.write(r.benefit.json)
        w.key("code"); w.writeString(r.code)
        w.key("code_expires_at"); w.writeTimestamp(r.codeExpiresAt)
        w.key("delivered_outside"); w.writeBool(r.deliveredOutside)
        w.key("deliveries")
        w.append("[")
        for (n, d) in r.deliveries.enumerated() {
            if n > 0 { w.append(",") }
            w.beginObject()
            w.key("attempt"); w.writeInteger(Int64(d.attempt))
            w.key("by"); w.writeString(d.by)
            w.key("error"); w.writeString(d.error)
            w.key("finished_at"); w.writeTimestamp(d.finishedAt)
            w.key("note"); w.writeString(d.note)
            w.key("outcome"); w.writeString(d.outcome.rawValue)
            w.key("retry_at"); w.writeTimestamp(d.retryAt)
            w.key("started_at"); w.writeTimestamp(d.startedAt)
            w.endObject()
        }
        w.append("]")
        w.key("earned_at"); w.writeTimestamp(r.earnedAt)
        w.key("fulfilled_at"); w.writeTimestamp(r.fulfilledAt)
        w.key("inviter"); w.writeString(r.inviter)
        w.key("is_usable"); w.writeBool(r.isUsable)
        w.key("last_error"); w.writeString(r.lastError)
        w.key("milestone_id"); w.writeString(r.milestoneID)
        w.key("position"); w.writeInteger(Int64(r.position))
        w.key("program"); w.writeString(r.program)
        w.key("program_version"); w.writeInteger(Int64(r.programVersion))
        w.key("recipient"); w.writeString(r.recipient)
        w.key("refund_flagged"); w.writeBool(r.refundFlagged)
        w.key("rejection_reason"); w.writeString(r.rejectionReason)
        w.key("retry_at"); w.writeTimestamp(r.retryAt)
        w.key("review_reason"); w.writeString(r.reviewReason)
        w.key("reward_id"); w.writeString(r.id)
        w.key("side"); w.writeString(r.side.rawValue)
        w.key("simulated"); w.writeBool(r.simulated)
        w.key("slot"); w.writeString(r.slot)
        w.key("status"); w.writeString(r.status.rawValue)
        w.key("threshold"); w.writeInteger(r.threshold)
        w.endObject()
        return w.bytes
    }

    public static func balance(_ b: PointsBalance) -> JSONValue {
        ["balance": .int(b.balance), "earned": .int(b.earned), "spent": .int(b.spent)]
    }
}
