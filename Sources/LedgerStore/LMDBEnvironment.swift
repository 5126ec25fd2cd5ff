import CLMDB
#if canImport(Glibc)
import Glibc
#endif

/// An open LMDB environment (one data folder).
///
/// Read transactions are short and may run on any thread (`MDB_NOTLS`); write transactions are
/// serialised by LMDB itself, and the ledger sends every write through one serial writer.
///
/// Two rules of LMDB are kept here, in one place:
/// - **One environment per folder per process** ("do not open the same environment twice in one
///   process": closing the second one drops the process's locks on `lock.mdb`, and another process
///   would then reset the reader table under the first). `open(path:…)` hands out the environment
///   already open for the folder; opening and closing take one process-wide lock.
/// - **The map is resized only when no transaction of this process is open**: every transaction
///   holds `resizeLock` shared; `grow()` and the adoption of a size grown by another process hold
///   it exclusively, so a query on another thread never reads through a map being replaced.
public final class LMDBEnvironment: @unchecked Sendable {
    public let path: String
    let env: OpaquePointer
    private var handles: [String: MDB_dbi] = [:]
    private let handleLock = NSLockLike()
    private let resizeLock = ReadWriteLock()
    public let readOnly: Bool
    private let identity: FolderIdentity?

    /// The environment of the folder `path`, opening it (creating the folder when missing, unless
    /// `readOnly`) or sharing the one this process already has open. A read-write request while the
    /// folder is open read-only in this process is refused: close that first.
    ///
    /// `withoutLock` (read-only only) opens a folder no other process uses, such as a copy being
    /// made, with `MDB_NOLOCK`: no `lock.mdb` is created, and the environment is not shared.
    public static func open(path: String, databases: [String], mapSize: Int = 64 << 20, maxDatabases: Int = 32,
                            readOnly: Bool = false, withoutLock: Bool = false) throws -> LMDBEnvironment {
        precondition(readOnly || !withoutLock, "only a read-only environment opens without LMDB's lock file")
        if !readOnly {
            try LMDBError.createFolder(path)
            try checkRoomForNewLedger(path)
        }
        if withoutLock {
            return try LMDBEnvironment(path: path, identity: nil, databases: databases, mapSize: mapSize, maxDatabases: maxDatabases,
                                       readOnly: true, withoutLock: true)
        }
        let identity = FolderIdentity(path)
        while true {
            let environment: LMDBEnvironment? = try registry.withLock {
                guard let identity else {
                    return try LMDBEnvironment(path: path, identity: nil, databases: databases, mapSize: mapSize,
                                               maxDatabases: maxDatabases, readOnly: readOnly)
                }
                // One whose last reference just went is about to close: wait for that (the close
                // would drop the locks of a second one opened now).
                if registry.isClosing(identity) { return nil }
                if let existing = registry.environment(for: identity) {
                    if existing.readOnly && !readOnly {
                        throw LMDBError(code: EBUSY, message: "the ledger in \(path) is open read-only in this process; release that Ledger before opening it for writing, or query through the writing one")
                    }
                    for name in databases where existing.database(name) == nil && !existing.readOnly {
                        try existing.write { txn in _ = try txn.openDatabase(name) }
                    }
                    return existing
                }
                let opened = try LMDBEnvironment(path: path, identity: identity, databases: databases, mapSize: mapSize,
                                                 maxDatabases: maxDatabases, readOnly: readOnly)
                registry.remember(opened, for: identity)
                return opened
            }
            if let environment { return environment }
            usleep(1000)
        }
    }

