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
        if isClean { return "verified \(events) events: the chain is intact and every rule held" }
        return violations.map { "position \($0.position)  \($0.rule)  \($0.message)" }.joined(separator: "\n")
            + "\n\(violations.count) violation(s) in \(events) events"
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
        var verifier = try replayLog(.fast, until: until, pinned: checkpoint?.0.headPosition, head: head, progress: progress)
        var violations = verifier.finish(head: head)
        if verifier.needsFullReplay {
            verifier = try replayLog(.full, until: until, pinned: checkpoint?.0.headPosition, head: head, progress: progress)
            violations = verifier.finish(head: head)
        }
        if until >= head.position, violations.isEmpty {
            violations += try projectionMismatches(verifier.recorded)
        }
        if let (cp, key) = checkpoint {
            violations += try cp.check(publicKeyPEM: key, hashAtPosition: verifier.pinnedHash, historyLength: verifier.eventCount)
        }
        return VerificationReport(events: verifier.eventCount, violations: violations)
    }

    private func replayLog(_ replay: LedgerVerifier.Replay, until: UInt64, pinned: UInt64?, head: ChainHead,
                           progress: ProgressHandler?) throws -> LedgerVerifier {
        var verifier = LedgerVerifier(replay: replay)
        verifier.until = until
        verifier.pinnedPosition = pinned
        let total = min(until, head.position)
        // One event past the cut tells the verifier whether the cut splits a command.
        let pages = LogPages(environment: environment, through: total + 1)
        try ReadAhead.run(produce: { _ in try pages.next()?.map { ExaminedValue(key: $0.0, value: $0.1) } }) { page in
            for examined in page { verifier.add(examined) }
            if let last = page.last?.key { progress?(min(last, total), total) }
            return !(replay == .fast && verifier.needsFullReplay)
        }
        return verifier
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

    /// Stored projection records that differ from the records of a fresh fold.
    func projectionMismatches(_ state: LedgerState) throws -> [Violation] {
        var problems: [Violation] = []
        func compare(_ db: String, _ key: [UInt8], _ expected: JSONValue, _ what: String, _ txn: LMDBTransaction) throws {
            let stored = try txn.get(db, key)
            if stored != expected.bytes, problems.count < 100 {
                problems.append(Violation(position: state.head, rule: "projection.mismatch",
                                          message: "the stored \(what) differs from a fresh fold of the log: run `referral-ledger rebuild`"))
            }
        }
        try environment.read { txn in
            // A writer (a running server) may have moved on since the log was read: projections are
            // only comparable at the position they cover, which is read in this same transaction.
            guard try ProjectionStore.checkpoint(txn)?.position == state.head else { return }
            var expectedCounts: [String: Int] = [:]
            for (name, a) in state.apps {
                try compare(ProjectionStore.apps, ProjectionStore.key(name), Records.app(a), "app \(name)", txn)
                expectedCounts[ProjectionStore.apps, default: 0] += 1
                for (key, p) in a.programs {
                    try compare(ProjectionStore.programs, ProjectionStore.key(name, key), Records.program(a, p), "program \(name)/\(key)", txn)
                    expectedCounts[ProjectionStore.programs, default: 0] += 1
                    for user in Set(p.enrollmentOrder).union(p.inviterOrder).union(p.invites.keys) {
                        try compare(ProjectionStore.participants, ProjectionStore.key(name, key, user), Records.participant(a, p, user),
                                    "participant \(user) of \(name)/\(key)", txn)
                        expectedCounts[ProjectionStore.participants, default: 0] += 1
                    }
                    for (id, r) in p.rewards {
                        try compare(ProjectionStore.rewards, ProjectionStore.key(name, id), Records.reward(r), "reward \(id)", txn)
                        expectedCounts[ProjectionStore.rewards, default: 0] += 1
                    }
                }
                for (user, b) in a.points {
                    try compare(ProjectionStore.balances, ProjectionStore.key(name, user), Records.balance(b), "balance of \(user)", txn)
                    expectedCounts[ProjectionStore.balances, default: 0] += 1
                }
            }
            for (db, count) in expectedCounts where try txn.count(db) != count {
                problems.append(Violation(position: state.head, rule: "projection.extra",
                                          message: "\(db) holds \(try txn.count(db)) records, a fresh fold gives \(count): run `referral-ledger rebuild`"))
            }
        }
        return problems
    }
}
