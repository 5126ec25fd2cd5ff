import LedgerCodec
import ReferralRules

// The queries of SPEC §8 as values, for Swift code that embeds the ledger: the same answers as
// `progress`, `balance`, `rewards` and `program` (which give the JSON the CLI and HTTP API print).

/// An inviter's progress in a program (SPEC §8 `progress`).
public struct InviterProgress: Sendable, Equatable {
    /// Friends who qualified for this inviter under the current version.
    public var qualifiedCount: Int
    /// `nextThreshold`, or the last threshold when done.
    public var requiredCount: Int
    /// Friends enrolled with this inviter's code (pending review included, ineligible ones not).
    public var enrolledCount: Int
    /// Friends still to qualify for the next reward (0 when done).
    public var remainingCount: Int
    /// The inviter's rewards in the program that are not rejected.
    public var earnedRewards: Int
    /// The qualified count at which the next inviter reward comes; nil when none will.
    public var nextThreshold: Int?

    init(_ json: JSONValue) {
        qualifiedCount = Int(json["qualified_count"].intValue ?? 0)
        requiredCount = Int(json["required_count"].intValue ?? 0)
        enrolledCount = Int(json["enrolled_count"].intValue ?? 0)
        remainingCount = Int(json["remaining_count"].intValue ?? 0)
        earnedRewards = Int(json["earned_rewards"].intValue ?? 0)
        nextThreshold = json["next_threshold"].intValue.map { Int($0) }
    }
}

/// One reward of a user (SPEC §8 `rewards`), with the fields SPEC names.
public struct RewardSummary: Sendable, Equatable {
    public var rewardID: String
    public var program: String
    public var programVersion: Int
    public var side: Command.Side
    public var milestoneID: String?
    public var status: Reward.Status
    public var reviewReason: String?
    public var benefit: Benefit
    /// The Apple offer code handed to it, if any.
    public var code: String?
    public var isUsable: Bool
    public var isSimulated: Bool
    public var isRefundFlagged: Bool
    public var earnedAt: Timestamp
    public var fulfilledAt: Timestamp?

    init?(_ json: JSONValue) {
        guard let id = json["reward_id"].stringValue, let program = json["program"].stringValue,
              let side = json["side"].stringValue.flatMap(Command.Side.init(rawValue:)),
              let status = json["status"].stringValue.flatMap(Reward.Status.init(rawValue:)),
              let benefit = try? Benefit(json: json["benefit"], context: "reward.benefit"),
              let earned = json["earned_at"].stringValue.flatMap(Timestamp.init(rfc3339:)) else { return nil }
        rewardID = id
        self.program = program
        programVersion = Int(json["program_version"].intValue ?? 0)
        self.side = side
        milestoneID = json["milestone_id"].stringValue
        self.status = status
        reviewReason = json["review_reason"].stringValue
        self.benefit = benefit
        code = json["code"].stringValue
        isUsable = json["is_usable"].boolValue ?? false
        isSimulated = json["simulated"].boolValue ?? false
        isRefundFlagged = json["refund_flagged"].boolValue ?? false
        earnedAt = earned
        fulfilledAt = json["fulfilled_at"].stringValue.flatMap(Timestamp.init(rfc3339:))
    }
}

/// A program as the owner's dashboard shows it (SPEC §8 `program`): its state, the version in
/// force with its config, whether it takes new referrals now, and its counts.
public struct ProgramSummary: Sendable {
    public var program: String
    public var environment: Command.Environment
    public var status: ProgramState.Status
    /// The version in force (1 at creation, one more per accepted `program.update`).
    public var version: Int
    /// The config of that version.
    public var config: ProgramConfig
    /// Whether new invite codes and enrolments are taken at the time asked about (SPEC §3).
    public var isAcceptingNewReferrals: Bool
    public var createdAt: Timestamp
    public var firstActivatedAt: Timestamp?
    /// Inviters with a code, and their codes.
    public var inviters: Int
    public var invites: Int
    /// Friends enrolled (pending review included, ineligible ones not), and those qualified.
    public var enrolled: Int
    public var qualified: Int
    /// Rewards earned in the program, and how many are in each status.
    public var rewardsEarned: Int
    public var rewardsByStatus: [Reward.Status: Int]

