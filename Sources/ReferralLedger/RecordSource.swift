import LedgerCodec
import LedgerStore
import ReferralProjections
import ReferralRules

/// Where queries read records from: the stored projections, or a fold of the log up to a
/// position (`--as-of`). Both give the same records for the same history.
protocol RecordSource {
    func app(_ app: String) throws -> JSONValue?
    func program(_ app: String, _ program: String) throws -> JSONValue?
    func participant(_ app: String, _ program: String, _ user: String) throws -> JSONValue?
    func isKnown(_ app: String, _ user: String) throws -> Bool
    /// The IDs of the user's rewards earned after log position `after`, in earning order (without
    /// reading the rewards).
    func rewardIDs(_ app: String, _ user: String, after: UInt64) throws -> [String]
    func reward(_ app: String, _ id: String) throws -> JSONValue?
    func balance(_ app: String, _ user: String) throws -> JSONValue?
    /// The app's programs with campaign keys after `cursor` (all when nil), in key order.
    func programs(_ app: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws
    /// Participants of a program with user IDs after `cursor` and starting with `prefix`, in ID order.
    func participants(_ app: String, _ program: String, prefix: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws
    /// The rewards of the app with IDs after `cursor` (all when nil), in reward ID order.
    func allRewards(_ app: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws
}

extension RecordSource {
    /// The IDs of all the user's rewards, in earning order.
    func rewardIDs(_ app: String, _ user: String) throws -> [String] { try rewardIDs(app, user, after: 0) }
}

/// Records from the projection databases, inside one short read transaction.
struct StoredRecords: RecordSource {
    let txn: LMDBTransaction

    private func record(_ db: String, _ key: [UInt8]) throws -> JSONValue? {
        guard let bytes = try txn.get(db, key) else { return nil }
        return try JSONValue(parsing: bytes)
    }

    func app(_ app: String) throws -> JSONValue? { try record(ProjectionStore.apps, ProjectionStore.key(app)) }
    func program(_ app: String, _ program: String) throws -> JSONValue? { try record(ProjectionStore.programs, ProjectionStore.key(app, program)) }
    func participant(_ app: String, _ program: String, _ user: String) throws -> JSONValue? {
        try record(ProjectionStore.participants, ProjectionStore.key(app, program, user))
    }
    func isKnown(_ app: String, _ user: String) throws -> Bool { try txn.get(ProjectionStore.users, ProjectionStore.key(app, user)) != nil }
    func balance(_ app: String, _ user: String) throws -> JSONValue? { try record(ProjectionStore.balances, ProjectionStore.key(app, user)) }

    func rewardIDs(_ app: String, _ user: String, after: UInt64) throws -> [String] {
        let prefix = ProjectionStore.key(app, user) + [0]
        var ids: [String] = []
        guard after < .max else { return [] }
        try txn.scan(ProjectionStore.userRewards, from: prefix + EventLog.key(after + 1)) { k, v in
            guard k.starts(with: prefix) else { return false }
            ids.append(String(decoding: v, as: UTF8.self))
            return true
        }
        return ids
    }

    func reward(_ app: String, _ id: String) throws -> JSONValue? { try record(ProjectionStore.rewards, ProjectionStore.key(app, id)) }

    func participants(_ app: String, _ program: String, prefix: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws {
        let base = ProjectionStore.key(app, program) + [0]
        let first = base + Array(prefix.utf8)
        // After the cursor, but never before the prefix: a cursor that sorts before it (kept from
        // another filter, or a client's own "after this ID") must not end the scan at once.
        let afterCursor = cursor.map { base + Array($0.utf8) + [0] }
        let start = afterCursor.map { first.lexicographicallyPrecedes($0) ? $0 : first } ?? first
        try txn.scan(ProjectionStore.participants, from: start) { k, v in
            guard k.starts(with: first) else { return false }
            return visit(try JSONValue(parsing: v))
        }
    }

    func programs(_ app: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws {
        let base = ProjectionStore.key(app) + [0]
        let start = cursor.map { base + Array($0.utf8) + [0] } ?? base
        try txn.scan(ProjectionStore.programs, from: start) { k, v in
            guard k.starts(with: base) else { return false }
            return visit(try JSONValue(parsing: v))
        }
    }

    func allRewards(_ app: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws {
        let base = ProjectionStore.key(app) + [0]
        // From the cursor on (a page reads its own rewards, not every one before it); the cursor's
        // own key, if there is one, is skipped.
        let start = cursor.map { base + Array($0.utf8) } ?? base
        try txn.scan(ProjectionStore.rewards, from: start) { k, v in
            guard k.starts(with: base) else { return false }
            if cursor != nil, k.elementsEqual(start) { return true }
            return visit(try JSONValue(parsing: v))
        }
    }
}

/// Records computed from a folded state (as of a past position).
struct FoldedRecords: RecordSource {
    let state: LedgerState

    func app(_ app: String) throws -> JSONValue? { state.apps[app].map(Records.app) }
    func program(_ app: String, _ program: String) throws -> JSONValue? {
        guard let a = state.apps[app], let p = a.programs[program] else { return nil }
        return Records.program(a, p)
    }
    func participant(_ app: String, _ program: String, _ user: String) throws -> JSONValue? {
        guard let a = state.apps[app], let p = a.programs[program],
              p.enrollments[user] != nil || p.inviters[user] != nil || p.invites[user] != nil else { return nil }
        return Records.participant(a, p, user)
    }
    func isKnown(_ app: String, _ user: String) throws -> Bool { state.apps[app]?.knownUsers.contains(user) ?? false }
    func balance(_ app: String, _ user: String) throws -> JSONValue? { state.apps[app]?.points[user].map(Records.balance) }

    func rewardIDs(_ app: String, _ user: String, after: UInt64) throws -> [String] {
        guard let a = state.apps[app] else { return [] }
        var list: [Reward] = []
        for p in a.programs.values { list.append(contentsOf: p.rewards.values.filter { $0.recipient == user && $0.position > after }) }
        return list.sorted { $0.position < $1.position }.map(\.id)
    }

    func reward(_ app: String, _ id: String) throws -> JSONValue? {
        guard let a = state.apps[app], let key = a.rewardPrograms[id], let r = a.programs[key]?.rewards[id] else { return nil }
        return Records.reward(r)
    }

    func participants(_ app: String, _ program: String, prefix: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws {
        guard let a = state.apps[app], let p = a.programs[program] else { return }
        let users = Set(p.enrollmentOrder).union(p.inviterOrder).union(p.invites.keys)
        for u in users.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) where u.utf8.starts(with: prefix.utf8) {
            if let cursor, !cursor.utf8.lexicographicallyPrecedes(u.utf8) { continue }
            if !visit(Records.participant(a, p, u)) { return }
        }
    }

    func programs(_ app: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws {
        guard let a = state.apps[app] else { return }
        let keys = a.programs.keys.filter { k in cursor.map { $0.utf8.lexicographicallyPrecedes(k.utf8) } ?? true }
        for key in keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) where !visit(Records.program(a, a.programs[key]!)) { return }
    }

    func allRewards(_ app: String, after cursor: String?, _ visit: (JSONValue) -> Bool) throws {
        guard let a = state.apps[app] else { return }
        let all = a.programs.values.flatMap { $0.rewards.values }
            .filter { r in cursor.map { $0.utf8.lexicographicallyPrecedes(r.id.utf8) } ?? true }
            .sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }
        for r in all where !visit(Records.reward(r)) { return }
    }
}
