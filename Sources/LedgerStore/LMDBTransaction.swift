import CLMDB

/// A transaction, valid only inside the closure that received it. Values read through it
/// point into the map and are copied out before the transaction ends.
public struct LMDBTransaction {
    let txn: OpaquePointer
    unowned let environment: LMDBEnvironment

    /// LMDB's largest key (the default build's `mdb_env_get_maxkeysize`).
    public static let maxKeySize = 511

    public func openDatabase(_ name: String) throws(LMDBError) -> MDB_dbi {
        if let dbi = environment.database(name) { return dbi }
        var dbi: MDB_dbi = 0
        try LMDBError.check(mdb_dbi_open(txn, name, UInt32(MDB_CREATE), &dbi), "cannot open database \(name)")
        environment.remember(name, dbi)
        return dbi
    }

    public func handle(_ name: String) throws(LMDBError) -> MDB_dbi {
        guard let dbi = environment.database(name) else {
            throw LMDBError(code: MDB_NOTFOUND, message: "database \(name) does not exist in \(environment.path)")
        }
        return dbi
    }

    /// The value stored under `key`, copied, or `nil`.
    public func get(_ database: String, _ key: [UInt8]) throws -> [UInt8]? {
        guard let dbi = environment.database(database) else { return nil }
        return try withValue(dbi, key) { $0.map { Array($0) } }
    }

    /// Calls `body` with the bytes stored under `key` (valid only during the call), or `nil`.
    public func withValue<T>(_ dbi: MDB_dbi, _ key: [UInt8], _ body: (UnsafeRawBufferPointer?) -> T) throws -> T {
        // No stored key is longer than LMDB allows: a longer one is simply not there.
        guard key.count <= Self.maxKeySize else { return body(nil) }
        return try key.withUnsafeBytes { kp throws -> T in
            var mk = MDB_val(mv_size: kp.count, mv_data: UnsafeMutableRawPointer(mutating: kp.baseAddress))
            var mv = MDB_val()
            let rc = mdb_get(txn, dbi, &mk, &mv)
            if rc == MDB_NOTFOUND { return body(nil) }
            try LMDBError.check(rc, "cannot read from the ledger")
            return body(UnsafeRawBufferPointer(start: mv.mv_data, count: mv.mv_size))
        }
    }

    /// Stores `value` under `key`. `append: true` uses `MDB_APPEND` (keys must come in order).
    public func put(_ database: String, _ key: [UInt8], _ value: [UInt8], append: Bool = false) throws(LMDBError) {
        try put(try handle(database), key, value, append: append)
    }

    public func put(_ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8], append: Bool = false) throws(LMDBError) {
        // LMDB only reads the bytes it is given (no MDB_RESERVE): no copy to make them mutable.
        let rc = key.withUnsafeBytes { kp in
            value.withUnsafeBytes { vp in
                var mk = MDB_val(mv_size: kp.count, mv_data: UnsafeMutableRawPointer(mutating: kp.baseAddress))
                var mv = MDB_val(mv_size: vp.count, mv_data: UnsafeMutableRawPointer(mutating: vp.baseAddress))
                return mdb_put(txn, dbi, &mk, &mv, append ? UInt32(MDB_APPEND) : 0)
            }
        }
        try LMDBError.check(rc, "cannot write to the ledger")
    }

    public func delete(_ database: String, _ key: [UInt8]) throws(LMDBError) {
        guard let dbi = environment.database(database) else { return }
        let rc = key.withUnsafeBytes { kp in
            var mk = MDB_val(mv_size: kp.count, mv_data: UnsafeMutableRawPointer(mutating: kp.baseAddress))
            return mdb_del(txn, dbi, &mk, nil)
        }
        if rc == MDB_NOTFOUND { return }
        try LMDBError.check(rc, "cannot delete from the ledger")
    }

    /// Empties a database (keeps it open).
    public func clear(_ database: String) throws(LMDBError) {
        guard let dbi = environment.database(database) else { return }
        try LMDBError.check(mdb_drop(txn, dbi, 0), "cannot empty database \(database)")
    }

    /// Visits entries in key order starting at the first key ≥ `start` (or the first key),
    /// until `body` returns false. Key and value are valid only during each call.
    public func scan(_ database: String, from start: [UInt8]? = nil,
                     _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
        guard let dbi = environment.database(database) else { return }
        var cursor: OpaquePointer?
        try LMDBError.check(mdb_cursor_open(txn, dbi, &cursor), "cannot open a cursor on \(database)")
        defer { mdb_cursor_close(cursor) }
        var mk = MDB_val()
        var mv = MDB_val()
        var rc: Int32
        // No key is longer than LMDB's limit, but a start (a client's paging cursor) may be: the
        // scan then starts at the longest prefix a key can have and passes over keys before `start`.
        var passOverBefore = start.flatMap { $0.count > Self.maxKeySize ? $0 : nil }
        var startKey = passOverBefore.map { Array($0.prefix(Self.maxKeySize)) } ?? start ?? []
        if start != nil {
            rc = startKey.withUnsafeMutableBytes { kp in
                mk = MDB_val(mv_size: kp.count, mv_data: kp.baseAddress)
                return mdb_cursor_get(cursor, &mk, &mv, MDB_SET_RANGE)
            }
        } else {
            rc = mdb_cursor_get(cursor, &mk, &mv, MDB_FIRST)
        }
        while rc == 0 {
            let key = UnsafeRawBufferPointer(start: mk.mv_data, count: mk.mv_size)
            let value = UnsafeRawBufferPointer(start: mv.mv_data, count: mv.mv_size)
            if let limit = passOverBefore {
                if key.lexicographicallyPrecedes(limit) {
                    rc = mdb_cursor_get(cursor, &mk, &mv, MDB_NEXT)
                    continue
                }
                passOverBefore = nil
            }
            if try !body(key, value) { return }
            rc = mdb_cursor_get(cursor, &mk, &mv, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try LMDBError.check(rc, "cannot read \(database)") }
    }

    /// The last key and value of a database, copied, or `nil` when it is empty.
    public func last(_ database: String) throws(LMDBError) -> (key: [UInt8], value: [UInt8])? {
        guard let dbi = environment.database(database) else { return nil }
        var cursor: OpaquePointer?
        try LMDBError.check(mdb_cursor_open(txn, dbi, &cursor), "cannot open a cursor on \(database)")
        defer { mdb_cursor_close(cursor) }
        var mk = MDB_val()
        var mv = MDB_val()
        let rc = mdb_cursor_get(cursor, &mk, &mv, MDB_LAST)
        if rc == MDB_NOTFOUND { return nil }
        try LMDBError.check(rc, "cannot read \(database)")
        return (Array(UnsafeRawBufferPointer(start: mk.mv_data, count: mk.mv_size)),
                Array(UnsafeRawBufferPointer(start: mv.mv_data, count: mv.mv_size)))
    }

    /// Number of entries in a database.
    public func count(_ database: String) throws(LMDBError) -> Int {
        guard let dbi = environment.database(database) else { return 0 }
        var stat = MDB_stat()
        try LMDBError.check(mdb_stat(txn, dbi, &stat), "cannot read statistics of \(database)")
        return stat.ms_entries
    }
}