    private init(path: String, identity: FolderIdentity?, databases: [String], mapSize: Int, maxDatabases: Int, readOnly: Bool,
                 withoutLock: Bool = false) throws {
        self.path = path
        self.readOnly = readOnly
        self.identity = identity
        var e: OpaquePointer?
        try LMDBError.check(mdb_env_create(&e), "cannot create the LMDB environment")
        env = e!
        // From here on `deinit` closes `env` (once), whether init returns or throws.
        try LMDBError.check(mdb_env_set_maxdbs(env, MDB_dbi(maxDatabases)), "cannot set the number of databases")
        try LMDBError.check(mdb_env_set_maxreaders(env, 254), "cannot set the number of readers")
        try LMDBError.check(mdb_env_set_mapsize(env, mapSize), "cannot set the map size")
        let flags = UInt32(MDB_NOTLS) | (readOnly ? UInt32(MDB_RDONLY) : 0) | (withoutLock ? UInt32(MDB_NOLOCK) : 0)
        try LMDBError.check(mdb_env_open(env, path, flags, 0o600), "cannot open the ledger in \(path)")
        var dead: Int32 = 0
        try LMDBError.check(mdb_reader_check(env, &dead), "cannot clear stale readers")
        // A map set smaller than the file would fail on use: adopt the file's size.
        try LMDBError.check(mdb_env_set_mapsize(env, 0), "cannot adopt the map size")
        try Self.checkFileLength(env, path)
        if readOnly {
            // Handles opened in a read transaction survive only if it commits.
            var t: OpaquePointer?
            try LMDBError.check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &t), "cannot begin a read transaction")
            for name in databases {
                var dbi: MDB_dbi = 0
                let rc = mdb_dbi_open(t, name, 0, &dbi)
                if rc == MDB_NOTFOUND { continue }
                if rc != 0 { mdb_txn_abort(t) }
                try LMDBError.check(rc, "cannot open database \(name)")
                handles[name] = dbi
            }
            try LMDBError.check(mdb_txn_commit(t), "cannot open the databases")
        } else {
            try write { txn in
                for name in databases { _ = try txn.openDatabase(name) }
            }
        }
    }

    /// Clears the reader slots of processes that died inside a read transaction (an auditor's
    /// script killed mid-read, say): while one stays, LMDB cannot reuse the pages freed since, and
    /// the file grows. Done at every open, and by a long-running writer now and then.
    /// Answers how many slots were cleared.
    @discardableResult
    public func clearStaleReaders() throws(LMDBError) -> Int {
        var dead: Int32 = 0
        try LMDBError.check(mdb_reader_check(env, &dead), "cannot clear stale readers")
        return Int(dead)
    }

    /// Writes a consistent copy of the environment, as one read transaction sees it, to
    /// `folder/data.mdb` (the folder must exist; the file must not), leaving free pages out
    /// (`MDB_CP_COMPACT`). Writers in this and other processes go on meanwhile.
    ///
    /// The copy holds this process's resize lock shared throughout: a writer in this process that
    /// must grow the map waits for it to end (a copy made from another process delays nobody).
    public func copy(toFolder folder: String) throws(LMDBError) {
        var flags = UInt32(MDB_CP_COMPACT)
        while true {
            resizeLock.lockShared()
            let rc = mdb_env_copy2(env, folder, flags)
            resizeLock.unlockShared()
            if rc == 0 { return }
            // Copy again into a fresh file (LMDB refuses to overwrite one) when another process grew
            // the map before the copy's transaction began (adopting its size), or when compaction
            // gives up (LMDB's MDB_INCOMPATIBLE: a page leak): then page for page.
            unlink(folder + "/data.mdb")
            if rc == MDB_MAP_RESIZED, resizeLock.depth == 0 {
                adoptGrownMap()
                continue
            }
            if rc == MDB_INCOMPATIBLE, flags != 0 {
                flags = 0
                continue
            }
            try LMDBError.check(rc, "cannot copy the ledger to \(folder)")
        }
    }

    /// LMDB maps the files of a new ledger before it writes them: on a full disk the first touch
    /// of the mapped lock file kills the process (SIGBUS). A new ledger is refused without 1 MiB free.
    private static func checkRoomForNewLedger(_ path: String) throws(LMDBError) {
        guard access(path + "/data.mdb", F_OK) != 0 else { return }
        var fs = statvfs()
        guard statvfs(path, &fs) == 0 else { return }
        let free = UInt64(fs.f_bavail) * UInt64(fs.f_frsize)
        guard free < 1 << 20 else { return }
        throw LMDBError(code: ENOSPC, message: "cannot create a ledger in \(path): the disk holding it has \(free) bytes free (free space and retry)")
    }

    /// A data file shorter than its own last page (a copy or restore cut short, a disk that filled
    /// during one) maps pages that are not there: the first read of one kills the process (SIGBUS).
    /// Refused at open instead, with what to do.
    private static func checkFileLength(_ env: OpaquePointer, _ path: String) throws(LMDBError) {
        var info = MDB_envinfo()
        var pages = MDB_stat()
        try LMDBError.check(mdb_env_info(env, &info), "cannot read the ledger's size")
        try LMDBError.check(mdb_env_stat(env, &pages), "cannot read the ledger's page size")
        var file = stat()
        guard stat(path + "/data.mdb", &file) == 0 else { return }
        let needed = (Int64(info.me_last_pgno) + 1) * Int64(pages.ms_psize)
        guard Int64(file.st_size) < needed else { return }
        throw LMDBError(code: MDB_CORRUPTED, message: "\(path)/data.mdb is cut short: it holds \(file.st_size) bytes where its pages need \(needed) (an interrupted copy or restore, or a disk that filled during one); restore the folder from a whole copy (`referral-ledger backup` makes one of a live ledger)")
    }

    deinit {
        // Under the registry's lock: a new open of this folder waits until this one is closed.
        Self.registry.withLock {
            mdb_env_close(env)
            if let identity { Self.registry.forget(identity) }
        }
    }

    /// The handle of a named database opened at start, or `nil` when it does not exist (read-only opens).
    public func database(_ name: String) -> MDB_dbi? {
        handleLock.withLock { handles[name] }
    }

    func remember(_ name: String, _ dbi: MDB_dbi) { handleLock.withLock { handles[name] = dbi } }

    /// The map size in bytes.
    public var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        return info.me_mapsize
    }

    /// Bytes of the map in use (last page number × page size).
    public var usedBytes: Int {
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        var stat = MDB_stat()
        mdb_env_stat(env, &stat)
        return (info.me_last_pgno + 1) * Int(stat.ms_psize)
    }

    /// Doubles the map (or grows it to at least `minimum`). Waits until no transaction of this
    /// process is open; must not be called from inside one.
    public func grow(toAtLeast minimum: Int = 0) throws(LMDBError) {
        guard resizeLock.depth == 0 else {
            throw LMDBError(code: MDB_BAD_TXN, message: "cannot grow the map of \(path) from inside a transaction of this process")
        }
        try resizeLock.exclusively { () throws(LMDBError) in
            let target = max(mapSize * 2, minimum)
            try LMDBError.check(mdb_env_set_mapsize(env, target), "cannot grow the map to \(target) bytes")
        }
    }

    /// Another process grew the map (`MDB_MAP_RESIZED`): adopt its size, with no transaction open.
    private func adoptGrownMap() {
        resizeLock.exclusively { _ = mdb_env_set_mapsize(env, 0) }
    }

    /// Begins a transaction holding `resizeLock` shared; the caller ends both.
    private func begin(_ flags: UInt32, _ what: String) throws(LMDBError) -> OpaquePointer {
        while true {
            resizeLock.lockShared()
            var t: OpaquePointer?
            let rc = mdb_txn_begin(env, nil, flags, &t)
            if rc == 0 { return t! }
            resizeLock.unlockShared()
            // Another process grew the map. Adopt its size, unless this thread is inside a
            // transaction already (it would wait for itself): then the outer one must end first.
            if rc == MDB_MAP_RESIZED, resizeLock.depth == 0 { adoptGrownMap(); continue }
            try LMDBError.check(rc, "cannot begin a \(what) transaction")
        }
    }

    /// Runs `body` in a read-only transaction that ends when it returns.
    public func read<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        let t = try begin(UInt32(MDB_RDONLY), "read")
        defer {
            mdb_txn_abort(t)
            resizeLock.unlockShared()
        }
        return try body(LMDBTransaction(txn: t, environment: self))
    }

    /// Runs `body` in a write transaction: commits when it returns, aborts when it throws.
    /// `MDB_MAP_FULL` surfaces as an `LMDBError` with `isMapFull`; the caller grows the map
    /// and runs its batch again (see `writeGrowing`).
    public func write<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        let t = try begin(0, "write")
        defer { resizeLock.unlockShared() }
        let result: T
        do {
            result = try body(LMDBTransaction(txn: t, environment: self))
        } catch {
            mdb_txn_abort(t)
            throw error
        }
        try LMDBError.check(mdb_txn_commit(t), "cannot commit the write transaction")
        return result
    }

    /// `write`, growing the map and running `body` again whenever it fills. `body` must be
    /// safe to run again (it only touches this transaction).
    public func writeGrowing<T>(_ body: (LMDBTransaction) throws -> T) throws -> T {
        while true {
            do {
                return try write(body)
            } catch let error as LMDBError where error.isMapFull {
                try grow()
            }
        }
    }

    // MARK: - One environment per folder per process

    private struct FolderIdentity: Hashable {
        let device: UInt64
        let inode: UInt64
        init?(_ path: String) {
            var st = stat()
            guard stat(path, &st) == 0 else { return nil }
            device = UInt64(st.st_dev)
            inode = UInt64(st.st_ino)
        }
    }

    private struct WeakEnvironment { weak var environment: LMDBEnvironment? }

    private static let registry = Registry()

    /// The environments open in this process, by folder. Each access to the table is short (a
    /// closing environment may re-enter the lock while an open holds it).
    private final class Registry: @unchecked Sendable {
        private let lock = NSLockLike(recursive: true)
        private var open: [FolderIdentity: WeakEnvironment] = [:]
        func withLock<T>(_ body: () throws -> T) rethrows -> T { try lock.withLock(body) }
        func environment(for identity: FolderIdentity) -> LMDBEnvironment? { withLock { open[identity]?.environment } }
        /// Known but no longer referenced: its `deinit` is about to close it.
        func isClosing(_ identity: FolderIdentity) -> Bool {
            withLock { open[identity] != nil && open[identity]?.environment == nil }
        }
        func remember(_ environment: LMDBEnvironment, for identity: FolderIdentity) {
            withLock { open[identity] = WeakEnvironment(environment: environment) }
        }
        /// Drops the entry unless it already names a newer environment.
        func forget(_ identity: FolderIdentity) {
            withLock { if open[identity]?.environment == nil { open[identity] = nil } }
        }
    }
}

