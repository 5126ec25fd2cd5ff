import Foundation
import LedgerCodec
import LedgerStore

/// What `backup` made: the copy's head, and how its projections stand.
public struct BackupSummary: Sendable, Equatable {
    /// The copy's head (its last event, confirmed by its hash).
    public var head: ChainHead
    /// `current` when the copy's projections are at its head; otherwise (a copy taken while a
    /// rebuild ran) `rebuilding` or the like: the copy's first writer, or `rebuild`, rebuilds them.
    public var projections: String
    /// The size of the copy's `data.mdb`.
    public var bytes: Int
    /// The position of the writer's state snapshot copied beside it (its first writer folds only
    /// the events after it), or nil when there was none this build could vouch for at or before
    /// the copy's head (its first writer then folds the whole log once).
    public var stateSnapshot: UInt64?
}

/// Hot backups: a consistent copy of the whole ledger (log, projections, idempotency index,
/// secrets) while writers go on, ready to be opened as a data folder.
extension Ledger {
    /// Copies the ledger, as one read transaction sees it, compacted, into the folder `target`:
    /// a new folder, or an empty one (a mounted backup volume, say, which keeps its owner and mode).
    /// The copy is made under a temporary name on the target's own disk (beside a new folder,
    /// inside an empty one), synced and checked (its head is its last event), then renamed into
    /// place: `target` holds a whole ledger or nothing. Its `data.mdb` is readable by its owner only
    /// (it holds the apps' secrets). The writer's state snapshot goes with it when it names an
    /// event of the copy (a shortcut for the copy's first open; the backup never fails for it).
    public func backup(to requested: String) throws -> BackupSummary {
        var target = requested
        while target.count > 1 && target.hasSuffix("/") { target.removeLast() }
        let targetExists = try Self.requireBackupTarget(target, ledgerFolder: folder)
        // An existing (empty) folder is filled from inside, so that its mount, owner and mode stay.
        let workFolder = targetExists ? target : URL(fileURLWithPath: target).deletingLastPathComponent().path
        // `backup --out backups/2026-03-02` in a folder without `backups` yet: its parents are made.
        if !targetExists, !FileManager.default.fileExists(atPath: workFolder) {
            // Each missing folder made in turn, so a refusal names the one that failed and why.
            var made = workFolder.hasPrefix("/") ? "" : "."
            for part in workFolder.split(separator: "/") {
                made += "/" + part
                guard mkdir(made, 0o777) != 0, errno != EEXIST else { continue }
                throw LedgerError(code: "unwritable_output", message: "cannot make the folder \(made) for the backup: \(String(cString: strerror(errno)))")
            }
        }
        Self.removeAbandonedBackups(in: workFolder)
        let temporary = workFolder + "/" + Self.partialPrefix + "\(getpid())-\(UInt32.random(in: 0 ... .max))"
        guard mkdir(temporary, 0o700) == 0 else {
            throw LedgerError(code: "unwritable_output", message: "cannot write the backup in \(workFolder): \(String(cString: strerror(errno)))")
        }
        var finished = false
        defer { if !finished { try? FileManager.default.removeItem(atPath: temporary) } }
        // Held while the copy is made: a backup finding this folder can tell it is not abandoned.
        let lock = open(temporary + "/" + Self.lockName, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard lock >= 0 else {
            throw LedgerError(code: "unwritable_output", message: "cannot write the backup in \(workFolder): \(String(cString: strerror(errno)))")
        }
        defer { Glibc.close(lock) }
        guard flock(lock, LOCK_EX) == 0 else {
            throw LedgerError(code: "unwritable_output", message: "cannot lock the backup's temporary folder in \(workFolder): \(String(cString: strerror(errno)))")
        }
        // Opened before the copy's read transaction begins: the event it names is in the copy, and
        // a newer snapshot saved meanwhile does not replace it.
        let snapshotFile = StateSnapshot.OpenFile(folder: folder)
        if let failure = Self.copy(environment, to: temporary) {
            throw LedgerError(code: "unwritable_output", message: "cannot write the backup to \(target): \(failure)")
        }
        let file = temporary + "/data.mdb"
        chmod(file, 0o600)
        try Self.sync(file, "the copy")
        let (head, projections, snapshotFits) = try Self.checkCopy(temporary, snapshot: snapshotFile?.meta)
        var snapshot: UInt64?
        if let snapshotFile, snapshotFits, StateSnapshot.copy(snapshotFile, to: temporary) { snapshot = snapshotFile.meta.position }
        var info = stat()
        let bytes = stat(file, &info) == 0 ? Int(info.st_size) : 0
        if targetExists {
            // A link, not a rename: it refuses to replace a data.mdb that appeared meanwhile. A disk
            // without hard links (FAT, some network mounts) gets a rename, after a last look.
            let placed = target + "/data.mdb"
            if link(file, placed) != 0 {
                guard [EPERM, EOPNOTSUPP, ENOSYS, EMLINK].contains(errno) else { throw Self.unmovable(target) }
                guard access(placed, F_OK) != 0 else {
                    errno = EEXIST
                    throw Self.unmovable(target)
                }
                guard rename(file, placed) == 0 else { throw Self.unmovable(target) }
            }
            // Placed after the data file, whose log it names (alone it would be passed over), and
            // like it never over a file that appeared meanwhile (else left out).
            if snapshot != nil {
                let (from, to) = (StateSnapshot.path(temporary), StateSnapshot.path(target))
                if link(from, to) != 0 && (access(to, F_OK) == 0 || rename(from, to) != 0) { snapshot = nil }
            }
        } else {
            unlink(temporary + "/" + Self.lockName)
            try Self.sync(temporary, "the copy's folder")
            guard rename(temporary, target) == 0 else { throw Self.unmovable(target) }
        }
        finished = true
        if targetExists { try? FileManager.default.removeItem(atPath: temporary) }
        try Self.sync(targetExists ? target : workFolder, "the folder holding the backup", done: true)
        return BackupSummary(head: head, projections: projections, bytes: bytes, stateSnapshot: snapshot)
    }

    /// Copies the environment into `folder`; answers what went wrong, if anything.
    private static func copy(_ environment: LMDBEnvironment, to folder: String) -> String? {
        do {
            try environment.copy(toFolder: folder)
            return nil
        } catch {
            return error.message
        }
    }

    private static let partialPrefix = ".referral-ledger-backup.partial-"
    private static let lockName = "backup.lock"

    /// The copy's head, confirmed against its last event, how its projections stand, and whether
    /// its log holds the event a state snapshot names. Opened without LMDB's lock file (nobody else
    /// uses the copy yet): the check writes nothing to the disk, which may be full. The copy is
    /// closed again on return.
    private static func checkCopy(_ folder: String, snapshot: StateSnapshot.Meta?) throws -> (ChainHead, String, Bool) {
        let copy = try LMDBEnvironment.open(path: folder, databases: databases, readOnly: true, withoutLock: true)
        return try copy.read { txn in
            guard let head = try EventLog.confirmedHead(txn) else {
                throw LedgerError(code: "head_mismatch", message: "the copy's head is not its last event: the ledger may be damaged; nothing was kept (run `referral-ledger verify`)")
            }
            let fits = try snapshot.map { try StateSnapshot.names($0, txn) } ?? false
            return (head, ProjectionStore.state(try ProjectionStore.checkpoint(txn), head: head.position), fits)
        }
    }

    /// `path` resolved (links and `..` followed) as far as it exists, the missing rest appended.
    private static func resolvedPlace(_ path: String) -> String? {
        var existing = URL(fileURLWithPath: path).standardized
        var missing: [String] = []
        while !FileManager.default.fileExists(atPath: existing.path) {
            guard existing.path != "/" else { return nil }
            missing.insert(existing.lastPathComponent, at: 0)
            existing.deleteLastPathComponent()
        }
        guard let resolved = LedgerFolder.resolvedPath(existing.path) else { return nil }
        return ([resolved == "/" ? "" : resolved] + missing).joined(separator: "/")
    }

    /// Whether `target` exists (as an empty folder); throws when it cannot take a backup.
    private static func requireBackupTarget(_ target: String, ledgerFolder: String) throws -> Bool {
        // Not inside the ledger's own folder: a copy there (with the secrets) goes with the folder.
        // (Where the parent folders do not exist yet, the nearest one that does decides.)
        if let ledger = LedgerFolder.resolvedPath(ledgerFolder),
           let place = resolvedPlace(target),
           place == ledger || place.hasPrefix(ledger.hasSuffix("/") ? ledger : ledger + "/") {
            throw LedgerError(code: "backup_target_exists", message: "\(target) is in the ledger's own folder; give a folder outside it (nothing was written)")
        }
        var info = stat()
        guard lstat(target, &info) == 0 else { return false }
        // A link is followed to the folder it names.
        guard stat(target, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw LedgerError(code: "backup_target_exists", message: "\(target) exists and is not a folder; give a new or empty folder for the backup (nothing was written)")
        }
        removeAbandonedBackups(in: target)
        let entries: [String]
        do {
            entries = try FileManager.default.contentsOfDirectory(atPath: target)
        } catch {
            throw LedgerError(code: "unwritable_output", message: "cannot read the folder \(target) (check its permissions): \(error.localizedDescription)")
        }
        // A fresh ext4 volume holds only its `lost+found` folder: that is an empty disk.
        var isFolder: ObjCBool = false
        let lostAndFound = entries == ["lost+found"] && FileManager.default.fileExists(atPath: target + "/lost+found", isDirectory: &isFolder) && isFolder.boolValue
        guard entries.isEmpty || lostAndFound else {
            throw LedgerError(code: "backup_target_exists", message: "\(target) is not empty; give a new or empty folder for the backup (nothing was written)")
        }
        return true
    }

    /// Temporary copies left by backups that were killed: those whose lock nobody holds.
    private static func removeAbandonedBackups(in folder: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.hasPrefix(partialPrefix) {
            let path = folder + "/" + name
            let fd = open(path + "/" + lockName, O_RDWR | O_CLOEXEC)
            guard fd >= 0 else { continue }  // (not one of ours, or one finishing: left alone)
            defer { Glibc.close(fd) }
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    private static func unmovable(_ target: String) -> LedgerError {
        LedgerError(code: "unwritable_output", message: "cannot move the copy to \(target): \(String(cString: strerror(errno)))"
                    + (errno == ENOTEMPTY || errno == EEXIST ? " (something was written there meanwhile)" : ""))
    }

    private static func sync(_ path: String, _ what: String, done: Bool = false) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        let ok = fd >= 0 && fsync(fd) == 0
        let reason = String(cString: strerror(errno))
        if fd >= 0 { Glibc.close(fd) }
        guard ok else {
            throw LedgerError(code: "unwritable_output", message: "cannot sync \(what) (\(path)): \(reason)"
                              + (done ? " (the backup is in place; sync the disk before relying on it)" : ""))
        }
    }
}
