import Dispatch

/// Releases values on a utility queue instead of the calling thread: for a thread the ledger waits
/// for, freeing what it is done with is work it need not do — when it did not make those values
/// itself. (The thread that folds a log frees pages of events parsed on other threads. The writer
/// frees its own batch: released elsewhere, its memory no longer returns to the writer's
/// allocation cache, and a try of that gained nothing.)
enum Disposal {
    private static let queue = DispatchQueue(label: "referral-ledger.disposal", qos: .utility)

    /// Takes over `value` (pass it with `consume`, or as the caller's last use of it) and lets it
    /// go on the disposal queue.
    static func release<T: Sendable>(_ value: consuming T) {
        let value = consume value
        queue.async { withExtendedLifetime(value) {} }
    }
}
