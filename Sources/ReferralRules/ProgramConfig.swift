import LedgerCodec

/// A program version's configuration (SPEC §4, §13 `invites`, velocity cap).
public struct ProgramConfig: Sendable, Equatable {
    public var inviter: InviterConfig?
    public var friend: FriendConfig?
    public var newUsersOnly: Bool
    public var delivery: DeliveryMode
    public var notify: [String]
    public var invites: InviteConfig

    /// A configuration built in code (for `Command.Body.createProgram` / `.updateProgram`); the
    /// defaults are those of a config that leaves the key out.
    public init(inviter: InviterConfig? = nil, friend: FriendConfig? = nil, newUsersOnly: Bool = true,
                delivery: DeliveryMode = .automatic, notify: [String] = [], invites: InviteConfig = InviteConfig()) {
        self.inviter = inviter
        self.friend = friend
        self.newUsersOnly = newUsersOnly
        self.delivery = delivery
        self.notify = notify
        self.invites = invites
    }

    public enum DeliveryMode: String, Sendable { case automatic, review }

    public struct InviterConfig: Sendable, Equatable {
        public var qualifyingEvent: String
        public var reward: InviterReward
        public var maxEnrollmentsPer30Days: Int?

        public init(qualifyingEvent: String, reward: InviterReward, maxEnrollmentsPer30Days: Int? = nil) {
            self.qualifyingEvent = qualifyingEvent
            self.reward = reward
            self.maxEnrollmentsPer30Days = maxEnrollmentsPer30Days
        }
    }

    public enum InviterReward: Sendable, Equatable {
        case once(friends: Int, benefit: Benefit)
        case every(friends: Int, maxRewards: Int?, benefit: Benefit)
        case milestones([Milestone])
    }

    public struct Milestone: Sendable, Equatable {
        public var id: String
        public var friends: Int
        public var benefit: Benefit

        public init(id: String, friends: Int, benefit: Benefit) {
            self.id = id
            self.friends = friends
            self.benefit = benefit
        }
    }

    public struct FriendConfig: Sendable, Equatable {
        public var trigger: String
        public var benefit: Benefit

        public init(trigger: String, benefit: Benefit) {
            self.trigger = trigger
            self.benefit = benefit
        }
    }

    public struct InviteConfig: Sendable, Equatable {
        public enum Format: String, Sendable { case random, prefixed, username }
        public var format: Format = .random
        public var prefix: String? = nil
        public var length: Int = 6
        public var expiresAfterDays: Int? = nil
        public var maxEnrollments: Int? = nil

        public init(format: Format = .random, prefix: String? = nil, length: Int = 6, expiresAfterDays: Int? = nil, maxEnrollments: Int? = nil) {
            self.format = format
            self.prefix = prefix
            self.length = length
            self.expiresAfterDays = expiresAfterDays
            self.maxEnrollments = maxEnrollments
        }
    }

    public static let reservedEvents: Set<String> = ["paid_purchase", "invite_accepted"]

    public init(json: JSONValue) throws {
        var r = try FieldReader(json, context: "config")
        if let v = r.value("inviter"), !v.isNull {
            inviter = try Self.inviter(v)
        }
        if let v = r.value("friend"), !v.isNull {
            var f = try FieldReader(v, context: "config.friend")
            let trigger = try f.string("trigger")
            try Self.checkEventName(trigger, "config.friend.trigger")
            friend = FriendConfig(trigger: trigger, benefit: try Benefit(json: try f.object("benefit"), context: "config.friend.benefit"))
            try f.finish()
        }
        newUsersOnly = try r.optionalBool("new_users_only") ?? true
        delivery = .automatic
        if let d = try r.optionalString("delivery") {
            guard let mode = DeliveryMode(rawValue: d) else { throw Rejection.invalid("config.delivery must be \"automatic\" or \"review\", not \"\(d)\"") }
            delivery = mode
        }
        notify = []
        if let v = r.value("notify"), !v.isNull {
            guard case .array(let a) = v else { throw Rejection.invalid("config.notify must be an array of e-mail addresses") }
            for item in a {
                // Recorded configs are read back with the check of the version that accepted them;
                // a new command's addresses are held to `isMailAddress` (Command).
                guard case .string(let s) = item, s.contains("@"), !s.contains(where: { $0 == "\n" || $0 == "\r" || $0 == " " }) else {
                    throw Rejection.invalid("config.notify must hold e-mail addresses such as owner@example.com")
                }
                notify.append(s)
            }
        }
        invites = InviteConfig()
        if let v = r.value("invites"), !v.isNull {
            invites = try Self.inviteConfig(v)
        }
        try r.finish()
    }

    static func checkEventName(_ name: String, _ label: String) throws {
        // Byte by byte: only ASCII letters, digits, '_', '.' and '-' are allowed, so no Character
        // (grapheme breaking, Unicode properties) need be made.
        func allowed(_ b: UInt8) -> Bool {
            (0x61...0x7A).contains(b) || (0x41...0x5A).contains(b) || (0x30...0x39).contains(b) || b == 0x5F || b == 0x2E || b == 0x2D
        }
        guard name.utf8.count <= 128, name.utf8.allSatisfy(allowed) else {
            throw Rejection.invalid("\(label) must be an event name of letters, digits, '_', '.' or '-' (at most 128)")
        }
    }

