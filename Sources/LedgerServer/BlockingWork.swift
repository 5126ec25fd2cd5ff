import Dispatch
import Synchronization

/// Runs work that may block (a ledger call that takes the writer's lock) on a GCD queue of its
/// own, so it never holds one of the few threads of Swift's cooperative pool, which every
/// request handler shares.
enum BlockingWork {
    private static let queue = DispatchQueue(label: "ledger-server.blocking", attributes: .concurrent)
    /// Replays of the log (`as_of` queries) run one at a time: each folds the history into a state
    /// of its own, and a burst of them must not hold that many states at once.
    private static let replays = DispatchQueue(label: "ledger-server.replays")

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Replays running or waiting; past `maxReplays` a new one is refused (nil), so a client that
    /// sends replays and hangs up cannot queue up work that holds every later replay back.
    private static let replaysInLine = Mutex(0)
    static let maxReplays = 4
    static var replaysWaitingOrRunning: Int { replaysInLine.withLock { $0 } }

    /// Runs a replay on the replay queue; nil (not run) when `maxReplays` are already in line.
    static func replay<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T? {
        let admitted = replaysInLine.withLock { count -> Bool in
            guard count < maxReplays else { return false }
            count += 1
            return true
        }
        guard admitted else { return nil }
        return try await withCheckedThrowingContinuation { continuation in
            replays.async {
                defer { replaysInLine.withLock { $0 -= 1 } }
                continuation.resume(with: Result { try body() })
            }
        }
    }
}
