import LedgerCodec
import LedgerStore
import ReferralProjections
import ReferralRules

/// The projection databases: records of `Records` keyed for the queries, written in the same
/// transaction as the events they cover, with their checkpoint and schema version.
enum ProjectionStore {
    /// Each projector's schema version, bumped whenever its records change shape. The map is stored
    /// with the checkpoint; an open that finds another map (or an interrupted rebuild) rebuilds the
    /// projections, and a read-only open refuses with a message to run `rebuild`.
    static let projectorVersions: [String: Int] = [
        "apps": 2, "programs": 2, "participants": 2, "rewards": 2, "user_rewards": 1, "balances": 1, "users": 1, "audit": 1, "codes": 1,
    ]
    static var schemaVersion: String {
        JSONValue.object(projectorVersions.mapValues { .int(Int64($0)) }).text
    }

    static let meta = "proj_meta"
    static let apps = "proj_apps"
    static let programs = "proj_programs"
    static let participants = "proj_participants"
    static let rewards = "proj_rewards"
    static let userRewards = "proj_user_rewards"
    static let balances = "proj_balances"
    static let users = "proj_users"
    static let audit = "proj_audit"
    /// Invite codes (normalised) → program, for `resolve`; never the inviter.
    static let codes = "proj_codes"
    static let all = [meta, apps, programs, participants, rewards, userRewards, balances, users, audit, codes]

    static func key(_ parts: String...) -> [UInt8] {
        var out: [UInt8] = []
        for (n, p) in parts.enumerated() {
            if n > 0 { out.append(0) }
            out.append(contentsOf: p.utf8)
        }
        return out
    }

    static func key(_ prefix: [UInt8], position: UInt64) -> [UInt8] { prefix + [0] + EventLog.key(position) }

    // MARK: Checkpoint

    static func checkpoint(_ txn: LMDBTransaction) throws -> (position: UInt64, schema: String, rebuilding: Bool)? {
        guard let p = try txn.get(meta, Array("checkpoint".utf8)), let position = UInt64(String(decoding: p, as: UTF8.self)) else { return nil }
        let schema = try txn.get(meta, Array("schema".utf8)).map { String(decoding: $0, as: UTF8.self) } ?? ""
        let rebuilding = try txn.get(meta, Array("rebuilding".utf8)) != nil
        return (position, schema, rebuilding)
    }

    static func writeCheckpoint(_ position: UInt64, _ txn: LMDBTransaction) throws {
        try txn.put(meta, Array("checkpoint".utf8), Array(String(position).utf8))
        try txn.put(meta, Array("schema".utf8), Array(schemaVersion.utf8))
    }

    // MARK: Writing

    /// Rewrites the records the fold touched, and indexes the new events for the audit.
    static func write(_ changes: LedgerState.Changes, _ state: LedgerState, newEvents: [StoredEvent], _ txn: LMDBTransaction) throws {
        for name in changes.apps { if let a = state.apps[name] { try txn.put(apps, key(name), Records.app(a).bytes) } }
        for k in changes.programs {
            if let a = state.apps[k.app], let p = a.programs[k.program] { try txn.put(programs, key(k.app, k.program), Records.program(a, p).bytes) }
        }
        for k in changes.participants {
            if let a = state.apps[k.app], let p = a.programs[k.program] {
                try txn.put(participants, key(k.app, k.program, k.user), Records.participant(a, p, k.user).bytes)
                try txn.put(users, key(k.app, k.user), [])
            }
        }
        for k in changes.rewards {
            if let a = state.apps[k.app], let pk = a.rewardPrograms[k.rewardID], let r = a.programs[pk]?.rewards[k.rewardID] {
                try txn.put(rewards, key(k.app, k.rewardID), Records.reward(r).bytes)
                try txn.put(userRewards, key(key(k.app, r.recipient), position: r.position), Array(k.rewardID.utf8))
            }
        }
        for k in changes.balances {
            if let b = state.apps[k.app]?.points[k.user] {
                try txn.put(balances, key(k.app, k.user), Records.balance(b).bytes)
                try txn.put(users, key(k.app, k.user), [])
            }
        }
        for e in newEvents { try indexForAudit(e, txn) }
    }

    /// Audit index: per app, each user an event names and each program, position → event type.
    static func indexForAudit(_ e: StoredEvent, _ txn: LMDBTransaction) throws {
        guard let app = e.data["app"].stringValue else { return }
        if e.type == "invite.created", let code = e.data["code"].stringValue, let program = e.data["program"].stringValue {
            try txn.put(codes, key(app, InviteCodes.normalize(code)), Array(program.utf8))
        }
        let type = Array(e.type.utf8)
        var names = Set<String>()
        for field in ["user", "friend", "inviter", "recipient"] { if let u = e.data[field].stringValue { names.insert(u) } }
        for u in names.sorted() { try txn.put(audit, key(key(app, "u", u), position: e.position), type) }
        if let p = e.data["program"].stringValue { try txn.put(audit, key(key(app, "p", p), position: e.position), type) }
        try txn.put(audit, key(key(app, "a"), position: e.position), type)
    }

    /// Writes every record of `state` (a rebuild), `chunk` puts per call of `flush`.
    static func writeAll(_ state: LedgerState, _ txn: LMDBTransaction) throws {
        var everything = LedgerState.Changes()
        for (name, a) in state.apps {
            everything.apps.insert(name)
            for (key, p) in a.programs {
                everything.programs.insert(ProgramKey(app: name, program: key))
                for user in Set(p.enrollmentOrder).union(p.inviterOrder).union(p.invites.keys) {
                    everything.participants.insert(UserKey(app: name, program: key, user: user))
                }
                for id in p.rewardOrder { everything.rewards.insert(RewardKey(app: name, rewardID: id)) }
            }
            for user in a.points.keys { everything.balances.insert(UserKey(app: name, program: "", user: user)) }
        }
        try write(everything, state, newEvents: [], txn)
    }
}
