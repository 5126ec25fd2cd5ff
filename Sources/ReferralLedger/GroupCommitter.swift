import Foundation
import LedgerCodec
import ReferralRules

/// Group commit across callers: commands from many concurrent requests are queued in arrival
/// order, and one writer thread decides whatever is queued (up to `batchLimit`) in one write
/// transaction, then answers each caller once that transaction committed. No transaction is
/// ever held across an `await`: callers suspend, the writer thread does the LMDB work.
///
/// `drain()` stops taking commands, commits what is queued and ends the writer thread; dropping
/// the last reference to the committer does the same, so its `Ledger` (and the folder's writer
/// lock) is released when both are dropped.
public final class GroupCommitter: Sendable {
    /// The ledger every queued command goes to.
    public let ledger: Ledger
    /// At most this many commands share one write transaction (1 to 10,000).
    public let batchLimit: Int
    private let writer: Writer

    /// Starts the writer thread for `ledger`; the ledger should then be written only through it.
    /// `batchLimit` is brought into 1…10,000 (a larger transaction only holds the next longer).
    public init(ledger: Ledger, batchLimit: Int = 1000) {
        self.ledger = ledger
        self.batchLimit = min(max(batchLimit, 1), 10_000)
        writer = Writer(ledger: ledger, batchLimit: self.batchLimit)
    }

    deinit { writer.drain() }

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

    /// A command built in code (see `Ledger.submit(_:app:at:id:)`), answered once durable.
    public func submit(_ command: Command.Body, app: String, at: Timestamp? = nil, id: String? = nil) async throws -> CommandResult {
        try await submit([.value(Command.json(command, app: app, at: at, id: id))])[0]
    }

    /// The same, with a callback (called on the writer thread). The commands are parsed and read
    /// on the calling thread (`Ledger.prepare`) before they are queued: the writer only decides.
    public func enqueue(_ lines: [CommandInput], reply: @escaping @Sendable (Result<[CommandResult], Error>) -> Void) {
        writer.enqueue(lines, reply: reply)
    }

    /// Stops taking commands and refuses those queued but not yet being decided: each waiting caller
    /// gets `shutting_down`, and none of those commands is applied. The batch being decided, if
    /// any, is committed and answered as usual. For a shutdown that cannot wait for the whole
    /// queue; `drain()` then ends the writer.
    public func refuseQueued() { writer.refuseQueued() }

    /// Stops taking commands, commits everything already queued, and waits for the writer to end.
    /// Later submissions fail with `shutting_down`. Safe to call more than once.
    public func drain() { writer.drain() }

    /// The queue and the thread that empties it. The thread holds the writer (not the committer),
    /// so the committer can go away while it runs.
    private final class Writer: @unchecked Sendable {
        private struct Pending {
            /// Read on the caller's thread (many at once in a server), so the writer only decides.
            var lines: Ledger.PreparedCommands
            var reply: @Sendable (Result<[CommandResult], Error>) -> Void
        }

        /// Let go when the thread ends, so the ledger's life does not depend on when the
        /// finished `Thread` releases its closure.
        private var ledger: Ledger?
        private let batchLimit: Int
        private let condition = NSCondition()
        private var queue: [Pending] = []
        private var stopping = false
        private var stopped = false
        private var thread: pthread_t?

        init(ledger: Ledger, batchLimit: Int) {
            self.ledger = ledger
            self.batchLimit = batchLimit
            let thread = Thread { self.run() }
            thread.name = "ledger-writer"
            thread.start()
        }

        func enqueue(_ lines: [CommandInput], reply: @escaping @Sendable (Result<[CommandResult], Error>) -> Void) {
            let prepared = Ledger.prepare(lines)
            condition.lock()
            if stopping {
                condition.unlock()
                reply(.failure(Self.shuttingDown))
                return
            }
            queue.append(Pending(lines: prepared, reply: reply))
            condition.signal()
            condition.unlock()
        }

        func refuseQueued() {
            condition.lock()
            stopping = true
            let refused = queue
            queue.removeAll()
            condition.broadcast()
            condition.unlock()
            for pending in refused { pending.reply(.failure(Self.shuttingDown)) }
        }

        static let shuttingDown = LedgerError(code: "shutting_down", message: "the ledger is shutting down; retry against the next server")

        func drain() {
            condition.lock()
            stopping = true
            condition.broadcast()
            // On the writer thread itself (a reply that dropped the last reference) there is
            // nothing to wait for: the loop ends after this batch.
            if let thread, pthread_equal(thread, pthread_self()) != 0 {
                condition.unlock()
                return
            }
            while !stopped { condition.wait() }
            condition.unlock()
        }

        private func run() {
            condition.lock()
            thread = pthread_self()
            condition.unlock()
            while true {
                condition.lock()
                while queue.isEmpty && !stopping { condition.wait() }
                if queue.isEmpty && stopping {
                    ledger = nil
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
                do {
                    let results = try ledger!.submit(Ledger.PreparedCommands.joined(batch.map(\.lines)))
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
}
