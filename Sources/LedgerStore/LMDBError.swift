import LedgerCodec
import CLMDB
import Glibc

/// A failed LMDB call: its return code and a message that says what happened and what to do.
public struct LMDBError: CodedError, Sendable, Equatable {
    /// LMDB's return code (or the errno of a file call).
    public let code: Int32
    public let message: String
    /// `storage_error`: the CLI's and the HTTP API's code for it (`code` is LMDB's number); or
    /// `ledger_busy` when the folder is open in this process in a way that excludes the open asked for.
    public var errorCode: String { code == EBUSY ? "ledger_busy" : "storage_error" }

    public init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }

    public var isMapFull: Bool { code == MDB_MAP_FULL }
    public var isNotFound: Bool { code == MDB_NOTFOUND }

    /// Throws unless `rc` is `MDB_SUCCESS`.
    @inline(__always)
    static func check(_ rc: Int32, _ context: @autoclosure () -> String) throws(LMDBError) {
        guard rc != 0 else { return }
        throw LMDBError(code: rc, message: "\(context()): \(String(cString: mdb_strerror(rc)))\(advice(rc))")
    }

    /// Creates the data folder `path` unless it exists, readable by its owner only (it holds the
    /// apps' secrets); the error says why it could not be.
    static func createFolder(_ path: String) throws(LMDBError) {
        guard mkdir(path, 0o700) != 0, errno != EEXIST else { return }
        throw LMDBError(code: errno, message: "cannot create the data folder \(path): \(String(cString: strerror(errno)))"
                        + (errno == ENOENT ? " (create its parent folder first)" : ""))
    }

    private static func advice(_ rc: Int32) -> String {
        switch rc {
        case MDB_MAP_FULL: return " (the map is full; the ledger grows it and retries)"
        case MDB_READERS_FULL: return " (too many readers; stale readers are cleared at open, close idle processes)"
        case MDB_VERSION_MISMATCH, MDB_INVALID: return " (this folder was not written by a compatible LMDB)"
        case 13 /* EACCES */: return " (check the data folder's permissions)"
        case 28 /* ENOSPC */: return " (the disk is full: free space and retry)"
        // LMDB reports a short write (what a full disk gives) as EIO.
        case 5 /* EIO */: return " (most often the disk holding the ledger is full: free space and retry; else the disk is failing)"
        default: return ""
        }
    }
}
