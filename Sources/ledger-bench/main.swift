import CCrypto
import CLMDB
import Foundation
import LedgerCodec
import ReferralLedger

/// Benchmarks with their baseline measured in the same run: raw LMDB through the C API.
///
///   ledger-bench --cli PATH [quick|full] [--only ingest,verify,scale,rebuild] [--keep]
///
/// --keep leaves the benchmark's folders in place (their path is printed) for profiling, with a copy
/// of the ingest ledger before the submit (`ingest-before`) and its input (`ingest.jsonl`).
///
/// quick: ingest of 60,000 commands through `referral-ledger submit` against 60,000 raw appends
/// (300-byte values, 1,000 per durable commit); verify against a raw scan that SHA-256s each value.
/// full: also a 1,000,000-command ledger: the first and last 60,000 commands' rates, and
/// rebuild and verify over it against a raw scan+SHA of the same values.

let arguments = Array(CommandLine.arguments.dropFirst())
var cli = ".build/release/referral-ledger"
var mode = "full"
var only: Set<String>?
var keep = false
var i = 0
while i < arguments.count {
    switch arguments[i] {
    case "--cli": i += 1; cli = arguments[i]
    case "--only": i += 1; only = Set(arguments[i].split(separator: ",").map(String.init))
    case "quick", "full": mode = arguments[i]
    case "--keep": keep = true
    default: FileHandle.standardError.write(Data("unknown argument \(arguments[i])\n".utf8)); exit(2)
    }
    i += 1
}
@MainActor func wanted(_ name: String) -> Bool { only?.contains(name) ?? (mode == "full" || ["ingest", "verify"].contains(name)) }

let root = NSTemporaryDirectory() + "ledger-bench-" + UUID().uuidString
try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
defer { if keep { print("kept \(root)") } else { try? FileManager.default.removeItem(atPath: root) } }

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

/// Process CPU seconds (user, system) so far.
func cpu() -> (Double, Double) {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return (Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6, Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6)
}

func rate(_ n: Int, _ s: Double) -> String { String(format: "%9.0f/s", Double(n) / s) }
var summary: [String: JSONValue] = [:]
@MainActor func report(_ name: String, _ n: Int, ours: Double, raw: Double, goal: Double) {
    let ratio = raw / ours
    print(String(format: "%-34@ ours %@  raw %@  ratio %.3f  (goal ≥ %.2f) %@", name as NSString, rate(n, ours), rate(n, raw), ratio, goal,
                 ratio >= goal ? "met" : "NOT met"))
    summary[name] = ["count": .int(Int64(n)), "ours_per_s": .double((Double(n) / ours).rounded()), "raw_per_s": .double((Double(n) / raw).rounded()),
                     "ratio": .double((ratio * 1000).rounded() / 1000), "goal": .double(goal)]
}

// MARK: - Raw LMDB through the C API

func check(_ rc: Int32, _ what: String) {
    if rc != 0 { fatalError("\(what): \(String(cString: mdb_strerror(rc)))") }
}

/// Appends `count` values of `size` bytes, keyed by 8-byte big-endian position, `perCommit` per durable commit.
func rawAppend(folder: String, count: Int, size: Int, perCommit: Int) -> Double {
    mkdir(folder, 0o755)
    var env: OpaquePointer?
    check(mdb_env_create(&env), "create")
    mdb_env_set_maxdbs(env, 4)
    mdb_env_set_mapsize(env, 1 << 32)
    check(mdb_env_open(env, folder, UInt32(MDB_NOTLS), 0o644), "open")
    defer { mdb_env_close(env) }
    var value = [UInt8](repeating: UInt8(ascii: "x"), count: size)
    return seconds {
        var n = 0
        while n < count {
            var txn: OpaquePointer?
            check(mdb_txn_begin(env, nil, 0, &txn), "begin")
            var dbi: MDB_dbi = 0
            check(mdb_dbi_open(txn, "events", UInt32(MDB_CREATE), &dbi), "dbi")
            for _ in 0..<min(perCommit, count - n) {
                n += 1
                var key = UInt64(n).bigEndian
                withUnsafeMutableBytes(of: &key) { kp in
                    value.withUnsafeMutableBytes { vp in
                        var k = MDB_val(mv_size: 8, mv_data: kp.baseAddress)
                        var v = MDB_val(mv_size: vp.count, mv_data: vp.baseAddress)
                        check(mdb_put(txn, dbi, &k, &v, UInt32(MDB_APPEND)), "put")
                    }
                }
            }
            check(mdb_txn_commit(txn), "commit")
        }
    }
}

