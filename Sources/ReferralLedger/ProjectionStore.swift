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
        "apps": 2, "programs": 3, "participants": 3, "rewards": 4, "user_rewards": 2, "balances": 1, "users": 2, "audit": 2, "codes": 2,
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
        /// The references are first parted by database (each part sorted on its own, the large
        /// ones side by side on every core), and each carries the 8 bytes that follow its
        /// database's common key prefix, so that most comparisons are one integer comparison.
        static func sortInKeyOrder(_ entries: inout [Entry]) {
            guard entries.count > 1 else { return }
            // Each entry's database by its rank among the names (entries come in runs of one).
            var rank: [String: Int] = [:]
            for e in entries where rank[e.database] == nil { rank[e.database] = 0 }
            for (n, name) in rank.keys.sorted().enumerated() { rank[name] = n }
            var ranks = [Int](repeating: 0, count: entries.count)
            var partSizes = [Int](repeating: 0, count: rank.count)
            var flat: [UInt8] = []
            flat.reserveCapacity(entries.reduce(0) { $0 + $1.key.count })
            var offsets = [Int](repeating: 0, count: entries.count)
            var last: (name: String, rank: Int)? = nil
            for (n, e) in entries.enumerated() {
                let r: Int
                if let l = last, l.name == e.database { r = l.rank } else { r = rank[e.database]!; last = (e.database, r) }
                ranks[n] = r
                partSizes[r] += 1
                offsets[n] = flat.count
                flat.append(contentsOf: e.key)
            }
            var partStarts = [Int](repeating: 0, count: partSizes.count + 1)
            for r in partSizes.indices { partStarts[r + 1] = partStarts[r] + partSizes[r] }
            // Parted by database, in entry order within each part (a counting sort).
            var refs = [KeyRef](repeating: KeyRef(prefix: 0, offset: 0, length: 0, index: 0), count: entries.count)
            var next = partStarts
            for n in entries.indices {
                refs[next[ranks[n]]] = KeyRef(prefix: 0, offset: offsets[n], length: entries[n].key.count, index: n)
                next[ranks[n]] += 1
            }
            flat.withUnsafeBufferPointer { keys in
                let base = UncheckedPointer(keys.baseAddress!)
                refs.withUnsafeMutableBufferPointer { all in
                    let box = UncheckedRefs(refs: all)
                    let partStarts = partStarts
                    let sortPart: @Sendable (Int) -> Void = { r in
                        let part = UnsafeMutableBufferPointer(rebasing: box.refs[partStarts[r]..<partStarts[r + 1]])
                        sortByKey(part, base.pointer)
                    }
                    let large = partSizes.filter { $0 >= 16_384 }.count
                    if large >= 2 {
                        DispatchQueue.concurrentPerform(iterations: partSizes.count, execute: sortPart)
                    } else {
                        for r in partSizes.indices { sortPart(r) }
                    }
                }
            }
            entries = refs.map { entries[$0.index] }
        }

        /// Sorts one database's references by key bytes (shorter first), then entry order.
        private static func sortByKey(_ part: UnsafeMutableBufferPointer<KeyRef>, _ keys: UnsafePointer<UInt8>) {
            var part = part
            guard part.count > 1 else { return }
            // The bytes every key of the part starts with (at most the shortest key).
            let first = part[0]
            var common = first.length
            for ref in part where common > 0 {
                var i = 0
                let m = min(common, ref.length)
                while i < m, keys[first.offset + i] == keys[ref.offset + i] { i += 1 }
                common = i
            }
            // The next 8 bytes, big-endian, zero-padded: their order is the keys' order, but for ties.
            for i in part.indices {
                var prefix: UInt64 = 0
                let ref = part[i]
                for j in 0..<8 {
                    let k = common + j
                    prefix = prefix << 8 | UInt64(k < ref.length ? keys[ref.offset + k] : 0)
                }
                part[i].prefix = prefix
            }
            part.sort { a, b in
                if a.prefix != b.prefix { return a.prefix < b.prefix }
                let c = memcmp(keys + a.offset + common, keys + b.offset + common, min(a.length, b.length) - common)
                if c != 0 { return c < 0 }
                return a.length != b.length ? a.length < b.length : a.index < b.index
            }
        }
    }

    private struct KeyRef {
        /// The 8 key bytes after the common prefix of its database's keys (`sortByKey`).
        var prefix: UInt64
        var offset: Int
        var length: Int
        var index: Int
    }

    /// The sort's shared buffers, each part written by one iteration only.
    private struct UncheckedRefs: @unchecked Sendable { let refs: UnsafeMutableBufferPointer<KeyRef> }
    private struct UncheckedPointer: @unchecked Sendable {
        let pointer: UnsafePointer<UInt8>
        init(_ pointer: UnsafePointer<UInt8>) { self.pointer = pointer }
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
        for name in changes.apps { if let a = state.apps[name] { out.append(appEntry(a)) } }
        for k in changes.programs {
            if let a = state.apps[k.app], let p = a.programs[k.program] { out.append(programEntry(a, p)) }
        }
        for k in changes.participants {
            if let a = state.apps[k.app], let p = a.programs[k.program] { out.append(participantEntry(a, p, k.user)) }
        }
        for k in changes.rewards {
            if let a = state.apps[k.app], let pk = a.rewardPrograms[k.rewardID], let r = a.programs[pk]?.rewards[k.rewardID] {
                rewardEntries(a, r, into: &out)
            }
        }
        for k in changes.balances {
            if let b = state.apps[k.app]?.points[k.user] { out.append(balanceEntry(app: k.app, user: k.user, b)) }
        }
        // Every user the app knows (participants and spenders among them), written once, when the
        // fold first meets them: a user's entry never changes.
        for k in changes.users where state.apps[k.app]?.knownUsers.contains(k.user) == true {
            out.append(userEntry(app: k.app, user: k.user))
        }
    }

    // Each record's entry, made in one place for the changes a command makes and for a rebuild's
    // whole state (`everyRecord`).

    private static func appEntry(_ a: AppState) -> Entry {
        Entry(database: apps, key: key(a.name), value: Records.app(a).bytes)
    }

    private static func programEntry(_ a: AppState, _ p: ProgramState) -> Entry {
        Entry(database: programs, key: key(a.name, p.key), value: Records.program(a, p).bytes)
    }

    private static func participantEntry(_ a: AppState, _ p: ProgramState, _ user: String) -> Entry {
        Entry(database: participants, key: key(a.name, p.key, user), value: Records.participantBytes(a, p, user))
    }

    /// A reward's record and its recipient's index entry.
    private static func rewardEntries(_ a: AppState, _ r: Reward, into out: inout [Entry]) {
        out.append(Entry(database: rewards, key: key(a.name, r.id), value: Records.rewardBytes(r)))
        out.append(Entry(database: userRewards, key: key(key(a.name, r.recipient), position: r.position), value: Array(r.id.utf8)))
    }

    private static func balanceEntry(app: String, user: String, _ b: PointsBalance) -> Entry {
        Entry(database: balances, key: key(app, user), value: Records.balance(b).bytes)
    }

    private static func userEntry(app: String, user: String) -> Entry {
        Entry(database: users, key: key(app, user), value: [])
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
    static func auditEntries(_ e: some LoggedEvent, into out: inout [Entry]) {
        guard case .object(let data) = e.data, case .string(let app)? = data["app"] else { return }
        if let code = codeEntry(e, data, app: app) { out.append(code) }
        let block = auditBlockStart(e.position)
        let offset = [UInt8(e.position - block)]
        forEachAuditSubject(data) { kind, name in
            out.append(Entry(database: audit, key: auditKey(app: app, kind: kind, name: name, block: block), value: offset))
        }
    }

    /// The `codes` entry of an `invite.created` event.
    private static func codeEntry(_ e: some LoggedEvent, _ data: JSONObject, app: String) -> Entry? {
        guard e.type == "invite.created", case .string(let code)? = data["code"], case .string(let program)? = data["program"] else { return nil }
        return Entry(database: codes, key: key(app, InviteCodes.normalize(code)), value: Array(program.utf8) + [0] + Array(code.utf8))
    }

    /// What an event's audit entries are kept under, each once: `u` and each user it names (as
    /// user, friend, inviter or recipient), `p` and its program, `a` (its app, name empty).
    @inline(__always)
    private static func forEachAuditSubject(_ data: JSONObject, _ body: (UInt8, String) -> Void) {
        // The user fields in the order `user`, `friend`, `inviter`, `recipient`, each name once
        // (no list of names made for every event: at most four, compared in place).
        let user = data["user"]?.stringValue, friend = data["friend"]?.stringValue
        let inviter = data["inviter"]?.stringValue, recipient = data["recipient"]?.stringValue
        if let user { body(UInt8(ascii: "u"), user) }
        if let friend, friend != user { body(UInt8(ascii: "u"), friend) }
        if let inviter, inviter != user, inviter != friend { body(UInt8(ascii: "u"), inviter) }
        if let recipient, recipient != user, recipient != friend, recipient != inviter { body(UInt8(ascii: "u"), recipient) }
        if case .string(let p)? = data["program"] { body(UInt8(ascii: "p"), p) }
        body(UInt8(ascii: "a"), "")
    }

    /// app␀u␀user␀block, app␀p␀program␀block, app␀a␀block.
    private static func auditKey(app: String, kind: UInt8, name: String, block: UInt64) -> [UInt8] {
        var k: [UInt8] = []
        k.reserveCapacity(app.utf8.count + name.utf8.count + 12)
        k.append(contentsOf: app.utf8)
        k.append(0)
        k.append(kind)
        if kind != UInt8(ascii: "a") {
            k.append(0)
            k.append(contentsOf: name.utf8)
        }
        k.append(0)
        k.append(contentsOf: EventLog.key(block))
        return k
    }

    /// The audit index entries of consecutive events, each block's offsets merged into one entry
    /// as they come (an entry per subject and block, found by its subject, not its key bytes),
    /// with the events' `codes` entries. `entries` is in log order of first sight, not key order.
    struct AuditIndexer {
        private(set) var entries: [Entry] = []
        private var slots: [Subject: Int] = [:]
        private var block: UInt64 = 0

        private struct Subject: Hashable {
            var app: String
            var kind: UInt8
            var name: String

            // Hashed by kind and name alone (a log rarely has more than a few apps; `==` still
            // compares the app): one string hashed per lookup, not two.
            func hash(into hasher: inout Hasher) {
                hasher.combine(kind)
                hasher.combine(name)
            }
        }

        init() {}

        mutating func add(_ e: some LoggedEvent) {
            guard case .object(let data) = e.data, case .string(let app)? = data["app"] else { return }
            if let code = codeEntry(e, data, app: app) { entries.append(code) }
            let start = auditBlockStart(e.position)
            if start != block {
                // A subject's entry of an earlier block is never touched again.
                slots.removeAll(keepingCapacity: true)
                block = start
            }
            let offset = UInt8(e.position - start)
            forEachAuditSubject(data) { kind, name in
                let subject = Subject(app: app, kind: kind, name: name)
                if let n = slots[subject] {
                    entries[n].value.append(offset)
                } else {
                    slots[subject] = entries.count
                    // Room for a few more offsets: a subject named once in a block is often named again.
                    var value: [UInt8] = []
                    value.reserveCapacity(8)
                    value.append(offset)
                    entries.append(Entry(database: audit, key: auditKey(app: app, kind: kind, name: name, block: start), value: value))
                }
            }
        }
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
    /// in no order (whoever writes them sorts them).
    static func indexEntries(_ events: some Sequence<some LoggedEvent>) -> [Entry] {
        var indexer = AuditIndexer()
        for e in events { indexer.add(e) }
        return indexer.entries
    }

    /// The index entries of a batch of new events (`indexEntries`), in key order, the block the
    /// batch starts in completed with what earlier batches stored in it: the entries to put.
    static func newIndexEntries(_ entries: [Entry], firstPosition: UInt64, _ txn: LMDBTransaction) throws -> [Entry] {
        var merged = entries
        Entry.sortInKeyOrder(&merged)
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
        for e in everyRecord(state) { digests[e.database, default: IndexDigest()].add(key: e.key, value: e.value) }
        return digests
    }

    /// Every record of `state` (made on every core) in key order, one per key: what a rebuild
    /// writes and what `verify` compares record by record.
    static func allRecords(_ state: LedgerState) -> [Entry] {
        var entries = everyRecord(state)
        Entry.sortInKeyOrder(&entries)
        var unique: [Entry] = []
        unique.reserveCapacity(entries.count)
        for e in entries where unique.last.map({ $0.database != e.database || $0.key != e.key }) ?? true { unique.append(e) }
        return unique
    }

    /// Every record of `state`, one per key, in no order, made on every core: what a rebuild
    /// writes (sorted) and `verify` sums. Read from the state's own lists, the records of every
    /// app, program, participant (enrolled, inviting or holding an invite code), reward, balance and
    /// known user: what the fold's changes name, event by event, when the events are written.
    static func everyRecord(_ state: LedgerState) -> [Entry] {
        // Runs of at most this many records, so that both cores share the largest program.
        let run = 16_384
        var work: [@Sendable () -> [Entry]] = []
        func inRuns(_ items: [String], _ make: @escaping @Sendable (ArraySlice<String>) -> [Entry]) {
            var start = 0
            while start < items.count {
                let slice = items[start..<min(items.count, start + run)]
                work.append { make(slice) }
                start += run
            }
        }
        for (name, a) in state.apps {
            work.append {
                var out = [appEntry(a)]
                for (user, b) in a.points { out.append(balanceEntry(app: name, user: user, b)) }
                for user in a.knownUsers { out.append(userEntry(app: name, user: user)) }
                return out
            }
            for (pk, p) in a.programs {
                work.append { [programEntry(a, p)] }
                // Each participant once: friends, then inviters not enrolled, then holders of a code
                // who are neither (a friend enrols once per program; an inviter is listed once).
                let inviting = p.inviterOrder.filter { p.enrollments[$0] == nil }
                let holding = p.invites.keys.filter { p.enrollments[$0] == nil && p.inviters[$0] == nil }
                for users in [p.enrollmentOrder, inviting, holding] {
                    inRuns(users) { slice in slice.map { participantEntry(a, p, $0) } }
                }
                inRuns(p.rewardOrder) { slice in
                    var out: [Entry] = []
                    out.reserveCapacity(slice.count * 2)
                    for id in slice {
                        guard let r = p.rewards[id], a.rewardPrograms[id] == pk else { continue }
                        rewardEntries(a, r, into: &out)
                    }
                    return out
                }
            }
        }
        let jobs = work
        return concurrentMap(jobs.count) { jobs[$0]() }.flatMap { $0 }
    }
}