    private static func inviter(_ v: JSONValue) throws -> InviterConfig {
        var r = try FieldReader(v, context: "config.inviter")
        let event = try r.string("qualifying_event")
        try checkEventName(event, "config.inviter.qualifying_event")
        let cap = try r.optionalInt("max_enrollments_per_30_days", min: 1)
        var w = try FieldReader(try r.object("reward"), context: "config.inviter.reward")
        let reward: InviterReward
        switch try w.oneOf("mode", ["once", "every", "milestones"]) {
        case "milestones":
            var seen = Set<String>()
            var list: [Milestone] = []
            let items = try w.array("milestones")
            guard !items.isEmpty else { throw Rejection.invalid("config.inviter.reward.milestones must not be empty") }
            for (n, item) in items.enumerated() {
                var m = try FieldReader(item, context: "config.inviter.reward.milestones[\(n)]")
                let id = try m.identifier("id")
                guard seen.insert(id).inserted else { throw Rejection.invalid("milestone id \"\(id)\" appears twice") }
                let friends = Int(try m.int("friends", min: 1))
                list.append(Milestone(id: id, friends: friends, benefit: try Benefit(json: try m.object("benefit"), context: "\(m.context).benefit")))
                try m.finish()
            }
            reward = .milestones(list)
        case let mode:
            let friends = Int(try w.int("friends", min: 1))
            let max = try w.optionalInt("max_rewards", min: 1).map(Int.init)
            if mode == "once", let max, max != 1 {
                throw Rejection.invalid("config.inviter.reward.max_rewards is \(max) but mode \"once\" earns one reward; use mode \"every\" with max_rewards, or null")
            }
            let benefit = try Benefit(json: try w.object("benefit"), context: "config.inviter.reward.benefit")
            reward = mode == "once" ? .once(friends: friends, benefit: benefit) : .every(friends: friends, maxRewards: max, benefit: benefit)
        }
        try w.finish()
        try r.finish()
        return InviterConfig(qualifyingEvent: event, reward: reward, maxEnrollmentsPer30Days: cap.map(Int.init))
    }

    private static func inviteConfig(_ v: JSONValue) throws -> InviteConfig {
        var r = try FieldReader(v, context: "config.invites")
        var c = InviteConfig()
        if let f = try r.optionalString("format") {
            guard let format = InviteConfig.Format(rawValue: f) else {
                throw Rejection.invalid("config.invites.format must be \"random\", \"prefixed\" or \"username\", not \"\(f)\"")
            }
            c.format = format
        }
        if let p = try r.optionalString("prefix") {
            guard (1...12).contains(p.count), p.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
                throw Rejection.invalid("config.invites.prefix must be 1–12 ASCII letters or digits")
            }
            c.prefix = p.uppercased()
        }
        if c.format == .prefixed, c.prefix == nil { throw Rejection.invalid("config.invites.prefix is required with the \"prefixed\" format") }
        if let l = try r.optionalInt("length", min: 4) {
            guard l <= 16 else { throw Rejection.invalid("config.invites.length must be at most 16") }
            c.length = Int(l)
        }
        if c.format != .username, c.length < 6 {
            throw Rejection.invalid("config.invites.length must be at least 6 for random and prefixed codes")
        }
        c.expiresAfterDays = try r.optionalInt("expires_after_days", min: 1, max: 36_500).map(Int.init)
        c.maxEnrollments = try r.optionalInt("max_enrollments", min: 1).map(Int.init)
        try r.finish()
        return c
    }

    /// The configuration with every default filled in: what the log records.
    public var json: JSONValue {
        var o: [String: JSONValue] = [:]
        if let inviter {
            var reward: [String: JSONValue]
            switch inviter.reward {
            case .once(let friends, let benefit):
                reward = ["mode": "once", "friends": .int(friends), "max_rewards": .null, "benefit": benefit.json]
            case .every(let friends, let max, let benefit):
                reward = ["mode": "every", "friends": .int(friends), "max_rewards": .optional(max), "benefit": benefit.json]
            case .milestones(let list):
                reward = ["mode": "milestones", "milestones": .array(list.map { ["id": .string($0.id), "friends": .int($0.friends), "benefit": $0.benefit.json] })]
            }
            o["inviter"] = ["qualifying_event": .string(inviter.qualifyingEvent), "reward": .object(reward),
                            "max_enrollments_per_30_days": .optional(inviter.maxEnrollmentsPer30Days)]
        } else {
            o["inviter"] = .null
        }
        o["friend"] = friend.map { ["trigger": .string($0.trigger), "benefit": $0.benefit.json] } ?? .null
        o["new_users_only"] = .bool(newUsersOnly)
        o["delivery"] = .string(delivery.rawValue)
        o["notify"] = .array(notify.map { .string($0) })
        o["invites"] = ["format": .string(invites.format.rawValue), "prefix": .optional(invites.prefix), "length": .int(invites.length),
                        "expires_after_days": .optional(invites.expiresAfterDays), "max_enrollments": .optional(invites.maxEnrollments)]
        return .object(o)
    }
}

extension ProgramConfig {
    /// A plain mail address (`local@domain`) that is safe in a message header and on a command
    /// line: no spaces or control characters (header injection), no list or comment syntax, not
    /// starting with `-` (an option to the mail command), at most 254 bytes.
    public static func isMailAddress(_ s: String) -> Bool {
        let parts = s.split(separator: "@", omittingEmptySubsequences: false)
        return s.utf8.count <= 254 && parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty && !s.hasPrefix("-")
            && !s.unicodeScalars.contains { scalar in
                switch scalar.properties.generalCategory {
                case .control, .format, .spaceSeparator, .lineSeparator, .paragraphSeparator, .unassigned, .privateUse, .surrogate:
                    return true
                default:
                    return ",;<>()[]\\\"".unicodeScalars.contains(scalar)
                }
            }
    }
}
