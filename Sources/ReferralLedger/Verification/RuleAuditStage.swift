import Dispatch
import LedgerStore

/// The rule audit of a replay, run beside it: the `RuleAuditor` folds its own model of the
/// history on a serial queue, batch after batch in log order, while the replay re-decides the
/// next events on the thread that feeds it. The two folds share nothing but the (immutable)
/// events, so the violations are the same as checking each event in line.
///
/// The feeding thread owns `batch`; the queue owns `auditor`. At most `batchesAhead` batches wait,
/// so a slow audit holds back the replay instead of piling up parsed events.
final class RuleAuditStage: @unchecked Sendable {
    private var auditor = RuleAuditor()
    private let queue = DispatchQueue(label: "referral-ledger.verify.rules", qos: .userInitiated)
    private static let batchSize = 2048
    private static let batchesAhead = 4
    private let room = DispatchSemaphore(value: RuleAuditStage.batchesAhead)
    private var batch: [(event: StoredEvent, unnormalized: String?)] = []

    init() { batch.reserveCapacity(Self.batchSize) }

    /// Queues the next event of the log (with what its identifiers are, when not NFC).
    func add(_ event: StoredEvent, unnormalized: String?) {
        batch.append((event, unnormalized))
        if batch.count >= Self.batchSize { flush() }
    }

    private func flush() {
        guard !batch.isEmpty else { return }
        let events = batch
        batch.removeAll(keepingCapacity: true)
        room.wait()
        queue.async { [self] in
            for (event, unnormalized) in events {
                if let unnormalized { auditor.flag(event, "identifier.not_nfc", unnormalized) }
                auditor.check(event)
            }
            room.signal()
        }
    }

    /// Every violation of the events added so far (waits for the audit to catch up).
    var violations: [Violation] {
        flush()
        return queue.sync { auditor.violations }
    }
}
