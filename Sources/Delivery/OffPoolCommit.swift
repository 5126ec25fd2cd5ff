import Dispatch
import LedgerCodec
import ReferralLedger

/// The delivery worker's and the mail sender's commits. They run on a GCD queue of their own:
/// waiting for the writer's lock must not hold one of the few threads of Swift's cooperative
/// pool (inside `serve`, the request handlers share them).
enum OffPoolCommit {
    private static let queue = DispatchQueue(label: "delivery.commits")

    static func submit(_ command: JSONValue, to ledger: Ledger) async throws -> CommandResult {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try ledger.submit(command) }) }
        }
    }
}