/// A readers–writer lock that prefers the writer: once `exclusively` waits, new readers queue
/// behind it, so a map growth is not starved by a stream of queries (which would stall every
/// write). A thread that already holds it shared (a read inside a write, say) takes it again
/// without blocking: its depth is counted per thread, and only the outermost level locks.
///
/// The pthread objects live in memory of their own (a class's stored property has no address
/// Swift promises to keep), so the lock never moves while threads wait on it.
final class ReadWriteLock: @unchecked Sendable {
    private let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    private var depthKey = pthread_key_t()

    init() {
        lock.initialize(to: pthread_rwlock_t())
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        precondition(pthread_rwlock_init(lock, &attributes) == 0, "pthread_rwlock_init failed")
        pthread_rwlockattr_destroy(&attributes)
        precondition(pthread_key_create(&depthKey, nil) == 0, "pthread_key_create failed")
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deinitialize(count: 1)
        lock.deallocate()
        pthread_key_delete(depthKey)
    }

    /// How many times this thread holds the lock shared.
    var depth: Int {
        get { Int(bitPattern: pthread_getspecific(depthKey)) }
        set { pthread_setspecific(depthKey, UnsafeRawPointer(bitPattern: newValue)) }
    }

    func lockShared() {
        let d = depth
        if d == 0 { pthread_rwlock_rdlock(lock) }
        depth = d + 1
    }

    func unlockShared() {
        let d = depth - 1
        depth = d
        if d == 0 { pthread_rwlock_unlock(lock) }
    }

    /// Runs `body` holding the lock alone. Never from a thread that holds it shared (it would wait
    /// for itself): the caller checks `depth` first.
    func exclusively<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}

/// A tiny mutex (Foundation-free) guarding the handle table; like `ReadWriteLock`, in memory of its own.
final class NSLockLike: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// `recursive`: the thread holding it may take it again (the registry closes an environment
    /// while opening one, when the open fails or drops the last reference to an old one).
    init(recursive: Bool = false) {
        mutex.initialize(to: pthread_mutex_t())
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        if recursive { pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE)) }
        precondition(pthread_mutex_init(mutex, &attributes) == 0, "pthread_mutex_init failed")
        pthread_mutexattr_destroy(&attributes)
    }
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
