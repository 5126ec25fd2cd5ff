import LedgerCodec
import LedgerStore
import ReferralProjections
import ReferralRules

/// A query that cannot be answered: unknown app, program or user (404), or bad arguments (400).
public struct QueryError: CodedError, Sendable {
    /// `unknown_app`, `unknown_program`, `unknown_user`, `invalid_query`, …
    public var code: String
    /// What is wrong, in words meant for the caller.
    public var message: String
    /// The HTTP status the server answers with it (404 or 400).
    public var status: Int
    public init(code: String, message: String, status: Int) {
        self.code = code
        self.message = message
        self.status = status
    }
    public var errorCode: String { code }
    public var json: JSONValue { errorJSON }

    static func unknownApp(_ app: String) -> QueryError { QueryError(code: "unknown_app", message: "there is no app \(quoted(app)) in this ledger", status: 404) }
    static func unknownProgram(_ app: String, _ p: String) -> QueryError {
        QueryError(code: "unknown_program", message: "app \(quoted(app)) has no program \(quoted(p))", status: 404)
    }
    static func unknownUser(_ app: String, _ u: String) -> QueryError {
        QueryError(code: "unknown_user", message: "app \(quoted(app)) has no user \(quoted(u))", status: 404)
    }

    /// A name as the client sent it, in quotes, cut after 128 characters (no ID is longer; an
    /// answer need not echo kilobytes back).
    static func quoted(_ name: String) -> String {
        "\"" + (name.count > 128 ? name.prefix(128) + "…" : name) + "\""
    }
    static func bad(_ message: String) -> QueryError { QueryError(code: "invalid_query", message: message, status: 400) }
}

/// The queries of SPEC §8 and the dashboard's (participants, deliveries, audit). Every query
/// reads the stored projections, or, given `asOf`, a fold of the log up to that position.
extension Ledger {
    /// Query IDs follow the same rule as commands' (NFC): the stored projections match bytes, a
    /// fold matches Swift strings, and only one spelling per ID makes both answer the same.
    static func requireNFC(_ arguments: [(String, String?)]) throws {
        for case let (name, text?) in arguments where !Command.isNFC(text) {
            throw QueryError.bad("\(name) is not in Unicode normalization form C; send it precomposed (NFC)")
        }
    }

    func withRecords<T>(asOf: UInt64?, _ body: (RecordSource) throws -> T) throws -> T {
        if let asOf {
            let (state, _) = try Self.fold(environment, until: asOf)
            return try body(FoldedRecords(state: state))
        }
        return try environment.read { txn in try body(StoredRecords(txn: txn)) }
    }

    private func requireProgram(_ r: RecordSource, _ app: String, _ program: String) throws -> (JSONValue, JSONValue) {
        guard let a = try r.app(app) else { throw QueryError.unknownApp(app) }
        guard let p = try r.program(app, program) else { throw QueryError.unknownProgram(app, program) }
        return (a, p)
    }

