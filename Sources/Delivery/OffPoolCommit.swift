import Dispatch
import LedgerCodec
import ReferralLedger
import Synchronization

/// The delivery worker's and the mail sender's commits. They run on a GCD queue of their own:
/// waiting for the writer's lock must not hold one of the few threads of Swift's cooperative
/// pool (inside `serve`, the request handlers share them).
///
/// Group commit: the commands that arrive for a ledger while its previous commit runs wait, and
/// are then decided together in one write transaction (one sync of the disk), each answered its
/// own result, in the order they came. A worker with calls in flight records their starts and
/// outcomes a handful at a time instead of one sync each; a lone command commits at once.
enum OffPoolCommit {
    private static let queue = DispatchQueue(label: "delivery.commits")

    private struct Waiting: Sendable {
        let command: JSONValue
        let continuation: CheckedContinuation<CommandResult, any Error>
    }

    /// The commands waiting for the next commit, by ledger.
    private static let waiting = Mutex<[ObjectIdentifier: (ledger: Ledger, commands: [Waiting])]>([:])

    /// Most commands in one transaction (a pass may hand many outcomes in at once).
    static let maxGroup = 1000

    static func submit(_ command: JSONValue, to ledger: Ledger) async throws -> CommandResult {
        try await withCheckedThrowingContinuation { continuation in
            let id = ObjectIdentifier(ledger)
            let first = waiting.withLock { waiting -> Bool in
                let item = Waiting(command: command, continuation: continuation)
                if waiting[id] == nil {
                    waiting[id] = (ledger, [item])
                    return true
                }
                waiting[id]!.commands.append(item)
                return false
            }
            // The first command of a group schedules its commit; the rest join it until it runs.
            if first { queue.async { commitWaiting(id) } }
        }
    }

    private static func commitWaiting(_ id: ObjectIdentifier) {
        // Takes the group (at most `maxGroup`; what is left of a larger one is committed next).
        let taken = waiting.withLock { waiting -> (ledger: Ledger, group: [Waiting], more: Bool)? in
            guard let entry = waiting[id] else { return nil }
            guard entry.commands.count > maxGroup else {
                waiting[id] = nil
                return (entry.ledger, entry.commands, false)
            }
            waiting[id]!.commands.removeFirst(maxGroup)
            return (entry.ledger, Array(entry.commands.prefix(maxGroup)), true)
        }
        guard let (ledger, group, more) = taken else { return }
        if more { queue.async { commitWaiting(id) } }
        do {
            let results = try ledger.submit(group.map { CommandInput.value($0.command) })
            for (item, result) in zip(group, results) { item.continuation.resume(returning: result) }
        } catch {
            // Nothing of the transaction was recorded: every command of it hears why.
            for item in group { item.continuation.resume(throwing: error) }
        }
    }
}
