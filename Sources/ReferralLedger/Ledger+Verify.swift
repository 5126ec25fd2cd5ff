import LedgerCodec
import LedgerStore
import ReferralProjections
import ReferralRules

/// What `verify` found.
public struct VerificationReport: Sendable {
    public var events: UInt64
    public var violations: [Violation]
    public var isClean: Bool { violations.isEmpty }

    public var json: JSONValue {
        ["ok": .bool(isClean), "events": .int(Int64(events)), "violations": .array(violations.map(\.json))]
    }

    /// One line per violation, for people.
    public var text: String {
        let counted = events == 1 ? "1 event" : "\(events) events"
        if isClean { return "verified \(counted): the chain is intact and every rule held" }
        return violations.map { "position \($0.position)  \($0.rule)  \($0.message)" }.joined(separator: "\n")
            + "\n\(violations.count == 1 ? "1 violation" : "\(violations.count) violations") in \(counted)"
    }
}

extension Ledger {
    /// Verifies this ledger: the chain and head, the rules by an independent replay, and that the
    /// stored projections equal a fresh fold (when the whole history is checked).
    ///
    /// The log is read and examined (parsed, hashed, form-checked) a page ahead on a second
    /// thread while this one replays the rules. The replay is fast (one state) and falls back to a
    /// full replay, reading the log again, only when it meets a decision that does not reproduce.
    public func verify(until: UInt64 = .max, checkpoint: (Checkpoint, String)? = nil, progress: ProgressHandler? = nil) throws -> VerificationReport {
        let head = try currentHead()
        var (verifier, indexes) = try replayLog(.fast, until: until, pinned: checkpoint?.0.headPosition, head: head, progress: progress)
        var violations = verifier.finish(head: head)
        if verifier.needsFullReplay {
            (verifier, indexes) = try replayLog(.full, until: until, pinned: checkpoint?.0.headPosition, head: head, progress: progress)
            violations = verifier.finish(head: head)
        }
        violations += try headFormat()
        if until >= head.position {
            violations += try strayKeys()
            // Projections are compared with a fold of the log as it stands whenever that fold is
            // whole, also when the log breaks rules (then a mismatch is evidence of what changed
            // since the projections were written, and `rebuild` is not the cure).
            if verifier.foldedWholeHistory {
                let logIsSound = violations.isEmpty
                violations += try projectionMismatches(verifier.recorded, indexes: indexes, logIsSound: logIsSound)
            }
        }
        if let (cp, key) = checkpoint {
            violations += try cp.check(publicKeyPEM: key, hashAtPosition: verifier.pinnedHash, historyLength: verifier.eventCount)
        }
        return VerificationReport(events: verifier.eventCount, violations: violations)
    }

    /// One pass over the log: read and examined a page ahead on a second thread (which also sums
    /// the audit and code index entries the events call for), replayed on this one.
    private func replayLog(_ replay: LedgerVerifier.Replay, until: UInt64, pinned: UInt64?, head: ChainHead,
                           progress: ProgressHandler?) throws -> (LedgerVerifier, IndexDigests) {
        var verifier = LedgerVerifier(replay: replay)
        // Never past the head read at the start: a server may append meanwhile, and what it appends
        // is not part of this verification (one event past is read only to see the cut).
        verifier.until = min(until, head.position)
        verifier.pinnedPosition = pinned
        let total = min(until, head.position)
        // One event past the cut tells the verifier whether the cut splits a command.
        let pages = LogPages(environment: environment, through: total + 1)
        let indexes = IndexDigests()
        try ReadAhead.run(produce: { _ -> [ExaminedValue]? in
            guard let page = try pages.next()?.map({ ExaminedValue(key: $0.0, value: $0.1) }) else {
                indexes.finish()
                return nil
            }
            indexes.add(page, through: total)
            return page
        }) { page in
            for examined in page { verifier.add(examined) }
            if let last = page.last?.key { progress?(min(last, total), total) }
            return !(replay == .fast && verifier.needsFullReplay)
        }
        return (verifier, indexes)
    }