    /// The owner's view of a program (SPEC §8): status, version, `accepting_new_referrals` (for the
    /// UTC month of `now`), config, counts and inventory. `asOf`: as it stood after that position.
    public func program(app: String, program: String, asOf: UInt64? = nil, now: Timestamp = .now()) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("program", program)])
        return try withRecords(asOf: asOf) { r in
            let (a, p) = try requireProgram(r, app, program)
            return Queries.program(app: a, program: p, now: now)
        }
    }

    /// The app's programs in campaign key order, each as `program` answers it; `limit` a page,
    /// `next_cursor` (a campaign key) continues. The owner's list to pick a program from.
    public func programs(app: String, limit: Int = 100, cursor: String? = nil, asOf: UInt64? = nil, now: Timestamp = .now()) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("cursor", cursor)])
        let limit = max(1, min(limit, 1000))
        return try withRecords(asOf: asOf) { r in
            guard let a = try r.app(app) else { throw QueryError.unknownApp(app) }
            var page: [JSONValue] = []
            var more = false
            try r.programs(app, after: cursor) { program in
                if page.count == limit { more = true; return false }
                page.append(Queries.program(app: a, program: program, now: now))
                return true
            }
            return ["app": .string(app), "programs": .array(page), "next_cursor": more ? page.last!["program"] : .null]
        }
    }

    /// An inviter's progress (SPEC §8): `qualified_count`, `required_count`, `enrolled_count`,
    /// `remaining_count`, `earned_rewards`, `next_threshold`, under the program's current version.
    public func progress(app: String, program: String, user: String, asOf: UInt64? = nil) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("program", program), ("user", user)])
        return try withRecords(asOf: asOf) { r in
            let (_, p) = try requireProgram(r, app, program)
            guard try r.isKnown(app, user) else { throw QueryError.unknownUser(app, user) }
            return Queries.progress(program: p, participant: try r.participant(app, program, user))
        }
    }

    /// A user's rewards (SPEC §8), as inviter and as friend, in earning order: `{"app", "user", "rewards": [...]}`.
    /// Given a `limit` (or a `cursor`), a page of them: at most `limit` (≤ 1,000) earned after log
    /// position `cursor`, and `next_cursor`, the position to pass next (null when none is left).
    public func rewards(app: String, user: String, program: String? = nil, limit: Int? = nil, cursor: UInt64? = nil,
                        asOf: UInt64? = nil) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("user", user), ("program", program)])
        let paged = limit != nil || cursor != nil
        let limit = paged ? max(1, min(limit ?? 100, 1000)) : Int.max
        return try withRecords(asOf: asOf) { r in
            guard try r.app(app) != nil else { throw QueryError.unknownApp(app) }
            if let program, try r.program(app, program) == nil { throw QueryError.unknownProgram(app, program) }
            guard try r.isKnown(app, user) else { throw QueryError.unknownUser(app, user) }
            var list: [JSONValue] = []
            var more = false
            for id in try r.rewardIDs(app, user, after: cursor ?? 0) {
                guard let reward = try r.reward(app, id), program == nil || reward["program"].stringValue == program else { continue }
                if list.count == limit { more = true; break }
                list.append(reward)
            }
            var answer: JSONValue = ["app": .string(app), "user": .string(user), "rewards": .array(list)]
            if paged { answer["next_cursor"] = more ? list.last!["position"] : .null }
            return answer
        }
    }

    /// A user's points (SPEC §13): `{"balance", "earned", "spent"}`; sandbox points never count.
    public func balance(app: String, user: String, asOf: UInt64? = nil) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("user", user)])
        return try withRecords(asOf: asOf) { r in
            guard try r.app(app) != nil else { throw QueryError.unknownApp(app) }
            guard try r.isKnown(app, user) else { throw QueryError.unknownUser(app, user) }
            return try r.balance(app, user) ?? Records.balance(PointsBalance())
        }
    }

    public static let participantStatuses = ParticipantStatus.allCases.map(\.rawValue)

    /// A program's participants in user ID order, `limit` a page; `next_cursor` continues.
    public func participants(app: String, program: String, user: String? = nil, userPrefix: String = "", status: String? = nil,
                             limit: Int = 100, cursor: String? = nil, asOf: UInt64? = nil) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("program", program), ("user", user), ("user_prefix", userPrefix)])
        if let status, !Self.participantStatuses.contains(status) {
            throw QueryError.bad("status must be one of \(Self.participantStatuses.joined(separator: ", "))")
        }
        // One user, or the users whose IDs start with a prefix: both at once would answer nothing.
        if user != nil && !userPrefix.isEmpty { throw QueryError.bad("give user or user_prefix, not both") }
        let limit = max(1, min(limit, 1000))
        return try withRecords(asOf: asOf) { r in
            _ = try requireProgram(r, app, program)
            if let user, try !r.isKnown(app, user) { throw QueryError.unknownUser(app, user) }
            var page: [JSONValue] = []
            var more = false
            // One user (`user`) is the first record of the scan of their ID as a prefix.
            try r.participants(app, program, prefix: user ?? userPrefix, after: cursor) { record in
                if let user, record["user"].stringValue != user { return false }
                guard Self.matches(record, status) else { return true }
                if page.count == limit { more = true; return false }
                page.append(record)
                return true
            }
            let next: JSONValue = more ? page.last!["user"] : .null
            return ["participants": .array(page), "next_cursor": next]
        }
    }

    static func matches(_ p: JSONValue, _ status: String?) -> Bool {
        switch status {
        case nil: return true
        case "inviter": return !p["inviter"].isNull
        case "friend": return !p["friend"].isNull
        case "qualified": return p["friend"]["qualified"].boolValue == true
        case let s?: return p["friend"]["eligibility"].stringValue == s
        }
    }

    /// Rewards with their delivery history (every attempt, outcome, error), by reward ID.
    public func deliveries(app: String, program: String? = nil, user: String? = nil, status: String? = nil, limit: Int = 100,
                           cursor: String? = nil, asOf: UInt64? = nil) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("program", program), ("user", user)])
        if let status, Reward.Status(rawValue: status) == nil {
            throw QueryError.bad("status must be a reward status (pending_review, awaiting_inventory, ready, fulfilling, fulfilled, failed, rejected)")
        }
        let limit = max(1, min(limit, 1000))
        return try withRecords(asOf: asOf) { r in
            guard try r.app(app) != nil else { throw QueryError.unknownApp(app) }
            if let program, try r.program(app, program) == nil { throw QueryError.unknownProgram(app, program) }
            if let user, try !r.isKnown(app, user) { throw QueryError.unknownUser(app, user) }
            var page: [JSONValue] = []
            var more = false
            // One recipient's rewards come from their index, not a scan of every reward of the app; a
            // page reads only the rewards after the cursor it needs, not all of theirs.
            let each: ((JSONValue) -> Bool) throws -> Void = { visit in
                guard let user else { return try r.allRewards(app, after: cursor, visit) }
                let ids = try r.rewardIDs(app, user).filter { id in cursor.map { $0.utf8.lexicographicallyPrecedes(id.utf8) } ?? true }
                    .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
                for id in ids {
                    guard let reward = try r.reward(app, id) else { continue }
                    if !visit(reward) { return }
                }
            }
            // (Both ways start after the cursor.)
            try each { reward in
                if let program, reward["program"].stringValue != program { return true }
                if let status, reward["status"].stringValue != status { return true }
                if let user, reward["recipient"].stringValue != user { return true }
                if page.count == limit { more = true; return false }
                page.append(["reward_id": reward["reward_id"], "program": reward["program"], "recipient": reward["recipient"],
                             "side": reward["side"], "status": reward["status"], "benefit": reward["benefit"],
                             "code": reward["code"], "is_usable": reward["is_usable"], "review_reason": reward["review_reason"],
                             "rejection_reason": reward["rejection_reason"], "refund_flagged": reward["refund_flagged"],
                             "delivered_outside": reward["delivered_outside"], "earned_at": reward["earned_at"],
                             "attempts": reward["attempts"], "retry_at": reward["retry_at"], "last_error": reward["last_error"],
                             "simulated": reward["simulated"], "fulfilled_at": reward["fulfilled_at"], "deliveries": reward["deliveries"]])
                return true
            }
            return ["deliveries": .array(page), "next_cursor": more ? page.last!["reward_id"] : .null]
        }
    }

    /// Audit entries: the events that name a user or a program (who did what, when, with what evidence),
    /// in log order. `type` keeps one event type (`referral.rejected`) or one subject (`reward.`): SPEC
    /// §8's "filter by … status" for entries that are events, which have a type and no status.
    public func audit(app: String, program: String? = nil, user: String? = nil, type: String? = nil, limit: Int = 100,
                      after cursor: UInt64 = 0, asOf: UInt64? = nil) throws -> JSONValue {
        try Self.requireNFC([("app", app), ("program", program), ("user", user)])
        if let type, !Self.auditTypes.contains(type) {
            throw QueryError.bad("type must be an event type (docs/events.md), such as referral.rejected, or a subject with its dot, such as reward.")
        }
        let limit = max(1, min(limit, 1000))
        // As of a past position, the app, program and user must exist then (the state folded up to it).
        let past = try asOf.map { try Self.fold(environment, until: $0).0 }
        return try environment.read { txn in
            let records: RecordSource = past.map { FoldedRecords(state: $0) } ?? StoredRecords(txn: txn)
            guard try records.app(app) != nil else { throw QueryError.unknownApp(app) }
            if let program, try records.program(app, program) == nil { throw QueryError.unknownProgram(app, program) }
            let prefix: [UInt8]
            if let user { prefix = ProjectionStore.key(app, "u", user) } else if let program { prefix = ProjectionStore.key(app, "p", program) } else { prefix = ProjectionStore.key(app, "a") }
            // A user is unknown when no record and no event (up to `asOf`) names them (a refused
            // enrolment names a user the app never took in: their audit trail still answers).
            if let user, try !records.isKnown(app, user) {
                var named = false
                try txn.scan(ProjectionStore.audit, from: prefix + [0]) { k, v in
                    if k.count == prefix.count + 9, k.starts(with: prefix + [0]), let first = ProjectionStore.auditPositions(key: k, value: v).first {
                        named = first <= (asOf ?? .max)
                    }
                    return false
                }
                if !named { throw QueryError.unknownUser(app, user) }
            }
            // The filters are applied while scanning, so a page holds `limit` entries whenever that
            // many more match, and `next_cursor` is null exactly when none is left.
            var entries: [JSONValue] = []
            var more = false
            // Nothing comes after the last possible position (a cursor of 2^64 − 1, or a number past
            // 64 bits read as it, must answer an empty page, not overflow).
            guard cursor < .max else { return ["entries": [], "next_cursor": .null] }
            // From the block holding the position after the cursor (its earlier positions passed over).
            try txn.scan(ProjectionStore.audit, from: ProjectionStore.key(prefix, position: ProjectionStore.auditBlockStart(cursor + 1))) { k, v in
                guard k.count == prefix.count + 9, k.starts(with: prefix + [0]) else { return false }
                for position in ProjectionStore.auditPositions(key: k, value: v) where position > cursor {
                    if let asOf, position > asOf { return false }
                    guard let bytes = try txn.get(EventLog.eventsDatabase, EventLog.key(position)) else { continue }
                    let e = try JSONValue(parsing: bytes)
                    let data = e["data"]
                    if let program, user != nil, data["program"].stringValue != program { continue }
                    if let type, let t = e["type"].stringValue, type.hasSuffix(".") ? !t.hasPrefix(type) : t != type { continue }
                    if entries.count == limit { more = true; return false }
                    entries.append(["position": e["position"], "type": e["type"], "at": e["at"], "recorded_at": e["recorded_at"],
                                    "command_id": e["command_id"], "by": data["by"].isNull ? data["command"]["by"] : data["by"],
                                    "program": data["program"], "data": data])
                }
                return true
            }
            return ["entries": .array(entries), "next_cursor": more ? entries.last!["position"] : .null]
        }
    }

    /// What `audit`'s `type` accepts: every event type, and every subject followed by its dot.
    static let auditTypes: Set<String> = Set(EventType.allCases.flatMap { t -> [String] in
        let name = t.rawValue
        return [name, String(name[...name.firstIndex(of: ".")!])]
    })

    /// Stored events from `from`, at most `limit` (≤ 1,000), and the position to continue from.
    public func events(from: UInt64 = 1, limit: Int = 1000) throws -> (events: [[UInt8]], next: UInt64?) {
        let limit = max(1, min(limit, 1000))
        return try environment.read { txn in
            let values = try EventLog.values(txn, from: max(from, 1), limit: limit + 1)
            let page = values.prefix(limit).map(\.1)
            return (Array(page), values.count > limit ? values[limit].0 : nil)
        }
    }
}
