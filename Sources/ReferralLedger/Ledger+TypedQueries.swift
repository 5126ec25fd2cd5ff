import LedgerCodec
import ReferralRules

// The queries of SPEC §8 as values, for Swift code that embeds the ledger: the same answers as
// `progress`, `balance` and `rewards` (which give the JSON the CLI and HTTP API print).

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

extension Ledger {
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

    /// `rewards` as values, in the order the query lists them.
    public func rewardSummaries(app: String, user: String, program: String? = nil, asOf: UInt64? = nil) throws -> [RewardSummary] {
        (try rewards(app: app, user: user, program: program, asOf: asOf)["rewards"].arrayValue ?? []).compactMap(RewardSummary.init)
    }
}
