import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger

/// The verbs: each parses its flags, calls the library, and prints JSON.
struct CLI {
    let folder: String
    let out = Output()

    /// Runs a verb; its output must reach standard output whole (a failed write is an error).
    func run(_ verb: String, _ args: [String]) throws -> Int32 {
        let status = try dispatch(verb, args)
        do {
            try out.finish(out.done.map { "the report (\($0))" } ?? "the output")
        } catch let error as LedgerError where verb == "verify" {
            // verify's exit codes say clean (0) or violations (1): a report it could not write is neither.
            Terminal.error(code: error.code, error.message)
            return 2
        }
        return status
    }

    /// An error's message as the CLI tells it: a missing ledger is told what to do in the CLI's
    /// words (its flags), not the library's (its initializer).
    static func message(of error: any CodedError, folder: String) -> String {
        error.errorCode == "no_ledger"
            ? LedgerFolder.noLedgerMessage(folder, "give --data DIR or set REFERRAL_LEDGER_DATA; `submit` creates a ledger with its first commands")
            : error.message
    }

    private func dispatch(_ verb: String, _ args: [String]) throws -> Int32 {
        switch verb {
        case "submit": return try submit(args)
        case "progress", "rewards", "program", "programs", "balance", "participants", "deliveries", "audit", "resolve": return try query(verb, args)
        case "events": return try events(args)
        case "export": return try export(args)
        case "head": return try head(args)
        case "backup": return try backup(args)
        case "status": return try status(args)
        case "verify": return try verify(args)
        case "rebuild": return try rebuild(args)
        case "deliver": return try deliver(args)
        case "serve": return try serve(args)
        case "checkpoint": return try checkpoint(args)
        case "keygen": return try keygen(args)
        default:
            throw Arguments.UsageError(message: "unknown verb \"\(verb)\"")
        }
    }

