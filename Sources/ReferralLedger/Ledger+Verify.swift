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
        let compared: Set<String> = [ProjectionStore.apps, ProjectionStore.programs, ProjectionStore.participants,
                                     ProjectionStore.rewards, ProjectionStore.balances]
        // The fresh records are made on every core, then read against the stored ones.
        let expected = ProjectionStore.records(ProjectionStore.everything(state), state).filter { compared.contains($0.database) }
        var problems: [Violation] = []
        try environment.read { txn in
            // A writer (a running server) may have moved on since the log was read: projections are
            // only comparable at the position they cover, which is read in this same transaction.
            guard try ProjectionStore.checkpoint(txn)?.position == state.head else { return }
            var expectedCounts: [String: Int] = [:]
            for entry in expected {
                expectedCounts[entry.database, default: 0] += 1
                let same = try txn.withValue(try txn.handle(entry.database), entry.key) { stored in
                    stored.map { $0.elementsEqual(entry.value) } ?? false
                }
                if !same, problems.count < 100 {
                    let name = entry.key.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/")
                    let kind = entry.database.replacingOccurrences(of: "proj_", with: "")
                    problems.append(Violation(position: state.head, rule: "projection.mismatch",
                                              message: "the stored \(kind) record \(name) differs from a fresh fold of the log: run `referral-ledger rebuild`"))
                }
            }
            for database in compared.sorted() where try txn.count(database) != expectedCounts[database, default: 0] {
                problems.append(Violation(position: state.head, rule: "projection.extra",
                                          message: "\(database) holds \(try txn.count(database)) records, a fresh fold gives \(expectedCounts[database, default: 0]): run `referral-ledger rebuild`"))
            }
        }
        return problems
    }
}