    /// The head in `meta` as the log writes it: `head_position` in decimal digits without a sign or
    /// leading zeros, `head_hash` in 64 lowercase hex digits (a reader that parses leniently must
    /// not see another head than a strict one).
    func headFormat() throws -> [Violation] {
        try environment.read { txn in
            let position = try txn.get(EventLog.metaDatabase, Array("head_position".utf8))
            let hash = try txn.get(EventLog.metaDatabase, Array("head_hash".utf8))
            guard position != nil || hash != nil else { return [] }
            let digits = position.map { p in !p.isEmpty && p.allSatisfy { (0x30...0x39).contains($0) } && (p.count == 1 || p.first != 0x30) } ?? false
            let hex = hash.map { h in h.count == 64 && h.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) } } ?? false
            guard !(digits && hex) else { return [] }
            let at = position.flatMap { UInt64(String(decoding: $0, as: UTF8.self)) }.map { max($0, 1) } ?? 1
            return [Violation(position: at, rule: "chain.head_format",
                              message: "meta must hold head_position in decimal digits (no sign, no leading zeros) and head_hash in 64 lowercase hex digits; it holds \(position.map { "\"" + String(decoding: $0, as: UTF8.self) + "\"" } ?? "no head_position") and \(hash.map { "\"" + String(decoding: $0, as: UTF8.self) + "\"" } ?? "no head_hash")")]
        }
    }

    /// Keys of the `events` database that are not the positions 1…head: a key of another length,
    /// position 0, or one past the head. The replay reads positions 1…head and never meets them;
    /// `export` would. Counted in one snapshot with the head (a server may be appending).
    func strayKeys() throws -> [Violation] {
        try environment.read { txn in
            let head = try EventLog.head(txn)
            let entries = try txn.count(EventLog.eventsDatabase)
            guard UInt64(entries) != head.position else { return [] }
            return [Violation(position: max(head.position, 1), rule: "chain.format",
                              message: "the events database holds \(entries) entries where the log's positions 1…\(head.position) are \(head.position): \(entries > Int(clamping: head.position) ? "keys that are no position of the log (another length, 0, or past the head) were added" : "positions are missing")")]
        }
    }

    /// Verifies an export file alone (no LMDB): one stored value per line.
    public static func verify(exportLines lines: [[UInt8]], until: UInt64 = .max,
                              checkpoint: (Checkpoint, String)? = nil) throws -> VerificationReport {
        func replay(_ mode: LedgerVerifier.Replay) throws -> LedgerVerifier {
            var verifier = LedgerVerifier(replay: mode)
            verifier.until = until
            verifier.pinnedPosition = checkpoint?.0.headPosition
            let pageSize = 10_000
            try ReadAhead.run(produce: { n -> [ExaminedValue]? in
                let start = n * pageSize
                guard start < lines.count else { return nil }
                return lines[start..<min(start + pageSize, lines.count)].map { ExaminedValue(key: nil, value: $0) }
            }) { page in
                for examined in page { verifier.add(examined) }
                return !(mode == .fast && verifier.needsFullReplay)
            }
            return verifier
        }
        var verifier = try replay(.fast)
        var violations = verifier.finish(head: nil)
        if verifier.needsFullReplay {
            verifier = try replay(.full)
            violations = verifier.finish(head: nil)
        }
        if let (cp, key) = checkpoint {
            violations += try cp.check(publicKeyPEM: key, hashAtPosition: verifier.pinnedHash, historyLength: verifier.eventCount)
        }
        return VerificationReport(events: verifier.eventCount, violations: violations)
    }

    /// Stored projections that differ from a fresh fold: every record database entry by entry,
    /// the audit and code indexes by their digests, and the checkpoint they claim to cover.
    ///
    /// `logIsSound`: no other violation was found. When there was one, the advice is not to
    /// `rebuild` at once, which would make the projections follow a log that is itself in question
    /// (and which refuses a log whose head is broken).
    func projectionMismatches(_ state: LedgerState, indexes: IndexDigests, logIsSound: Bool = true) throws -> [Violation] {
        // The fresh records are made on every core and summed (order-free digests, by database);
        // the stored ones are summed by a scan of each database. Only when the two differ are the
        // fresh records sorted and read against the stored ones one by one, to name what differs.
        let fresh = ProjectionStore.recordDigests(state)
        var problems: [Violation] = []
        let remedy = logIsSound ? "run `referral-ledger rebuild`"
            : "settle the log's own violations reported with this one first (a rebuild makes the projections follow the log as it stands)"
        func problem(_ rule: String, _ message: String) {
            if problems.count < 100 { problems.append(Violation(position: state.head, rule: rule, message: message)) }
        }
        try environment.read { txn in
            // A writer (a running server) may have moved on since the log was read: projections are
            // only comparable at the position they cover, which is read in this same transaction.
            let checkpoint = try ProjectionStore.checkpoint(txn)
            if let checkpoint, checkpoint.rebuilding || checkpoint.schema != ProjectionStore.schemaVersion {
                problem("projection.checkpoint", checkpoint.rebuilding
                    ? "a rebuild of the projections was interrupted: \(remedy)"
                    : "the projections are of another schema (\(checkpoint.schema)): \(remedy)")
                return
            }
            let covered = checkpoint?.position
            if covered != state.head {
                if try EventLog.head(txn).position == state.head {
                    problem("projection.checkpoint", "the projections say they cover position \(covered.map(String.init) ?? "none") but the log ends at \(state.head): \(remedy)")
                }
                return
            }
            let recordDatabases = [ProjectionStore.apps, ProjectionStore.programs, ProjectionStore.participants, ProjectionStore.rewards,
                                   ProjectionStore.userRewards, ProjectionStore.balances, ProjectionStore.users]
            var storedDigests: [String: IndexDigest] = [:]
            for database in recordDatabases {
                var digest = IndexDigest()
                try txn.scan(database) { k, v in
                    digest.add(key: k, value: v)
                    return true
                }
                storedDigests[database] = digest
            }
            let same = recordDatabases.allSatisfy { storedDigests[$0] == fresh[$0, default: IndexDigest()] }
            let expected = same ? [] : ProjectionStore.allRecords(state)
            var expectedCounts: [String: Int] = [:]
            for database in recordDatabases { expectedCounts[database] = fresh[database]?.count ?? 0 }
            for entry in expected {
                let equal = try txn.withValue(try txn.handle(entry.database), entry.key) { stored in
                    stored.map { $0.elementsEqual(entry.value) } ?? false
                }
                if !equal {
                    let name = entry.key.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/")
                    let kind = entry.database.replacingOccurrences(of: "proj_", with: "")
                    problem("projection.mismatch", "the stored \(kind) record \(name) differs from a fresh fold of the log: \(remedy)")
                }
            }
            for database in recordDatabases where try txn.count(database) != expectedCounts[database, default: 0] {
                problem("projection.extra", "\(database) holds \(try txn.count(database)) records, a fresh fold gives \(expectedCounts[database, default: 0]): \(remedy)")
            }
            for (database, digest) in [(ProjectionStore.audit, indexes.audit), (ProjectionStore.codes, indexes.codes)] {
                var stored = IndexDigest()
                // An audit block is summed offset by offset, as the log's events are; its offsets
                // must also come in log order (then equal sums mean equal blocks).
                var ordered = true
                try txn.scan(database) { k, v in
                    guard database == ProjectionStore.audit else {
                        stored.add(key: k, value: v)
                        return true
                    }
                    var previous = -1
                    for offset in v {
                        if Int(offset) <= previous || UInt64(offset) >= ProjectionStore.auditBlock { ordered = false }
                        previous = Int(offset)
                        stored.add(key: k, value: CollectionOfOne(offset))
                    }
                    if v.isEmpty { ordered = false }
                    return true
                }
                if stored != digest || !ordered {
                    let counted = database == ProjectionStore.audit ? "event references" : "entries"
                    problem("projection.mismatch", "the \(database.replacingOccurrences(of: "proj_", with: "")) index (\(stored.count) \(counted)\(ordered ? "" : ", not all in log order")) differs from the one the log calls for (\(digest.count) \(counted)): \(remedy)")
                }
            }
            // Not projections (`rebuild` keeps them), but they must agree with the log too: each
            // command `id` remembered with the events it appended, and each secret with its digest.
            var remembered = IndexDigest()
            try txn.scan(IdempotencyIndex.database) { k, v in
                remembered.add(key: k, value: IdempotencyIndex.span(ofStored: v) ?? [])
                return true
            }
            if remembered != indexes.idempotency {
                problem("idempotency.mismatch", "the idempotency index (\(remembered.count) ids) differs from the commands with an id in the log (\(indexes.idempotency.count)): a retry would not answer what the log holds; the index was altered or lost")
            }
            let secrets = try SecretStore.all(txn)
            for (app, appState) in state.apps {
                let stored = secrets[app] ?? [:]
                for key in Set(appState.settings.secretDigests.keys).union(stored.keys).sorted() {
                    let logged = appState.settings.secretDigests[key]
                    if stored[key].map({ SHA256.hex($0) }) != logged {
                        problem("secrets.mismatch", "the stored \(key) of app \(app) \(stored[key] == nil ? "is missing" : logged == nil ? "was never configured" : "does not match the SHA-256 the log recorded"): configure it again with app.configure")
                    }
                }
            }
            for app in secrets.keys where state.apps[app] == nil {
                problem("secrets.mismatch", "secrets are stored for app \(app), which the log does not have")
            }
        }
        return problems
    }
}