/// Scans the `events` database of a data folder and SHA-256s every value.
func rawScanAndHash(folder: String) -> (Int, Double) {
    var env: OpaquePointer?
    check(mdb_env_create(&env), "create")
    mdb_env_set_maxdbs(env, 32)
    check(mdb_env_open(env, folder, UInt32(MDB_NOTLS | MDB_RDONLY), 0o644), "open")
    defer { mdb_env_close(env) }
    var count = 0
    var digest = [UInt8](repeating: 0, count: 32)
    let s = seconds {
        var txn: OpaquePointer?
        check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "begin")
        var dbi: MDB_dbi = 0
        check(mdb_dbi_open(txn, "events", 0, &dbi), "dbi")
        var cursor: OpaquePointer?
        check(mdb_cursor_open(txn, dbi, &cursor), "cursor")
        var k = MDB_val(), v = MDB_val()
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == 0 {
            _ = digest.withUnsafeMutableBufferPointer { SHA256(v.mv_data.assumingMemoryBound(to: UInt8.self), v.mv_size, $0.baseAddress) }
            count += 1
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        mdb_cursor_close(cursor)
        mdb_txn_abort(txn)
    }
    return (count, s)
}

// MARK: - Workload

/// Commands of a realistic history: an app, a program, `inviters` invites, then for each friend
/// an enrolment and a tracked event that qualifies them (every 5 qualified friends earn a reward).
struct Workload {
    static func setup(_ ledger: Ledger, inviters: Int) throws -> [String] {
        _ = try ledger.submit(try JSONValue(parsing: #"{"type":"app.configure","app":"bench","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#))
        _ = try ledger.submit(try JSONValue(parsing: #"{"type":"program.create","app":"bench","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"level_up","reward":{"mode":"every","friends":5,"max_rewards":null,"benefit":{"type":"custom","feature":"pro","payload":{"days":30}}}},"friend":null,"new_users_only":false}}"#))
        _ = try ledger.submit(try JSONValue(parsing: #"{"type":"program.activate","app":"bench","at":"2026-01-01T00:00:00Z","program":"p"}"#))
        var codes: [String] = []
        var lines: [[UInt8]] = []
        for n in 0..<inviters {
            lines.append(Array(#"{"type":"invite.create","app":"bench","at":"2026-01-01T00:00:00Z","program":"p","user":"inviter-\#(n)"}"#.utf8))
            if lines.count == 1000 || n == inviters - 1 {
                codes += try ledger.submit(lines: lines).map { $0.json["code"].stringValue ?? "" }
                lines = []
            }
        }
        return codes
    }

    /// Command `index` of the stream (two per friend).
    static func command(_ index: Int, codes: [String]) -> String {
        let friend = index / 2
        let at = Timestamp(rfc3339: "2026-01-02T00:00:00Z")!.adding(seconds: Int64(friend))
        if index % 2 == 0 {
            return #"{"type":"referral.enroll","app":"bench","at":"\#(at)","program":"p","user":"friend-\#(friend)","code":"\#(codes[friend % codes.count])","id":"e\#(friend)"}"#
        }
        return #"{"type":"event.track","app":"bench","at":"\#(at)","user":"friend-\#(friend)","name":"level_up","event_id":"t\#(friend)"}"#
    }
}

print("ledger-bench (\(mode)) — baselines are raw LMDB through the C API, measured in this run")
print(String(repeating: "-", count: 100))

// MARK: - Ingest through `submit`

if wanted("ingest") || wanted("verify") {
    let n = 60_000
    let folder = root + "/ingest"
    let codes = try { let l = try Ledger(folder: folder); return try Workload.setup(l, inviters: 1000) }()
    let input = root + "/ingest.jsonl"
    precondition(FileManager.default.createFile(atPath: input, contents: Data((0..<n).map { Workload.command($0, codes: codes) }.joined(separator: "\n").utf8 + [0x0A])), "cannot write \(input)")
    if keep { try FileManager.default.copyItem(atPath: folder, toPath: root + "/ingest-before") }
    let raw = rawAppend(folder: root + "/raw-ingest", count: n, size: 300, perCommit: 1000)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: cli)
    process.arguments = ["--data", folder, "submit", input]
    process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
    let ours = try seconds {
        try process.run()
        process.waitUntilExit()
    }
    guard process.terminationStatus == 0 else { fatalError("submit failed") }
    report("ingest: 60k commands via submit", n, ours: ours, raw: raw, goal: 0.2)

    if wanted("verify") {
        let ledger = try Ledger(readingFolder: folder)
        let events = Int(try ledger.currentHead().position)
        var clean = false
        let ours = try seconds { clean = try ledger.verify().isClean }
        guard clean else { fatalError("the bench ledger does not verify") }
        let (count, raw) = rawScanAndHash(folder: folder)
        precondition(count == events)
        report("verify: \(events) events", events, ours: ours, raw: raw, goal: 0.5)
    }
}

// MARK: - A 1M-command ledger: scale, rebuild, verify

if wanted("scale") || wanted("rebuild") {
    let total = 1_000_000
    let window = 60_000
    let folder = root + "/million"
    var building: Ledger? = try Ledger(folder: folder)
    let codes = try Workload.setup(building!, inviters: 10_000)
    var firstRate = 0.0, lastRate = 0.0
    var firstCPU = (0.0, 0.0), lastCPU = (0.0, 0.0)
    var index = 0
    let overall = try seconds {
        while index < total {
            let windowStart = index
            let before = cpu()
            let t = try seconds {
                while index < total && (index - windowStart < window || (index >= window && index < total - window)) {
                    let batch = (index..<min(index + 1000, total)).map { Array(Workload.command($0, codes: codes).utf8) }
                    _ = try building!.submit(lines: batch)
                    index += batch.count
                    if index == window || index == total - window { break }
                }
            }
            let after = cpu()
            if windowStart == 0 { firstRate = Double(index) / t; firstCPU = (after.0 - before.0, after.1 - before.1) }
            if index == total { lastRate = Double(window) / t; lastCPU = (after.0 - before.0, after.1 - before.1) }
            FileHandle.standardError.write(Data("\r  built \(index) commands".utf8))
        }
    }
    FileHandle.standardError.write(Data("\n".utf8))
    let events = Int(try building!.currentHead().position)
    print(String(format: "scale: 1M commands (%d events) in %.1fs; first 60k %9.0f/s, last 60k %9.0f/s, last/first %.3f",
                 events, overall, firstRate, lastRate, lastRate / firstRate))
    print(String(format: "       CPU per command: first 60k user %.1f us sys %.1f us; last 60k user %.1f us sys %.1f us",
                 firstCPU.0 / Double(window) * 1e6, firstCPU.1 / Double(window) * 1e6, lastCPU.0 / Double(window) * 1e6, lastCPU.1 / Double(window) * 1e6))
    summary["scale"] = ["commands": .int(Int64(total)), "events": .int(Int64(events)), "first_60k_per_s": .double(firstRate.rounded()),
                        "last_60k_per_s": .double(lastRate.rounded()), "last_over_first": .double((lastRate / firstRate * 1000).rounded() / 1000)]
    let (count, raw) = rawScanAndHash(folder: folder)
    precondition(count == events)
    if wanted("rebuild") {
        // What an operator runs (`referral-ledger rebuild`): open the folder, fold the log once,
        // drop and write every projection (and encode the state snapshot meanwhile, for the save
        // that `rebuild` makes next). The builder closes first (one writer per folder).
        building = nil
        var rebuilt: Ledger?
        let ours = try seconds { rebuilt = try Ledger(folder: folder, rebuildingProjections: true) }
        report("rebuild: \(events) events", events, ours: ours, raw: raw, goal: 0.5)
        var clean = false
        let v = try seconds { clean = try rebuilt!.verify().isClean }
        guard clean else { fatalError("the 1M ledger does not verify") }
        report("verify: \(events) events", events, ours: v, raw: raw, goal: 0.5)
        // A writer's open: the first folds the whole log (and saves the state snapshot), the next
        // loads that snapshot. (Should a snapshot be there, it goes first.)
        rebuilt = nil
        try? FileManager.default.removeItem(atPath: folder + "/state.snapshot")
        let folding = try seconds { _ = try Ledger(folder: folder) }
        let loading = try seconds { _ = try Ledger(folder: folder) }
        print(String(format: "open: whole fold and snapshot save %.1fs; from the snapshot %.1fs (%.1fx faster)", folding, loading, folding / loading))
        summary["open"] = ["fold_and_save_s": .double((folding * 10).rounded() / 10), "from_snapshot_s": .double((loading * 10).rounded() / 10)]
    }
}

print(String(repeating: "-", count: 100))
print(JSONValue.object(summary).text)
