import Dispatch

/// Runs work that may block (a ledger call that takes the writer's lock) on a GCD queue of its
/// own, so it never holds one of the few threads of Swift's cooperative pool, which every
/// request handler shares.
enum BlockingWork {
    private static let queue = DispatchQueue(label: "ledger-server.blocking", attributes: .concurrent)

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}
