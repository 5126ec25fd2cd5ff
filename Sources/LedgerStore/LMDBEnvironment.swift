import CLMDB
#if canImport(Glibc)
import Glibc
#endif

/// An open LMDB environment (one data folder).
///
/// Read transactions are short and may run on any thread (`MDB_NOTLS`); write transactions are
/// serialised by LMDB itself, and the ledger sends every write through one serial writer.
/// The map grows when it fills: `grow()` doubles it (no transaction may be open in this
/// process meanwhile, which the single writer guarantees).
public final class LMDBEnvironment: @unchecked Sendable {
    public let path: String
    let env: OpaquePointer
    private var handles: [String: MDB_dbi] = [:]
    private let handleLock = NSLockLike()
    public let readOnly: Bool

    /// Opens (creating when missing) the environment in `path` with the named databases.
    public init(path: String, databases: [String], mapSize: Int = 64 << 20, maxDatabases: Int = 32, readOnly: Bool = false) throws {
        self.path = path
        self.readOnly = readOnly
        if !readOnly { mkdir(path, 0o755) }
        var e: OpaquePointer?
        try LMDBError.check(mdb_env_create(&e), "cannot create the LMDB environment")
        env = e!
        do {
            try LMDBError.check(mdb_env_set_maxdbs(env, MDB_dbi(maxDatabases)), "cannot set the number of databases")
            try LMDBError.check(mdb_env_set_maxreaders(env, 254), "cannot set the number of readers")
            try LMDBError.check(mdb_env_set_mapsize(env, mapSize), "cannot set the map size")
            let flags = UInt32(MDB_NOTLS) | (readOnly ? UInt32(MDB_RDONLY) : 0)
            try LMDBError.check(mdb_env_open(env, path, flags, 0o644), "cannot open the ledger in \(path)")
            var dead: Int32 = 0
            try LMDBError.check(mdb_reader_check(env, &dead), "cannot clear stale readers")
            // A map set smaller than the file would fail on use: adopt the file's size.
            try LMDBError.check(mdb_env_set_mapsize(env, 0), "cannot adopt the map size")
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
        } catch {
            mdb_env_close(env)
            throw error
        }
    }

    deinit { mdb_env_close(env) }

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

    /// Doubles the map (or grows it to at least `minimum`). Call with no transaction open in this process.
    public func grow(toAtLeast minimum: Int = 0) throws(LMDBError) {
        let target = max(mapSize * 2, minimum)
        try LMDBError.check(mdb_env_set_mapsize(env, target), "cannot grow the map to \(target) bytes")
    }


    /// Runs `body` in a read-only transaction that ends when it returns.
    public func read<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        var t: OpaquePointer?
        var rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &t)
        if rc == MDB_MAP_RESIZED {
            // Another process grew the map: adopt its size and begin again.
            mdb_env_set_mapsize(env, 0)
            rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &t)
        }
        try LMDBError.check(rc, "cannot begin a read transaction")
        let txn = LMDBTransaction(txn: t!, environment: self)
        defer { mdb_txn_abort(t) }
        return try body(txn)
    }

    /// Runs `body` in a write transaction: commits when it returns, aborts when it throws.
    /// `MDB_MAP_FULL` surfaces as an `LMDBError` with `isMapFull`; the caller grows the map
    /// and runs its batch again (see `writeGrowing`).
    public func write<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        var t: OpaquePointer?
        var rc = mdb_txn_begin(env, nil, 0, &t)
        if rc == MDB_MAP_RESIZED {
            mdb_env_set_mapsize(env, 0)
            rc = mdb_txn_begin(env, nil, 0, &t)
        }
        try LMDBError.check(rc, "cannot begin a write transaction")
        let txn = LMDBTransaction(txn: t!, environment: self)
        let result: T
        do {
            result = try body(txn)
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

}

/// A tiny mutex (Foundation-free) guarding the handle table.
final class NSLockLike: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body()
    }
}
