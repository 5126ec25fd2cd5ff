import LedgerCodec
#if canImport(Glibc)
import Glibc
#endif

/// An exclusive lock on a data folder's `writer.lock`: one process writes a ledger at a time
/// (the in-memory decision state of a second writer would go stale). Released on close or exit.
public final class WriterLock: @unchecked Sendable {
    /// -1 once released.
    private var fd: Int32

    /// The folder is already open for writing, by another process or by another `Ledger` of this one.
    public struct Busy: CodedError, Sendable {
        public let path: String
        /// `ledger_busy`.
        public var errorCode: String { "ledger_busy" }
        public var message: String {
            "the ledger in \(path) is already open for writing, by another process or another Ledger in this one (stop it, send it the commands through its HTTP API, or share the one Ledger; in this process, close() the other Ledger or let its last reference go, a GroupCommitter's or DeliveryWorker's included)"
        }
    }

    public init(folder: String) throws {
        try LMDBError.createFolder(folder)
        let path = folder + "/writer.lock"
        let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw LMDBError(code: errno, message: "cannot open \(path): \(String(cString: strerror(errno)))"
                            + (errno == EACCES || errno == EROFS ? " (check the data folder's permissions)" : ""))
        }
        // A writer holds the lock for as long as it runs; `isHeld` (a `status`, a query's message)
        // holds it shared for an instant: a few tries over a tenth of a second tell the two apart.
        var tries = 0
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            tries += 1
            guard errno == EWOULDBLOCK || errno == EINTR, tries < 50 else {
                close(fd)
                throw Busy(path: folder)
            }
            usleep(2_000)
        }
        // Only a lock actually held is kept: `deinit` (which unlocks and closes) runs for it alone.
        self.fd = fd
    }

    /// Whether a process holds the folder's writer lock now (without taking it).
    public static func isHeld(folder: String) -> Bool {
        let fd = open(folder + "/writer.lock", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        guard flock(fd, LOCK_SH | LOCK_NB) == 0 else { return errno == EWOULDBLOCK }
        flock(fd, LOCK_UN)
        return false
    }

    /// Lets go of the lock now rather than at deinit. Not thread-safe: its owner serialises it.
    public func release() {
        guard fd >= 0 else { return }
        flock(fd, LOCK_UN)
        close(fd)
        fd = -1
    }

    deinit { release() }
}
