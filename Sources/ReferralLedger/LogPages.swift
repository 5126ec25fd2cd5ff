import LedgerStore

/// Reads the log page after page (each in its own short read transaction), from position 1 up to
/// `through`; pages follow the keys present, so a gap in the log is read past, not stopped at.
/// Called from one thread at a time (the read-ahead thread).
final class LogPages: @unchecked Sendable {
    private let environment: LMDBEnvironment
    private let through: UInt64
    private var nextPosition: UInt64
    let pageSize: Int

    init(environment: LMDBEnvironment, from: UInt64 = 1, through: UInt64, pageSize: Int = 10_000) {
        self.environment = environment
        self.through = through
        self.nextPosition = from
        self.pageSize = pageSize
    }

    /// The next page of (position, value), or nil after the last.
    func next() throws -> [(UInt64, [UInt8])]? {
        guard nextPosition <= through else { return nil }
        let page = try environment.read { try EventLog.values($0, from: nextPosition, limit: Int(min(UInt64(pageSize), through - nextPosition + 1))) }
        guard let last = page.last else { return nil }
        guard last.0 < through else { nextPosition = .max; return page.filter { $0.0 <= through } }
        nextPosition = last.0 + 1
        return page
    }
}
