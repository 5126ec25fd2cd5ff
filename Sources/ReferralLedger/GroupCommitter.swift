import Foundation
import LedgerCodec

/// Group commit across callers: commands from many concurrent requests are queued in arrival
/// order, and one writer thread decides whatever is queued (up to `batchLimit`) in one write
/// transaction, then answers each caller once that transaction committed. No transaction is
/// ever held across an `await`: callers suspend, the writer thread does the LMDB work.
public final class GroupCommitter: @unchecked Sendable {
    private struct Pending {
        var lines: [CommandInput]
        var reply: @Sendable (Result<[CommandResult], Error>) -> Void
    }

    public let ledger: Ledger
    public let batchLimit: Int
    private let condition = NSCondition()
    private var queue: [Pending] = []
    private var stopping = false
    private var stopped = false
    private var thread: Thread?

    public init(ledger: Ledger, batchLimit: Int = 1000) {
        self.ledger = ledger
        self.batchLimit = batchLimit
        let thread = Thread { [unowned self] in self.run() }
        thread.name = "ledger-writer"
        self.thread = thread
        thread.start()
    }

    /// Decides `lines` (one command each) and answers their results, in order, once durable.
    public func submit(_ lines: [[UInt8]]) async throws -> [CommandResult] {
        try await submit(lines.map(CommandInput.text))
    }

    /// The same for commands given as text or already parsed.
    public func submit(_ inputs: [CommandInput]) async throws -> [CommandResult] {
        try await withCheckedThrowingContinuation { continuation in
            enqueue(inputs) { continuation.resume(with: $0) }
        }
    }

    /// The same, with a callback (called on the writer thread).
    public func enqueue(_ lines: [CommandInput], reply: @escaping @Sendable (Result<[CommandResult], Error>) -> Void) {
        condition.lock()
        if stopping {
            condition.unlock()
            reply(.failure(LedgerError(code: "shutting_down", message: "the ledger is shutting down; retry against the next server")))
            return
        }
        queue.append(Pending(lines: lines, reply: reply))
        condition.signal()
        condition.unlock()
    }

    /// Stops taking commands, commits everything already queued, and waits for the writer to end.
    public func drain() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while !stopped { condition.wait() }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            if queue.isEmpty && stopping {
                stopped = true
                condition.broadcast()
                condition.unlock()
                return
            }
            var batch: [Pending] = []
            var count = 0
            while let next = queue.first, batch.isEmpty || count + next.lines.count <= batchLimit {
                batch.append(queue.removeFirst())
                count += next.lines.count
            }
            condition.unlock()
            let lines = batch.flatMap(\.lines)
            do {
                let results = try ledger.submit(lines)
                var offset = 0
                for pending in batch {
                    pending.reply(.success(Array(results[offset..<offset + pending.lines.count])))
                    offset += pending.lines.count
                }
            } catch {
                for pending in batch { pending.reply(.failure(error)) }
            }
        }
    }
}
