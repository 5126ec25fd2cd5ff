#if canImport(Glibc)
import Glibc
#endif

/// An exclusive lock on a data folder's `writer.lock`: one process writes a ledger at a time
/// (the in-memory decision state of a second writer would go stale). Released on close or exit.
public final class WriterLock: @unchecked Sendable {
    private let fd: Int32

    public struct Busy: Error, CustomStringConvertible {
        public let path: String
        public var description: String {
            "another process is writing to the ledger in \(path) (stop it, or send it the commands through its HTTP API)"
        }
    }

    public init(folder: String) throws {
        mkdir(folder, 0o755)
        let path = folder + "/writer.lock"
        fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Busy(path: folder) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            throw Busy(path: folder)
        }
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
