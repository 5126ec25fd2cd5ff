import Dispatch
#if canImport(Glibc)
import Glibc
#endif
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
        "apps": 2, "programs": 3, "participants": 3, "rewards": 3, "user_rewards": 2, "balances": 1, "users": 2, "audit": 2, "codes": 2,
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
    /// Invite codes (normalised) → program, NUL, the code as issued, for `resolve`; never the inviter.
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

    /// The projections' checkpoint; nil when none was ever written. A rebuild that was cut short
    /// (its mark is there, the checkpoint it cleared is not) reads as `rebuilding` at position 0.
    static func checkpoint(_ txn: LMDBTransaction) throws -> (position: UInt64, schema: String, rebuilding: Bool)? {
        let rebuilding = try txn.get(meta, Array("rebuilding".utf8)) != nil
        guard let p = try txn.get(meta, Array("checkpoint".utf8)), let position = UInt64(String(decoding: p, as: UTF8.self)) else {
            return rebuilding ? (0, "", true) : nil
        }
        let schema = try txn.get(meta, Array("schema".utf8)).map { String(decoding: $0, as: UTF8.self) } ?? ""
        return (position, schema, rebuilding)
    }

    /// How the projections stand against the log's head: `current` (at the head, this code's
    /// schema), `missing`, `rebuilding` (under way, or cut short), `other_schema` or `behind`.
    static func state(_ checkpoint: (position: UInt64, schema: String, rebuilding: Bool)?, head: UInt64) -> String {
        switch checkpoint {
        case nil: head == 0 ? "current" : "missing"
        case let c? where c.rebuilding: "rebuilding"
        case let c? where c.schema != schemaVersion: "other_schema"
        case let c? where c.position != head: "behind"
        default: "current"
        }
    }

    static func writeCheckpoint(_ position: UInt64, _ txn: LMDBTransaction) throws {
        try txn.put(meta, Array("checkpoint".utf8), Array(String(position).utf8))
        try txn.put(meta, Array("schema".utf8), Array(schemaVersion.utf8))
    }

    // MARK: Writing

    /// One record or index entry to store.
    struct Entry: Sendable {
        var database: String
        var key: [UInt8]
        var value: [UInt8]

        /// Sorts database by database, keys in LMDB's order (bytes, shorter first): the order that
        /// walks each B-tree once, and the order `MDB_APPEND` needs. Equal keys keep their order.
        ///
        /// Comparing the entries themselves retains and releases their arrays at every step (a
        /// third of a rebuild's time); this sorts plain references into one flat copy of the keys.
        static func sortInKeyOrder(_ entries: inout [Entry]) {
            guard entries.count > 1 else { return }
            let names = Set(entries.map(\.database)).sorted()
            var flat: [UInt8] = []
            flat.reserveCapacity(entries.reduce(0) { $0 + $1.key.count })
            var refs: [KeyRef] = []
            refs.reserveCapacity(entries.count)
            for (n, e) in entries.enumerated() {
                refs.append(KeyRef(database: names.firstIndex(of: e.database)!, offset: flat.count, length: e.key.count, index: n))
                flat.append(contentsOf: e.key)
            }
            flat.withUnsafeBufferPointer { keys in
                let base = keys.baseAddress!
                refs.sort { a, b in
                    if a.database != b.database { return a.database < b.database }
                    let c = memcmp(base + a.offset, base + b.offset, min(a.length, b.length))
                    if c != 0 { return c < 0 }
                    return a.length != b.length ? a.length < b.length : a.index < b.index
                }
            }
            entries = refs.map { entries[$0.index] }
        }
    }

    private struct KeyRef {
        var database: Int
        var offset: Int
        var length: Int
        var index: Int
    }

    /// Rewrites the records the fold touched, and puts the new events' audit entries (made ahead).
    static func write(_ changes: LedgerState.Changes, _ state: LedgerState, audit: [Entry], _ txn: LMDBTransaction) throws {
        for e in records(changes, state) { try txn.put(e.database, e.key, e.value) }
        for e in audit { try txn.put(e.database, e.key, e.value) }
    }

    /// The records of everything `changes` names, made on every core when there are many.
    static func records(_ changes: LedgerState.Changes, _ state: LedgerState) -> [Entry] {
        let count = changes.apps.count + changes.programs.count + changes.participants.count + changes.rewards.count + changes.balances.count
            + changes.users.count
        guard count >= 256 else {
            var out: [Entry] = []
            records(changes, state, into: &out)
            return out
        }
        let shardCount = 4
        var shards = [LedgerState.Changes](repeating: LedgerState.Changes(), count: shardCount)
        for (n, k) in changes.apps.enumerated() { shards[n % shardCount].apps.insert(k) }
        for (n, k) in changes.programs.enumerated() { shards[n % shardCount].programs.insert(k) }
        for (n, k) in changes.participants.enumerated() { shards[n % shardCount].participants.insert(k) }
        for (n, k) in changes.rewards.enumerated() { shards[n % shardCount].rewards.insert(k) }
        for (n, k) in changes.balances.enumerated() { shards[n % shardCount].balances.insert(k) }
        for (n, k) in changes.users.enumerated() { shards[n % shardCount].users.insert(k) }
        let work = shards
        return concurrentMap(shardCount) { i in
            var out: [Entry] = []
            records(work[i], state, into: &out)
            return out
        }.flatMap { $0 }
    }

    /// The records of everything `changes` names, as the queries read them.
    private static func records(_ changes: LedgerState.Changes, _ state: LedgerState, into out: inout [Entry]) {
        for name in changes.apps { if let a = state.apps[name] { out.append(Entry(database: apps, key: key(name), value: Records.app(a).bytes)) } }
        for k in changes.programs {
            if let a = state.apps[k.app], let p = a.programs[k.program] {
                out.append(Entry(database: programs, key: key(k.app, k.program), value: Records.program(a, p).bytes))
            }
        }
        for k in changes.participants {
            if let a = state.apps[k.app], let p = a.programs[k.program] {
                out.append(Entry(database: participants, key: key(k.app, k.program, k.user), value: Records.participant(a, p, k.user).bytes))
            }
        }
        for k in changes.rewards {
            if let a = state.apps[k.app], let pk = a.rewardPrograms[k.rewardID], let r = a.programs[pk]?.rewards[k.rewardID] {
                out.append(Entry(database: rewards, key: key(k.app, k.rewardID), value: Records.reward(r).bytes))
                out.append(Entry(database: userRewards, key: key(key(k.app, r.recipient), position: r.position), value: Array(k.rewardID.utf8)))
            }
        }
        for k in changes.balances {
            if let b = state.apps[k.app]?.points[k.user] {
                out.append(Entry(database: balances, key: key(k.app, k.user), value: Records.balance(b).bytes))
            }
        }
        // Every user the app knows (participants and spenders among them), written once, when the
        // fold first meets them: a user's entry never changes.
        for k in changes.users where state.apps[k.app]?.knownUsers.contains(k.user) == true {
            out.append(Entry(database: users, key: key(k.app, k.user), value: []))
        }
    }

    /// Audit index: per app, for each user an event names, for its program and for the app, the
    /// positions of its events in blocks of `auditBlock` positions: key app␀u␀user (or app␀p␀program,
    /// or app␀a), ␀, the block's first position (8 bytes big-endian); value one byte per event, its
    /// offset in the block, in log order. One entry holds what a user, program or app did in 250
    /// positions: a command writes about one audit entry instead of one per event and name.
    /// And invite codes (normalised) → program for `resolve`.
    ///
    /// `auditEntries` gives each event's own entries (one offset each); `indexEntries` merges the
    /// entries of consecutive events into their blocks.
    static func auditEntries(_ e: StoredEvent, into out: inout [Entry]) {
        guard let app = e.data["app"].stringValue else { return }
        if e.type == "invite.created", let code = e.data["code"].stringValue, let program = e.data["program"].stringValue {
            out.append(Entry(database: codes, key: key(app, InviteCodes.normalize(code)), value: Array(program.utf8) + [0] + Array(code.utf8)))
        }
        let block = auditBlockStart(e.position)
        let offset = [UInt8(e.position - block)]
        var names: [String] = []
        for field in ["user", "friend", "inviter", "recipient"] {
            if let u = e.data[field].stringValue, !names.contains(u) { names.append(u) }
        }
        for u in names { out.append(Entry(database: audit, key: key(key(app, "u", u), position: block), value: offset)) }
        if let p = e.data["program"].stringValue { out.append(Entry(database: audit, key: key(key(app, "p", p), position: block), value: offset)) }
        out.append(Entry(database: audit, key: key(key(app, "a"), position: block), value: offset))
    }

    /// Positions per audit entry. Divides `LogPages`' page, so a page read from position 1 holds
    /// whole blocks (a rebuild's and `verify`'s pages are merged alone), and fits an offset in a byte.
    static let auditBlock: UInt64 = 250

    /// The first position of the audit block holding `position` (1, 251, 501, …).
    static func auditBlockStart(_ position: UInt64) -> UInt64 { (position - 1) / auditBlock * auditBlock + 1 }

    /// The positions an audit entry holds, in order (its key's block and its value's offsets).
    static func auditPositions(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> [UInt64] {
        guard key.count >= 8, let start = EventLog.position(fromKey: UnsafeRawBufferPointer(rebasing: key[(key.count - 8)...])) else { return [] }
        return value.map { start + UInt64($0) }
    }

    /// The index entries of consecutive events, each audit block's offsets merged into one entry,
    /// in key order (for writing: LMDB then walks each B-tree once).
    static func indexEntries(_ events: some Sequence<StoredEvent>) -> [Entry] {
        var entries: [Entry] = []
        for e in events { auditEntries(e, into: &entries) }
        return mergingPostings(entries)
    }

    /// Entries with equal audit keys merged into one, their offsets appended in the order given
    /// (log order), in key order.
    static func mergingPostings(_ entries: [Entry]) -> [Entry] {
        var merged: [Entry] = []
        merged.reserveCapacity(entries.count / 2)
        var slots: [[UInt8]: Int] = [:]
        for e in entries {
            guard e.database == audit else { merged.append(e); continue }
            if let n = slots[e.key] {
                merged[n].value.append(contentsOf: e.value)
            } else {
                slots[e.key] = merged.count
                merged.append(e)
            }
        }
        Entry.sortInKeyOrder(&merged)
        return merged
    }

    /// The audit entries of a batch of new events (`auditEntries` of each, in log order), merged,
    /// and the block the batch starts in completed with what earlier batches stored in it:
    /// the entries to put.
    static func newIndexEntries(_ entries: [Entry], firstPosition: UInt64, _ txn: LMDBTransaction) throws -> [Entry] {
        var merged = mergingPostings(entries)
        let open = auditBlockStart(firstPosition)
        guard open < firstPosition else { return merged }
        let openKey = EventLog.key(open)
        for i in merged.indices where merged[i].database == audit && merged[i].key.suffix(8).elementsEqual(openKey) {
            if let stored = try txn.get(audit, merged[i].key) { merged[i].value = stored + merged[i].value }
        }
        return merged
    }

    /// Writes entries given in key order (LMDB then walks each B-tree once instead of jumping
    /// between pages).
    static func put(_ entries: [Entry], _ txn: LMDBTransaction) throws {
        for e in entries { try txn.put(e.database, e.key, e.value) }
    }

    /// Everything a state holds, as changes: what a rebuild writes and `verify` compares.
    static func everything(_ state: LedgerState) -> LedgerState.Changes {
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
            for user in a.knownUsers { everything.users.insert(UserKey(app: name, program: "", user: user)) }
        }
        return everything
    }

    /// Writes every record of `state` into the emptied record databases (a rebuild). The records
    /// are made on every core, then stored in key order with `MDB_APPEND`.
    static func writeAll(_ state: LedgerState, _ txn: LMDBTransaction) throws {
        let entries = allRecords(state)
        var i = 0
        while i < entries.count {
            let database = entries[i].database
            let handle = try txn.handle(database)
            while i < entries.count, entries[i].database == database {
                try txn.put(handle, entries[i].key, entries[i].value, append: true)
                i += 1
            }
        }
    }

    /// Order-free digests of every record of `state` by database, one per key: what `allRecords`
    /// holds, without sorting it (`verify` compares them with digests of the stored databases).
    static func recordDigests(_ state: LedgerState) -> [String: IndexDigest] {
        // (Each record is made once: should one be made twice, the sums differ and `verify` compares
        // the records one by one, which tells.)
        var digests: [String: IndexDigest] = [:]
        for e in records(everything(state), state) { digests[e.database, default: IndexDigest()].add(key: e.key, value: e.value) }
        return digests
    }

    /// Every record of `state` (made on every core) in key order, one per key: what a rebuild
    /// writes and what `verify` compares record by record.
    static func allRecords(_ state: LedgerState) -> [Entry] {
        var entries = records(everything(state), state)
        Entry.sortInKeyOrder(&entries)
        var unique: [Entry] = []
        unique.reserveCapacity(entries.count)
        for e in entries where unique.last.map({ $0.database != e.database || $0.key != e.key }) ?? true { unique.append(e) }
        return unique
    }
}
