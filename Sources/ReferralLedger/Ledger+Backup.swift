import Foundation
import LedgerStore

/// Hot backups: a consistent copy of the whole ledger (log, projections, idempotency index,
/// secrets) while writers go on, ready to be opened as a data folder.
extension Ledger {
    /// Copies the ledger, as one read transaction sees it, into the folder `target` (created; it may
    /// exist only as an empty folder), compacted, and answers the copy's head. The copy is written
    /// beside `target` under a temporary name, synced, checked (its head is its last event) and then
    /// renamed into place: `target` holds a whole ledger or nothing. Its `data.mdb` is readable by
    /// its owner only (it holds the apps' secrets).
    public func backup(to target: String) throws -> ChainHead {
        let target = target.count > 1 && target.hasSuffix("/") ? String(target.dropLast()) : target
        try Self.requireEmptyOrMissing(target)
        let url = URL(fileURLWithPath: target)
        let parent = url.deletingLastPathComponent().path
        let temporary = parent + "/." + url.lastPathComponent + ".partial-\(getpid())"
        Self.removeAbandonedBackups(of: url)
        try? FileManager.default.removeItem(atPath: temporary)
        guard mkdir(temporary, 0o700) == 0 else {
            throw LedgerError(code: "unwritable_output", message: "cannot create \(temporary): \(String(cString: strerror(errno))) (check that \(parent) exists and is writable)")
        }
        var done = false
        defer { if !done { try? FileManager.default.removeItem(atPath: temporary) } }
        try environment.copy(toFolder: temporary)
        let file = temporary + "/data.mdb"
        chmod(file, 0o600)
        try Self.sync(file, "the copy")
        let head = try Self.confirmedHead(ofCopy: temporary)
        unlink(temporary + "/lock.mdb")  // left by the check; the copy's first opener makes its own
        guard rename(temporary, target) == 0 else {
            throw LedgerError(code: "unwritable_output", message: "cannot move the copy to \(target): \(String(cString: strerror(errno)))"
                              + (errno == ENOTEMPTY || errno == EEXIST ? " (something was written there meanwhile)" : ""))
        }
        done = true
        try Self.sync(parent, "the folder holding the backup")
        return head
    }

    /// The copy's head, confirmed against its last event; the copy is closed again on return.
    private static func confirmedHead(ofCopy folder: String) throws -> ChainHead {
        let copy = try Ledger(readingFolder: folder, forQueries: false)
        return try copy.confirmedHead()
    }

    private static func requireEmptyOrMissing(_ target: String) throws {
        var info = stat()
        guard lstat(target, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFDIR, (try? FileManager.default.contentsOfDirectory(atPath: target))?.isEmpty == true else {
            throw LedgerError(code: "backup_target_exists", message: "\(target) exists and is not an empty folder; give a new folder for the backup (nothing was written)")
        }
    }

    /// Temporary copies left by backups that were killed (their process is gone).
    private static func removeAbandonedBackups(of target: URL) {
        let parent = target.deletingLastPathComponent().path
        let prefix = "." + target.lastPathComponent + ".partial-"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [] where name.hasPrefix(prefix) {
            guard let pid = Int32(name.dropFirst(prefix.count)), pid != getpid(), kill(pid, 0) != 0, errno == ESRCH else { continue }
            try? FileManager.default.removeItem(atPath: parent + "/" + name)
        }
    }

    private static func sync(_ path: String, _ what: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw LedgerError(code: "unwritable_output", message: "cannot open \(what) (\(path)) to sync it: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw LedgerError(code: "unwritable_output", message: "cannot sync \(what) (\(path)): \(String(cString: strerror(errno)))") }
    }
}