    func submit(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: [], files: 1)
        var fd: Int32 = 0
        if let path = a.positional.first, path != "-" {  // `-` is stdin, as for verify
            fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw LedgerError(code: "unreadable_input", message: "cannot read \(path): \(String(cString: strerror(errno)))") }
        }
        let ledger = try openWriter()
        let feed = LineFeed(fd: fd, maxLineBytes: LineFeed.commandLineLimit)
        // The next take is read and parsed on another thread while this one is decided.
        let ahead = SubmitReadAhead(feed: feed)
        while let taken = ahead.next() {
            func write(_ results: [CommandResult], committed: Bool = true) throws {
                for result in results { out.line(result.bytes) }
                // The batch is committed: results that cannot be written stop the run (each later batch
                // would be decided with nobody told), and say how to get them again.
                try out.finish(committed
                    ? "the results of the last \(results.count) commands (they are decided and recorded: read what they appended with `events`, or send those that carry an id again to get their results)"
                    : "the refusal of a line over \(LineFeed.commandLineLimit >> 20) MiB (nothing of it was recorded)")
            }
            // Each transaction's results are written before anything else is decided: a failure
            // later in the take never leaves a recorded command unanswered.
            for part in taken {
                switch part {
                case .commands(let batch):
                    try write(try ledger.submit(batch))
                case .tooLong(let bytes):
                    try write([.refused(.invalid("the line is \(bytes) bytes long, over the \(LineFeed.commandLineLimit >> 20) MiB a command may be: it was skipped; split it (an inventory.import, say) into several commands"))], committed: false)
                }
            }
        }
        if let error = feed.error { throw LedgerError(code: "unreadable_input", message: "reading the commands failed: \(error)") }
        Self.saveStateSnapshot(ledger)
        return 0
    }

    /// The events between state snapshots: `$REFERRAL_LEDGER_SNAPSHOT_INTERVAL`, else 50,000.
    static func snapshotInterval() throws -> UInt64 {
        guard let text = ProcessInfo.processInfo.environment["REFERRAL_LEDGER_SNAPSHOT_INTERVAL"] else { return Ledger.snapshotInterval }
        guard let interval = UInt64(text) else {
            throw Arguments.UsageError(message: "REFERRAL_LEDGER_SNAPSHOT_INTERVAL must be a whole number of events, not \"\(text)\"")
        }
        return interval
    }

    /// Opens the data folder for writing (`submit`, `serve`, `deliver`).
    func openWriter(log: (String) -> Void = { Terminal.error($0) }) throws -> Ledger {
        let ledger = try Ledger(folder: folder, snapshotInterval: try Self.snapshotInterval())
        if let error = ledger.snapshotErrorAtOpen {
            log("warning: the state snapshot was not saved at the open (the next open folds the log again; saves wait ten minutes before they try again): \(error)")
        }
        return ledger
    }

    /// Saves the writer's state snapshot when enough events were folded since the last one (the
    /// next open loads it and folds only the events after it). A shortcut only: a failure is
    /// reported (through `log`) and changes nothing else.
    static func saveStateSnapshot(_ ledger: Ledger, log: (String) -> Void = { Terminal.error($0) }) {
        do { try ledger.saveStateSnapshot() } catch {
            log("warning: the state snapshot was not saved (the next open folds the events since the last one, or the whole log): \(error)")
        }
    }

    func query(_ verb: String, _ args: [String]) throws -> Int32 {
        let options: [String: [String]] = [
            "progress": ["app", "program", "user", "as-of"], "rewards": ["app", "user", "program", "limit", "cursor", "as-of"],
            "program": ["app", "program", "as-of"], "programs": ["app", "limit", "cursor", "as-of"], "balance": ["app", "user", "as-of"], "resolve": ["app", "input", "as-of"],
            "participants": ["app", "program", "user", "user-prefix", "status", "limit", "cursor", "as-of"],
            "deliveries": ["app", "program", "user", "status", "limit", "cursor", "as-of"],
            "audit": ["app", "program", "user", "type", "limit", "cursor", "as-of"],
        ]
        // Each verb takes only its own options: an option it would ignore is refused, not dropped.
        // An empty --input is asked like any other text (and refused as `invalid_code`, as over HTTP).
        let a = try Arguments(args, valued: Set(options[verb] ?? []), mayBeEmpty: ["input"])
        let ledger = try Ledger(readingFolder: folder)
        let asOf = try a.integer("as-of").map(UInt64.init)
        let app = try a.required("app")
        let answer: JSONValue
        switch verb {
        case "progress":
            answer = try ledger.progress(app: app, program: try a.required("program"), user: try a.required("user"), asOf: asOf)
        case "rewards":
            answer = try ledger.rewards(app: app, user: try a.required("user"), program: a.flags["program"], limit: try a.limit(),
                                        cursor: try a.integer("cursor").map(UInt64.init), asOf: asOf)
        case "program":
            answer = try ledger.program(app: app, program: try a.required("program"), asOf: asOf)
        case "programs":
            answer = try ledger.programs(app: app, limit: try a.limit() ?? 100, cursor: a.flags["cursor"], asOf: asOf)
        case "resolve":
            guard let input = a.flags["input"] else { throw Arguments.UsageError(message: "--input is required") }
            answer = try ledger.resolve(app: app, input: input, asOf: asOf)
        case "balance":
            answer = try ledger.balance(app: app, user: try a.required("user"), asOf: asOf)
        case "participants":
            answer = try ledger.participants(app: app, program: try a.required("program"), user: a.flags["user"], userPrefix: a.flags["user-prefix"] ?? "",
                                             status: a.flags["status"], limit: try a.limit() ?? 100, cursor: a.flags["cursor"], asOf: asOf)
        case "deliveries":
            answer = try ledger.deliveries(app: app, program: a.flags["program"], user: a.flags["user"], status: a.flags["status"], limit: try a.limit() ?? 100,
                                           cursor: a.flags["cursor"], asOf: asOf)
        default:
            answer = try ledger.audit(app: app, program: a.flags["program"], user: a.flags["user"], type: a.flags["type"], limit: try a.limit() ?? 100,
                                      after: UInt64(try a.integer("cursor") ?? 0), asOf: asOf)
        }
        out.line(answer)
        return 0
    }

    func events(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["from", "limit"])
        let ledger = try Ledger(readingFolder: folder, forQueries: false)
        var from = UInt64(try a.integer("from") ?? 1)
        var left = try a.limit() ?? Int.max
        while left > 0 {
            let (page, next) = try ledger.events(from: from, limit: min(left, 1000))
            for value in page { out.line(value) }
            left -= page.count
            guard let next else { break }
            from = next
        }
        return 0
    }

    func export(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["out"])
        let ledger = try Ledger(readingFolder: folder, forQueries: false)
        if let path = a.flags["out"] {
            try writeWhole(path) { target in try exportAll(ledger, to: target) }
            return 0
        }
        try exportAll(ledger, to: out)
        return 0
    }

    /// Writes a file whole or not at all (`WholeFile`): into a temporary file beside it, synced, then
    /// renamed over `path`, its folder synced. A full disk leaves the old file (or none), never a shorter one that reads as a
    /// shorter history. The ledger's own files are refused: writing one could only destroy the ledger.
    func writeWhole(_ requested: String, _ body: (Output) throws -> Void) throws {
        // Standard output by name writes where standard output goes (appending when the shell does).
        if Self.namesStandardOutput(requested) {
            try body(out)
            try out.finish("the output")
            return
        }
        // A link is followed (the file it names is replaced, not the link); a pipe or a device
        // (`/dev/stdout`, a FIFO) is written into as it is: there is no whole file to swap in.
        var path = requested
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK, let resolved = LedgerFolder.resolvedPath(path) { path = resolved }
        if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
            guard info.st_mode & S_IFMT != S_IFDIR else {
                throw LedgerError(code: "unwritable_output", message: "\(requested) is a folder; give a file to write")
            }
            try refuseLedgerFile(path)
            let fd = open(path, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw Self.unwritable(requested) }
            defer { close(fd) }
            let target = Output(fd: fd)
            try body(target)
            try target.finish(requested)
            return
        }
        try refuseLedgerFile(path)
        Self.removeAbandonedPartials(of: path)
        try WholeFile.write(path, permissions: 0o644, failure: { _ in Self.unwritable(path) }) { fd in
            let target = Output(fd: fd)
            try body(target)
            try target.finish(path)
        }
    }

    /// Removes `PATH.partial-PID` files left by writers of `path` that were killed mid-write: no
    /// process PID runs here any more, and the file has not changed for 10 minutes (a writer on
    /// another machine sharing the folder has a PID of its own, and is still writing).
    static func removeAbandonedPartials(of path: String) {
        let (directory, name) = WholeFile.split(path)
        let prefix = name + WholeFile.partialSuffix
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where name.hasPrefix(prefix) {
            guard let pid = Int32(name.dropFirst(prefix.count)), pid > 0, pid != getpid() else { continue }
            let file = directory + "/" + name
            guard kill(pid, 0) != 0 && errno == ESRCH,
                  let changed = (try? FileManager.default.attributesOfItem(atPath: file))?[.modificationDate] as? Date,
                  changed.timeIntervalSinceNow < -600 else { continue }
            unlink(file)
        }
    }

    /// `unwritable_output` for `path`, with the reason `errno` gives.
    static func unwritable(_ path: String) -> LedgerError {
        LedgerError(code: "unwritable_output", message: "cannot write \(path): \(String(cString: strerror(errno)))")
    }

    /// Whether an `--out` path names standard output.
    static func namesStandardOutput(_ path: String) -> Bool { ["-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"].contains(path) }

    /// An output file must not replace the ledger's own files (`--out DATA/data.mdb` would destroy it).
    func refuseLedgerFile(_ path: String) throws {
        let (parent, name) = WholeFile.split(path)
        guard LedgerFolder.storageFiles.contains(name), let directory = LedgerFolder.resolvedPath(parent) else { return }
        if directory == LedgerFolder.resolvedPath(folder) {
            throw LedgerError(code: "unwritable_output", message: "\(path) is the ledger's own \(name) in the data folder \(folder): writing it would destroy the ledger; write elsewhere")
        }
        // Another ledger's folder (not the one `--data` names) is no place for an output either.
        if FileManager.default.fileExists(atPath: directory + "/data.mdb") {
            throw LedgerError(code: "unwritable_output", message: "\(path) is a ledger's own \(name) (\(parent) holds a ledger): writing it would destroy that ledger; write elsewhere")
        }
    }

    /// An output file must not replace an input of the same run (`checkpoint --key K --out K`
    /// would replace the signing key with the checkpoint).
    func refuseSameFile(_ out: String, as input: String, _ what: String) throws {
        guard let target = LedgerFolder.resolvedPath(out), target == LedgerFolder.resolvedPath(input) else { return }
        throw LedgerError(code: "unwritable_output", message: "\(out) is \(what): writing it would replace it; write elsewhere")
    }

    private func exportAll(_ ledger: Ledger, to target: Output) throws {
        var from: UInt64 = 1
        while true {
            let (page, next) = try ledger.events(from: from, limit: 1000)
            for value in page { target.line(value) }
            guard let next else { break }
            from = next
        }
        target.flush()
    }

    func head(_ args: [String]) throws -> Int32 {
        _ = try Arguments(args, valued: [])
        let head = try Ledger(readingFolder: folder, forQueries: false).currentHead()
        out.line(["head_position": .int(Int64(head.position)), "head_hash": .string(head.hash)])
        return 0
    }

    func status(_ args: [String]) throws -> Int32 {
        _ = try Arguments(args, valued: [])
        var status = try Ledger(readingFolder: folder, forQueries: false).status()
        status["allocator"] = .string(Allocator.description)
        out.line(status)
        return 0
    }

    func backup(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["out"])
        let target = try a.required("out")
        let ledger = try Ledger(readingFolder: folder, forQueries: false)
        let made = try ledger.backup(to: target)
        out.done = "the backup in \(target) is complete, at position \(made.head.position)"
        out.line(["backup": .string(target), "head_position": .int(Int64(made.head.position)), "head_hash": .string(made.head.hash),
                  "projections": .string(made.projections), "bytes": .int(made.bytes),
                  "state_snapshot": made.stateSnapshot.map { .int(Int64($0)) } ?? .null])
        return 0
    }

    func verify(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["until", "checkpoint", "public-key"], boolean: ["json", "text"], files: 1)
        if a.switches.isSuperset(of: ["json", "text"]) { throw Arguments.UsageError(message: "give --json or --text, not both") }
        let until = UInt64(try a.integer("until") ?? Int.max)
        var checkpoint: (Checkpoint, String)?
        if a.flags["checkpoint"] != nil || a.flags["public-key"] != nil {
            guard let cpPath = a.flags["checkpoint"], let keyPath = a.flags["public-key"] else {
                throw Arguments.UsageError(message: "--checkpoint and --public-key go together")
            }
            guard let cpText = try? String(contentsOfFile: cpPath, encoding: .utf8) else {
                Terminal.error(code: "unreadable_input", "cannot read the checkpoint \(cpPath)")
                return 2
            }
            guard let keyText = try? String(contentsOfFile: keyPath, encoding: .utf8) else {
                Terminal.error(code: "unreadable_input", "cannot read the public key \(keyPath)")
                return 2
            }
            // A checkpoint or key that cannot be read is unreadable input (exit 2), like a missing one:
            // exit 1 is kept for a report of violations.
            do {
                let cp = try Checkpoint(json: try JSONValue(parsing: cpText))
                _ = try Ed25519.verify([], signatureHex: String(repeating: "0", count: 128), publicKeyPEM: keyText)
                checkpoint = (cp, keyText)
                if until < cp.headPosition {
                    throw Arguments.UsageError(message: "--until \(until) stops before the checkpoint's position \(cp.headPosition): verify at least through \(cp.headPosition) to check the checkpoint")
                }
            } catch let usage as Arguments.UsageError {
                throw usage
            } catch {
                Terminal.error(code: "unreadable_input", "cannot use the checkpoint \(cpPath) with the public key \(keyPath): \(error)")
                return 2
            }
        }
        // Once the whole log is replayed, the stored projections are compared with a fresh fold
        // (seconds on a long ledger): the bar says so rather than stand still at its end.
        let bar = Terminal.isTTY(2) ? Terminal.ProgressBar(label: "verify", then: a.flags["until"] == nil ? "comparing the stored projections with a fresh fold" : nil) : nil
        let report: VerificationReport
        if let path = a.positional.first {
            var isDirectory: ObjCBool = false
            guard path == "-" || (FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue),
                  var lines = Self.readLines(path) else {
                Terminal.error(code: "unreadable_input", "cannot read \(path): give an export file (one stored value per line), - for standard input, or no file to verify the data folder")
                return 2
            }
            // Blank lines at the end (an editor's last newline) are not values.
            while let last = lines.last, last.allSatisfy({ $0 == 0x20 || $0 == 0x0D || $0 == 0x09 }) { lines.removeLast() }
            report = try Ledger.verify(exportLines: lines, until: until, checkpoint: checkpoint)
        } else {
            let ledger: Ledger
            do { ledger = try Ledger(readingFolder: folder, forQueries: false) } catch let e as CodedError {
                // Could not run: exit 2, with the error's own code (`no_ledger`, `storage_error`).
                Terminal.error(code: e.errorCode, Self.message(of: e, folder: folder))
                return 2
            } catch {
                Terminal.error(code: "unreadable_input", "\(error)")
                return 2
            }
            report = try ledger.verify(until: until, checkpoint: checkpoint) { done, total in bar?.update(done, total) }
            bar?.finish(events: report.events)
        }
        if a.switches.contains("text") { out.line(report.text) } else { out.line(report.json) }
        return report.isClean ? 0 : 1
    }

    /// Every line of a file, a pipe (`/dev/stdin`, a shell's `<(…)`) or standard input (`-`), read
    /// to its end by the same `LineFeed` as `submit`'s input; nil when it cannot be opened or read.
    static func readLines(_ path: String) -> [[UInt8]]? {
        let fd = path == "-" ? 0 : open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { if fd != 0 { close(fd) } }
        let feed = LineFeed(fd: fd)
        var lines: [[UInt8]] = []
        while case let taken = feed.take(max: .max), !taken.isEmpty {
            for case .text(let line) in taken { lines.append(line) }  // (no line is too long: no limit is set)
        }
        return feed.error == nil ? lines : nil
    }

    func keygen(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["out"])
        let path = try a.required("out")
        if Self.namesStandardOutput(path) {
            throw Arguments.UsageError(message: "keygen writes a private key file (mode 600) and its .pub: give a file path, not standard output")
        }
        for file in [path, path + ".pub"] where FileManager.default.fileExists(atPath: file) || (try? FileManager.default.destinationOfSymbolicLink(atPath: file)) != nil {
            throw LedgerError(code: "exists", message: "\(file) already exists; keygen never overwrites a key")
        }
        let (privateKey, publicKey) = try Ed25519.generateKeyPair()
        // Each file is created new (O_EXCL: never through a link, never over a file made meanwhile)
        // with its final mode, so the private key is never readable by others, not for a moment.
        try Self.createNew(path, mode: 0o600, Array(privateKey.utf8))
        do {
            try Self.createNew(path + ".pub", mode: 0o644, Array(publicKey.utf8))
        } catch {
            unlink(path)  // all or nothing: no private key without its public half
            throw error
        }
        out.done = "the key pair is written: \(path) and \(path).pub"
        out.line(["private_key": .string(path), "public_key": .string(path + ".pub")])
        return 0
    }

    /// Writes `bytes` to a file that must not exist yet, created with `mode`.
    static func createNew(_ path: String, mode: mode_t, _ bytes: [UInt8]) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else {
            let reason = String(cString: strerror(errno))
            throw LedgerError(code: errno == EEXIST ? "exists" : "unwritable_output", message: "cannot create \(path): \(reason)")
        }
        defer { close(fd) }
        _ = fchmod(fd, mode)  // created with at most `mode` (the umask narrows it), then given exactly it
        do {
            let target = Output(fd: fd)
            target.append(bytes)
            try target.finish(path)
            guard fsync(fd) == 0 else { throw Self.unwritable(path) }
        } catch {
            unlink(path)
            throw error
        }
    }

    func checkpoint(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["key", "out"])
        let keyPath = try a.required("key")
        if let path = a.flags["out"] {  // before any work
            try refuseLedgerFile(path)
            try refuseSameFile(path, as: keyPath, "the signing key given with --key")
        }
        guard let key = try? String(contentsOfFile: keyPath, encoding: .utf8) else {
            throw LedgerError(code: "unreadable_input", message: "cannot read the private key \(keyPath)")
        }
        let head = try Ledger(readingFolder: folder, forQueries: false).confirmedHead()
        let cp = try Checkpoint.sign(head, privateKeyPEM: key)
        if let path = a.flags["out"] {
            try writeWhole(path) { target in target.line(cp.json) }
            if Self.namesStandardOutput(path) { return 0 }  // printed once, not twice
            out.done = "the checkpoint is written to \(path)"
        }
        out.line(cp.json)
        return 0
    }

    func rebuild(_ args: [String]) throws -> Int32 {
        _ = try Arguments(args, valued: [])
        // SPEC §10: rebuild shows its progress, on a terminal as a bar, in a log as lines. A reader
        // of those lines that goes away does not kill the rebuild halfway (SIGPIPE is ignored, see
        // `run`): writes to a closed pipe fail instead, and the rebuild goes on.
        let bar = Terminal.ProgressBar(label: "rebuild", plain: !Terminal.isTTY(2), then: "writing the projections")
        let started = Timestamp.now()
        try LedgerFolder.requireLedger(folder)
        let ledger = try Ledger(folder: folder, rebuildingProjections: true, snapshotInterval: try Self.snapshotInterval()) { done, total in
            bar.update(done, total)
        }
        let count = try ledger.currentHead().position
        bar.finish(events: count)
        let seconds = Double(Timestamp.now().milliseconds - started.milliseconds) / 1000
        out.done = "the rebuild is done: the projections are current with all \(count) events"
        out.line(["rebuilt": true, "events": .int(Int64(count)), "seconds": .double(seconds)])
        out.flush()
        // The rebuild dropped the state snapshot with the projections: a new one from its fold
        // (encoded while the projections were written, written now that they are committed).
        Self.saveStateSnapshot(ledger)
        return 0
    }
}
