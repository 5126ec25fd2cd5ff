import Foundation

/// Where the ledger lives: `--data DIR`, else `$REFERRAL_LEDGER_DATA`, else `./ledger-data` (SPEC §10).
public enum LedgerFolder {
    public static let environmentVariable = "REFERRAL_LEDGER_DATA"
    public static let defaultFolder = "./ledger-data"

    public static func resolve(flag: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let flag, !flag.isEmpty { return flag }
        if let env = environment[environmentVariable], !env.isEmpty { return env }
        return defaultFolder
    }

    /// The files of a data folder that no output may replace: LMDB's data and lock files and the
    /// writer's lock. (Its `state.snapshot` is not one: a file written over it is passed over and
    /// replaced by the next save.)
    public static let storageFiles: Set<String> = ["data.mdb", "lock.mdb", "writer.lock"]

    /// `path` with every link and `..` resolved (realpath), nil when it does not exist.
    public static func resolvedPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Whether `folder` holds a ledger (its LMDB data file).
    public static func holdsLedger(_ folder: String) -> Bool { FileManager.default.fileExists(atPath: folder + "/data.mdb") }

    /// `no_ledger`'s message, with what to do (`hint`: the CLI names its flags, the library its initializer).
    public static func noLedgerMessage(_ folder: String, _ hint: String) -> String {
        "there is no ledger in \(folder) (\(hint))"
    }

    /// Refuses (`no_ledger`) a folder that holds no ledger: queries and the verbs that work on an
    /// existing ledger do not create an empty one where a mistyped --data points.
    public static func requireLedger(_ folder: String) throws {
        guard holdsLedger(folder) else {
            throw LedgerError(code: "no_ledger", message: Self.noLedgerMessage(folder, "name the folder that holds data.mdb; Ledger(folder:) creates a ledger where there is none"))
        }
    }
}