    init?(_ json: JSONValue) {
        guard let program = json["program"].stringValue,
              let environment = json["environment"].stringValue.flatMap(Command.Environment.init(rawValue:)),
              let status = json["status"].stringValue.flatMap(ProgramState.Status.init(rawValue:)),
              let config = try? ProgramConfig(json: json["config"]),
              let created = json["created_at"].stringValue.flatMap(Timestamp.init(rfc3339:)) else { return nil }
        self.program = program
        self.environment = environment
        self.status = status
        version = Int(json["version"].intValue ?? 0)
        self.config = config
        isAcceptingNewReferrals = json["accepting_new_referrals"].boolValue ?? false
        createdAt = created
        firstActivatedAt = json["first_activated_at"].stringValue.flatMap(Timestamp.init(rfc3339:))
        let counts = json["counts"]
        inviters = Int(counts["inviters"].intValue ?? 0)
        invites = Int(counts["invites"].intValue ?? 0)
        enrolled = Int(counts["enrolled"].intValue ?? 0)
        qualified = Int(counts["qualified"].intValue ?? 0)
        rewardsEarned = Int(counts["rewards_earned"].intValue ?? 0)
        var byStatus: [Reward.Status: Int] = [:]
        for (name, count) in counts["rewards_by_status"].objectValue ?? [:] {
            if let status = Reward.Status(rawValue: name) { byStatus[status] = Int(count.intValue ?? 0) }
        }
        rewardsByStatus = byStatus
    }
}

extension Ledger {
    /// `program` as a value: `try ledger.programSummary(app: "acme", program: "spring").isAcceptingNewReferrals`.
    /// `now` is the time "accepting new referrals" is judged at (its UTC month's allowance), as for `program`.
    public func programSummary(app: String, program: String, asOf: UInt64? = nil, now: Timestamp = .now()) throws -> ProgramSummary {
        let json = try self.program(app: app, program: program, asOf: asOf, now: now)
        guard let summary = ProgramSummary(json) else {
            throw LedgerError(code: "internal_error", message: "the program query answered a form this build cannot read: \(json.text)")
        }
        return summary
    }

    /// `progress` as a value: `try ledger.inviterProgress(app: "acme", program: "spring", user: "alice").remainingCount`.
    public func inviterProgress(app: String, program: String, user: String, asOf: UInt64? = nil) throws -> InviterProgress {
        InviterProgress(try progress(app: app, program: program, user: user, asOf: asOf))
    }

    /// `balance` as a value (sandbox points never count).
    public func pointsBalance(app: String, user: String, asOf: UInt64? = nil) throws -> PointsBalance {
        let json = try balance(app: app, user: user, asOf: asOf)
        var points = PointsBalance()
        points.earned = json["earned"].intValue ?? 0
        points.spent = json["spent"].intValue ?? 0
        return points
    }

    /// `rewards` as values, in the order the query lists them. Like every query, it throws
    /// `QueryError` `unknown_user` (HTTP's 404) for a user the app has never seen (no invite,
    /// enrolment, evidence or spending), so a typo is not mistaken for a user with no rewards; a
    /// rewards screen for brand-new users catches that code as "none yet".
    public func rewardSummaries(app: String, user: String, program: String? = nil, asOf: UInt64? = nil) throws -> [RewardSummary] {
        (try rewards(app: app, user: user, program: program, asOf: asOf)["rewards"].arrayValue ?? []).compactMap(RewardSummary.init)
    }
}

/// The `status` filter of `participants`: which side of a referral a participant is on, or where a
/// friend's eligibility stands.
public enum ParticipantStatus: String, Sendable, CaseIterable, CustomStringConvertible {
    case inviter, friend, eligible, pendingReview = "pending_review", ineligible, qualified
    /// The wire name, as the CLI's `--status` and HTTP's `?status=` take it.
    public var description: String { rawValue }
}

extension Ledger {
    /// `participants` filtered by a typed status: `try ledger.participants(app: "acme", program: "spring", status: .qualified)`.
    public func participants(app: String, program: String, user: String? = nil, userPrefix: String = "", status: ParticipantStatus,
                             limit: Int = 100, cursor: String? = nil, asOf: UInt64? = nil) throws -> JSONValue {
        try participants(app: app, program: program, user: user, userPrefix: userPrefix, status: status.rawValue,
                         limit: limit, cursor: cursor, asOf: asOf)
    }

    /// `deliveries` of rewards in one status: `try ledger.deliveries(app: "acme", status: .pendingReview)`, the owner's review queue.
    public func deliveries(app: String, program: String? = nil, user: String? = nil, status: Reward.Status, limit: Int = 100,
                           cursor: String? = nil, asOf: UInt64? = nil) throws -> JSONValue {
        try deliveries(app: app, program: program, user: user, status: status.rawValue, limit: limit, cursor: cursor, asOf: asOf)
    }
}