/// An order-free digest of an index's entries: their count and the wrapping sum of a hash of each
/// (key, value), so the entries the log calls for can be summed as the log is read and compared
/// with a scan of the stored index without holding either in memory.
///
/// The hash is the standard library's SipHash, keyed by its seed and by a salt drawn from the
/// system's random source when the process starts: both sums are made in the same `verify`, and
/// nobody who altered the stored index beforehand could know the salt to make a different index
/// sum the same (also when `SWIFT_DETERMINISTIC_HASHING` fixes the seed).
struct IndexDigest: Equatable {
    private(set) var count = 0
    private var sum: UInt64 = 0
    private static let salt = UInt64.random(in: .min ... .max)

    mutating func add(key: some Collection<UInt8>, value: some Collection<UInt8>) {
        var hasher = Hasher()
        hasher.combine(Self.salt)
        Self.combine(key, into: &hasher)
        hasher.combine(UInt8(0xFF))
        Self.combine(value, into: &hasher)
        sum &+= UInt64(UInt(bitPattern: hasher.finalize()))
        count += 1
    }

    private static func combine(_ bytes: some Collection<UInt8>, into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        if bytes.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for b in bytes { hasher.combine(b) }
        }
    }
}

/// The digests of the audit and code indexes of the events read so far (up to the verified head);
/// fed one page at a time, in order, from the read-ahead thread.
final class IndexDigests: @unchecked Sendable {
    private(set) var audit = IndexDigest()
    private(set) var codes = IndexDigest()
    /// The idempotency entries the log calls for: one per command with an `id` (app, id → where its
    /// events are and how many), summed when the command's last event is read.
    private(set) var idempotency = IndexDigest()
    private var openCommand: (key: [UInt8], first: UInt64, count: Int)?

    func add(_ page: [ExaminedValue], through last: UInt64) {
        var entries: [ProjectionStore.Entry] = []
        for examined in page {
            guard let event = examined.event, (examined.key ?? 0) <= last else { continue }
            // A command's events follow one another, the first carrying the command itself.
            let command = event.data["command"]
            if !command.isNull {
                finish()
                if let id = event.commandID, let app = command["app"].stringValue {
                    openCommand = (IdempotencyIndex.key(app: app, id: id), event.position, 1)
                }
            } else {
                openCommand?.count += 1
            }
            // The audit index is summed by event reference (its block's key, the event's offset):
            // no grouping into blocks here; the stored blocks are read back the same way.
            entries.removeAll(keepingCapacity: true)
            ProjectionStore.auditEntries(event, into: &entries)
            for e in entries {
                if e.database == ProjectionStore.codes { codes.add(key: e.key, value: e.value) } else { audit.add(key: e.key, value: e.value) }
            }
        }
    }

    /// Closes the command whose events were being counted (call once the log is read).
    func finish() {
        guard let (key, first, count) = openCommand else { return }
        idempotency.add(key: key, value: IdempotencyIndex.span(first: first, count: count))
        openCommand = nil
    }
}
