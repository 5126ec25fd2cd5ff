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
}
