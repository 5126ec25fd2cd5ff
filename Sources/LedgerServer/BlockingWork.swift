import Dispatch

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

    static func replay<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            replays.async { continuation.resume(with: Result { try body() }) }
        }
    }
}
