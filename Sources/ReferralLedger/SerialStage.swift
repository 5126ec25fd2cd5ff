import Foundation

/// A pipeline stage on a thread of its own: items handed to `submit` are worked through in order,
/// at most `depth` of them queued or in work (`submit` blocks beyond that, so memory stays bounded). The
/// first error stops the work: the items after it are dropped, and the error is rethrown by the
/// next `submit` or by `finish`.
///
/// `rebuild` writes the audit index with one: the fold goes on while the previous pages' entries
/// are merged and put in their own write transactions.
final class SerialStage<Item: Sendable>: @unchecked Sendable {
    private let queue: DispatchQueue
    private let room: DispatchSemaphore
    private let lock = NSLock()
    private var failure: (any Error)?
    private let work: @Sendable (Item) throws -> Void

    init(label: String, depth: Int, _ work: @escaping @Sendable (Item) throws -> Void) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
        room = DispatchSemaphore(value: depth)
        self.work = work
    }

    private var firstFailure: (any Error)? {
        lock.lock()
        defer { lock.unlock() }
        return failure
    }

    /// Queues `item`, waiting while `depth` items are queued or in work; throws the stage's first error.
    func submit(_ item: Item) throws {
        if let failure = firstFailure { throw failure }
        room.wait()
        queue.async { [self] in
            defer { room.signal() }
            guard firstFailure == nil else { return }
            do { try work(item) } catch {
                lock.lock()
                if failure == nil { failure = error }
                lock.unlock()
            }
        }
    }

    /// Waits until every queued item is worked through (or dropped after an error).
    func waitUntilIdle() {
        queue.sync {}
    }

    /// Waits for the queued items and rethrows the stage's first error.
    func finish() throws {
        waitUntilIdle()
        if let failure = firstFailure { throw failure }
    }
}
