import Foundation
import LedgerCodec
import XCTest

/// The `referral-ledger` executable, run as a user would: JSON out, errors on stderr with a
/// non-zero exit, the data folder rule, crash safety under kill -9, and the py-lmdb audit.
final class CLITests: XCTestCase {
    private var folder = ""

    override func setUp() {
        folder = NSTemporaryDirectory() + "referral-ledger-cli-" + UUID().uuidString
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func commands(_ count: Int) -> String {
        (0..<count).map { n in
            #"{"type":"account.verify","app":"acme","id":"v\#(n)","at":"2026-01-01T00:00:00Z","user":"u\#(n)","account_created_at":"2026-01-01T00:00:00Z"}"#
        }.joined(separator: "\n") + "\n"
    }

    /// Writers save the state snapshot at their open and as they finish when enough events came
    /// since the last one (`$REFERRAL_LEDGER_SNAPSHOT_INTERVAL`, 50,000 unless set); `rebuild`
    /// drops it and saves a new one from its fold.
    func testWritersSaveTheStateSnapshotWhenDue() throws {
        var environment = ProcessInfo.processInfo.environment
        func submit(_ count: Int) throws {
            let run = try CLIRun.run(["--data", folder, "submit"], stdin: commands(count), environment: environment)
            XCTAssertEqual(run.status, 0, run.stderr)
        }
        func snapshot() throws -> JSONValue { try XCTUnwrap(try CLIRun.run(["--data", folder, "status"]).lines.first)["state_snapshot"] }
        try submit(5)
        XCTAssertEqual(try snapshot(), .null, "5 events are not worth a snapshot")
        environment["REFERRAL_LEDGER_SNAPSHOT_INTERVAL"] = "3"
        try submit(6)  // the open saves at 5; one more event is not enough at the end
        XCTAssertEqual(try snapshot()["position"], 5)
        XCTAssertEqual(try snapshot()["this_build"], true)
        try submit(10)  // four more: saved as it finishes
        XCTAssertEqual(try snapshot()["position"], 10)
        environment["REFERRAL_LEDGER_SNAPSHOT_INTERVAL"] = "1000"
        try submit(11)
        XCTAssertEqual(try snapshot()["position"], 10)
        environment["REFERRAL_LEDGER_SNAPSHOT_INTERVAL"] = "1"
        let deliver = try CLIRun.run(["--data", folder, "deliver", "--once"], environment: environment)
        XCTAssertEqual(deliver.status, 0, deliver.stderr)
        XCTAssertEqual(try snapshot()["position"], 11, "deliver's open saved it")
        XCTAssertEqual(try CLIRun.run(["--data", folder, "rebuild"], environment: environment).status, 0)
        XCTAssertEqual(try snapshot()["position"], 11, "saved again after the rebuild")
        environment["REFERRAL_LEDGER_SNAPSHOT_INTERVAL"] = "1000"
        XCTAssertEqual(try CLIRun.run(["--data", folder, "rebuild"], environment: environment).status, 0)
        XCTAssertEqual(try snapshot(), .null, "dropped by the rebuild")
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify"]).status, 0)
        environment["REFERRAL_LEDGER_SNAPSHOT_INTERVAL"] = "lots"
        let refused = try CLIRun.run(["--data", folder, "submit"], stdin: commands(1), environment: environment)
        XCTAssertEqual(refused.status, 2)
        XCTAssertTrue(refused.stderr.contains("REFERRAL_LEDGER_SNAPSHOT_INTERVAL must be a whole number"), refused.stderr)
    }

    func testSubmitAnswersOneLinePerCommandAndGoesOnAfterAMalformedLine() throws {
        let input = #"{"type":"app.configure","app":"acme","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"# + "\n" +
            "not json\n\n" + #"{"type":"app.configure","app":"acme","settings":{}}"# + "\n"
        let run = try CLIRun.run(["--data", folder, "submit"], stdin: input)
        XCTAssertEqual(run.status, 0, run.stderr)
        let lines = run.lines
        XCTAssertEqual(lines.count, 3)
        XCTAssertEqual(lines[0]["position"], 1)
        XCTAssertEqual(lines[1]["error"]["code"], "invalid_command")
        XCTAssertEqual(lines[2]["position"], 2)
        // A missing `at` is filled in with the current time and recorded.
        let events = try CLIRun.run(["--data", folder, "events", "--from", "2"])
        let at = events.lines.first?["at"].stringValue ?? ""
        XCTAssertNotNil(Timestamp(rfc3339: at))
        XCTAssertTrue(at.hasPrefix("20"), at)
        // `-` names stdin too, as for verify.
        let dash = try CLIRun.run(["--data", folder, "submit", "-"], stdin: #"{"type":"app.configure","app":"acme","settings":{}}"# + "\n")
        XCTAssertEqual(dash.status, 0, dash.stderr)
        XCTAssertEqual(dash.lines.first?["position"], 3)
    }

    /// A line over the 64 MiB a command may be is skipped to its end, not held in memory, and
    /// refused in its place; the lines around it go on.
    func testALineTooLongForACommandIsRefusedAndTheRestGoOn() throws {
        let command = #"{"type":"app.configure","app":"acme","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#
        var huge = Data(#"{"type":"app.configure","app":"acme","settings":{"share_link_host":""#.utf8)
        huge.append(Data(repeating: UInt8(ascii: "a"), count: 65 << 20))
        huge.append(Data(#""}}"#.utf8))
        // First, a line one byte over the limit, its newline in the next read of 64 KiB.
        var input = Data(repeating: UInt8(ascii: "x"), count: (64 << 20) + 1)
        input.append(Data("\n".utf8))
        // A blank line is skipped (no result), however long.
        input.append(Data(repeating: UInt8(ascii: " "), count: 65 << 20))
        input.append(Data(("\r\n" + command + "\n").utf8))
        input.append(huge)
        input.append(Data(("\n" + command + "\n").utf8))
        input.append(huge)  // the last line, with no newline after it
        let path = folder + "-input.jsonl"
        defer { try? FileManager.default.removeItem(atPath: path) }
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: input))
        let run = try CLIRun.run(["--data", folder, "submit", path])
        XCTAssertEqual(run.status, 0, run.stderr)
        let lines = run.lines
        XCTAssertEqual(lines.count, 5, run.stdout)
        XCTAssertTrue(lines.first?["error"]["message"].stringValue?.contains("\((64 << 20) + 1) bytes long, over the 64 MiB") ?? false, run.stdout)
        XCTAssertEqual(lines.dropFirst(1).first?["position"], 1)
        XCTAssertEqual(lines.dropFirst(3).first?["position"], 2)
        for refused in [lines.dropFirst(2).first, lines.last] {
            XCTAssertEqual(refused?["error"]["code"], "invalid_command")
            let message = refused?["error"]["message"].stringValue ?? ""
            XCTAssertTrue(message.contains("\(huge.count) bytes long, over the 64 MiB"), message)
        }
    }

    func testDataFolderComesFromTheEnvironmentAndQueriesFailOnStderr() throws {
        var env = ProcessInfo.processInfo.environment
        env["REFERRAL_LEDGER_DATA"] = folder
        let run = try CLIRun.run(["submit"], stdin: commands(2), environment: env)
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: folder + "/data.mdb"))
        let head = try CLIRun.run(["head"], environment: env)
        XCTAssertEqual(head.lines.first?["head_position"], 2)
        let programs = try CLIRun.run(["programs", "--app", "acme"], environment: env)
        XCTAssertEqual(programs.status, 0, programs.stderr)
        XCTAssertEqual(programs.lines.first, ["app": "acme", "programs": [], "next_cursor": .null])
        let status = try CLIRun.run(["--data", folder, "status"])
        XCTAssertEqual(status.lines.first?["head_position"], 2)
        XCTAssertEqual(status.lines.first?["projections"]["state"], "current")
        XCTAssertEqual(status.lines.first?["writer_running"], false)
        // The executable runs on jemalloc (linked in place of glibc's malloc), and says so.
        XCTAssertTrue(status.lines.first?["allocator"].stringValue?.hasPrefix("jemalloc 5.") == true, status.stdout)
        // A backup opens as a data folder at the head it reports.
        defer { try? FileManager.default.removeItem(atPath: folder + "-copy") }
        let backup = try CLIRun.run(["--data", folder, "backup", "--out", folder + "-copy"])
        XCTAssertEqual(backup.status, 0, backup.stderr)
        XCTAssertEqual(backup.lines.first?["head_position"], 2)
        XCTAssertEqual(try CLIRun.run(["--data", folder + "-copy", "head"]).lines.first?["head_hash"], backup.lines.first?["head_hash"])
        let again = try CLIRun.run(["--data", folder, "backup", "--out", folder + "-copy"])
        XCTAssertEqual(again.status, 1)
        XCTAssertEqual((try? JSONValue(parsing: again.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))?["error"]["code"], "backup_target_exists")
        let missing = try CLIRun.run(["--data", folder, "progress", "--app", "acme", "--program", "nope", "--user", "u1"])
        XCTAssertNotEqual(missing.status, 0)
        XCTAssertEqual(missing.stdout, "")
        XCTAssertEqual((try? JSONValue(parsing: missing.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))?["error"]["code"], "unknown_program")
        let usage = try CLIRun.run(["--data", folder, "progress", "--app", "acme"])
        XCTAssertEqual(usage.status, 2)
        XCTAssertTrue(usage.stderr.contains("--program is required"), usage.stderr)
        // An option the verb does not take is refused, never silently ignored.
        for args in [["audit", "--app", "acme", "--status", "ready"], ["progress", "--app", "acme", "--program", "p", "--user", "u", "--limit", "3"],
                     ["balance", "--app", "acme", "--user", "u", "--program", "p"], ["audit", "--app", "acme", "--limit", "0"],
                     ["programs", "--app", "acme", "--program", "p"], ["programs", "--app", "acme", "--limit", "0"],
                     ["backup"], ["backup", "--out", folder + "-copy", "extra"], ["status", "--app", "acme"],
                     ["events", "--limit", "0"], ["events", "--limit", "1", "--limit", "2"], ["verify", "--text", "--text"],
                     ["--data", "x", "head"],
                     // An unquoted ID with a space must not query its first word.
                     ["progress", "--app", "acme", "--program", "spring", "--user", "u1", "junk"], ["head", "extra"],
                     ["verify", "a.jsonl", "b.jsonl"], ["submit", "a.jsonl", "b.jsonl"], ["serve", "stray"], ["deliver", "--once", "stray"],
                     // An empty value (a script's unset variable) neither widens a query nor names a user "".
                     ["participants", "--app", "acme", "--program", "spring", "--user", ""],
                     ["participants", "--app", "acme", "--program", "spring", "--user-prefix="], ["rewards", "--app", "acme", "--user", "u1", "--program", ""],
                     ["programs", "--app", "acme", "--cursor", ""], ["audit", "--app", "acme", "--type", ""], ["export", "--out", ""]] {
            let refused = try CLIRun.run(["--data", folder] + args)
            XCTAssertEqual(refused.status, 2, "\(args): \(refused.stdout)")
            XCTAssertEqual(refused.stdout, "")
            // Errors are JSON, like every answer (SPEC §10).
            let error = try? JSONValue(parsing: refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines))
            XCTAssertEqual(error?["error"]["code"], "invalid_usage", "\(args): \(refused.stderr)")
        }
        // Arguments the query itself refuses answer the error HTTP answers (400 there).
        for (args, code) in [(["participants", "--app", "acme", "--program", "spring", "--user", "u1", "--user-prefix", "zz"], "invalid_query"),
                             (["resolve", "--app", "acme", "--input", ""], "invalid_code")] {
            let refused = try CLIRun.run(["--data", folder] + args)
            XCTAssertEqual(refused.status, 1, "\(args): \(refused.stdout)")
            XCTAssertEqual(refused.stdout, "")
            XCTAssertEqual((try? JSONValue(parsing: refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))?["error"]["code"], .string(code), "\(args): \(refused.stderr)")
        }
        for args in [[], ["frobnicate"], ["--data=", "head"]] {
            let refused = try CLIRun.run(args)
            XCTAssertEqual(refused.status, 2, "\(args)")
            XCTAssertEqual((try? JSONValue(parsing: refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))?["error"]["code"], "invalid_usage", "\(args): \(refused.stderr)")
        }
        for verb in ["submit", "progress", "rewards", "program", "programs", "backup", "status", "events", "export", "verify", "rebuild", "head", "participants", "deliveries", "audit", "balance"] {
            let help = try CLIRun.run([verb, "--help"])
            XCTAssertEqual(help.status, 0, verb)
            XCTAssertTrue(help.stdout.contains("referral-ledger \(verb)"), verb)
        }
        // Whoever signs or checks a checkpoint is told where its keys come from.
        for verb in ["checkpoint", "verify"] {
            XCTAssertTrue(try CLIRun.run([verb, "--help"]).stdout.contains("referral-ledger keygen --out FILE"), verb)
        }
    }

    /// `submit` whose reader went away stops after the batch it cannot answer, and says those
    /// commands are recorded (and how to get their results), instead of dying of SIGPIPE.
    func testSubmitIntoAClosedPipeSaysWhatWasRecorded() throws {
        let gone = Pipe()
        try gone.fileHandleForReading.close()
        let run = try CLIRun.run(["--data", folder, "submit"], stdin: commands(20), output: gone.fileHandleForWriting)
        XCTAssertEqual(run.status, 1, run.stderr)
        let error = try JSONValue(parsing: run.stderr.trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(error["error"]["code"], "unwritable_output")
        XCTAssertTrue(error["error"]["message"].stringValue?.contains("decided and recorded") == true, run.stderr)
        // What it said was recorded is: sent again, every command answers as a duplicate.
        let again = try CLIRun.run(["--data", folder, "submit"], stdin: commands(20))
        XCTAssertEqual(again.lines.count, 20)
        XCTAssertTrue(again.lines.allSatisfy { $0["duplicate"] == true }, again.stdout)
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify"]).status, 0)
    }

    /// A verb that did its work and then cannot print its report says the work is done (so that
    /// nobody repeats it), and the work is there.
    func testAReportThatCannotBeWrittenSaysWhatWasDone() throws {
        XCTAssertEqual(try CLIRun.run(["--data", folder, "submit"], stdin: commands(5)).status, 0)
        let key = folder + "-report.key", backup = folder + "-report-backup", signed = folder + "-report.cp"
        defer { for p in [key, key + ".pub", backup, signed] { try? FileManager.default.removeItem(atPath: p) } }
        let cases: [([String], String, String?)] = [
            (["keygen", "--out", key], "the key pair is written", key + ".pub"),
            (["--data", folder, "rebuild"], "the rebuild is done", nil),
            (["--data", folder, "backup", "--out", backup], "the backup in \(backup) is complete", backup + "/data.mdb"),
            (["--data", folder, "checkpoint", "--key", key, "--out", signed], "the checkpoint is written to \(signed)", signed),
            (["--data", folder, "deliver", "--once"], "what the worker did is recorded", nil),
        ]
        for (arguments, said, made) in cases {
            let full = try XCTUnwrap(FileHandle(forWritingAtPath: "/dev/full"))
            let run = try CLIRun.run(arguments, output: full)
            XCTAssertEqual(run.status, 1, "\(arguments): \(run.stderr)")
            let error = try JSONValue(parsing: try XCTUnwrap(run.stderr.split(separator: "\n").last.map(String.init), run.stderr))
            XCTAssertEqual(error["error"]["code"], "unwritable_output", run.stderr)
            XCTAssertTrue(error["error"]["message"].stringValue?.contains(said) == true, "\(arguments): \(run.stderr)")
            if let made { XCTAssertTrue(FileManager.default.fileExists(atPath: made), "\(arguments) made \(made)") }
        }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify", "--checkpoint", signed, "--public-key", key + ".pub"]).status, 0)
        XCTAssertEqual(try CLIRun.run(["--data", backup, "verify"]).status, 0)
    }

    /// An argument that is not UTF-8 is refused: Swift would read it with U+FFFD in place of its bad
    /// bytes, and query (or write) another user or file than the one typed.
    func testArgumentsThatAreNotUTF8AreRefused() throws {
        XCTAssertEqual(try CLIRun.run(["--data", folder, "submit"], stdin: commands(1)).status, 0)
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", #""$0" --data "$1" progress --app acme --program spring --user "$(printf 'a\377b')""#,
                           ProjectPaths.executable.path, folder]
        let err = Pipe()
        shell.standardError = err
        shell.standardOutput = FileHandle.nullDevice
        try shell.run()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        shell.waitUntilExit()
        XCTAssertEqual(shell.terminationStatus, 2, stderr)
        let error = try JSONValue(parsing: stderr.trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(error["error"]["code"], "invalid_usage")
        XCTAssertTrue(error["error"]["message"].stringValue?.contains("argument 9 is not valid UTF-8") == true, stderr)
    }

    func testExportVerifiesAloneAndAFlippedByteIsCaught() throws {
        _ = try CLIRun.run(["--data", folder, "submit"], stdin: commands(50))
        let file = folder + "-export.jsonl"
        defer { try? FileManager.default.removeItem(atPath: file) }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "export", "--out", file]).status, 0)
        let clean = try CLIRun.run(["verify", file])
        XCTAssertEqual(clean.status, 0, clean.stdout)
        XCTAssertEqual(clean.lines.first?["events"], 50)
        // The export piped in: `verify -` reads standard input to its end.
        let piped = try CLIRun.run(["verify", "-"], stdin: try String(contentsOfFile: file, encoding: .utf8))
        XCTAssertEqual(piped.status, 0, piped.stdout + piped.stderr)
        XCTAssertEqual(piped.lines.first?["events"], 50)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let index = bytes.firstRange(of: Data("\"u17\"".utf8))!.lowerBound + 2
        bytes[index] = UInt8(ascii: "8")
        try bytes.write(to: URL(fileURLWithPath: file))
        let broken = try CLIRun.run(["verify", file])
        XCTAssertEqual(broken.status, 1)
        let rules = broken.lines.first?["violations"].arrayValue?.compactMap { $0["rule"].stringValue } ?? []
        XCTAssertTrue(rules.contains("chain.prev_hash"), "\(rules)")
        XCTAssertEqual(try CLIRun.run(["verify", folder + "/no-such-file"]).status, 2)
    }

    /// What an operator's slip must not do: an output file in the data folder (refused, the ledger
    /// intact), output that cannot be written (an error, not exit 0), a cut-short data file (an
    /// error, not a crash), a mistyped folder for rebuild or deliver (no new empty ledger).
    func testOperatorSlipsAreRefusedAndLoseNothing() throws {
        _ = try CLIRun.run(["--data", folder, "submit"], stdin: commands(20))
        let head = try CLIRun.run(["--data", folder, "head"]).stdout
        for verb in [["export", "--out", folder + "/data.mdb"], ["export", "--out", folder + "/../" + (folder as NSString).lastPathComponent + "/lock.mdb"],
                     ["checkpoint", "--key", folder + "-no-key", "--out", folder + "/writer.lock"]] {
            let refused = try CLIRun.run(["--data", folder] + verb)
            XCTAssertEqual(refused.status, 1, refused.stderr)
            XCTAssertTrue(refused.stderr.contains("unwritable_output"), refused.stderr)
        }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "head"]).stdout, head)
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify"]).status, 0)
        // A link is followed, not replaced; a link to the data folder is a folder, not a file to replace.
        let file = folder + "-export.jsonl", link = folder + "-link", folderLink = folder + "-data-link"
        defer { for p in [file, link, folderLink] { try? FileManager.default.removeItem(atPath: p) } }
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data()))
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
        XCTAssertEqual(try CLIRun.run(["--data", folder, "export", "--out", link]).status, 0)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link), file)
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").count, 20)
        try FileManager.default.createSymbolicLink(atPath: folderLink, withDestinationPath: folder)
        XCTAssertEqual(try CLIRun.run(["--data", folderLink, "export", "--out", folderLink]).status, 1)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: folderLink), folder)
        // A reader that went away (`export | head -1`): the verb fails, saying so, not killed by SIGPIPE.
        let gone = Pipe()
        try gone.fileHandleForReading.close()
        let cut = try CLIRun.run(["--data", folder, "export"], output: gone.fileHandleForWriting)
        XCTAssertEqual(cut.status, 1, cut.stderr)
        XCTAssertTrue(cut.stderr.contains("unwritable_output"), cut.stderr)
        if let full = FileHandle(forWritingAtPath: "/dev/full") {
            // Standard output on a full disk: the verb fails, saying so.
            let run = try CLIRun.run(["--data", folder, "export"], output: full)
            XCTAssertEqual(run.status, 1, run.stderr)
            XCTAssertTrue(run.stderr.contains("unwritable_output"), run.stderr)
        }
        // `-` is standard output, for `checkpoint --out` too (printed once).
        let keyFile = folder + "-ops.key"
        defer { for p in [keyFile, keyFile + ".pub"] { try? FileManager.default.removeItem(atPath: p) } }
        XCTAssertEqual(try CLIRun.run(["keygen", "--out", keyFile]).status, 0)
        let signed = try CLIRun.run(["--data", folder, "checkpoint", "--key", keyFile, "--out", "-"])
        XCTAssertEqual(signed.status, 0, signed.stderr)
        XCTAssertEqual(signed.lines.count, 1, signed.stdout)
        for verb in ["rebuild", "deliver"] {
            let missing = folder + "-typo"
            let run = try CLIRun.run(["--data", missing, verb] + (verb == "deliver" ? ["--once"] : []))
            XCTAssertEqual(run.status, 1, run.stderr)
            XCTAssertTrue(run.stderr.contains("no_ledger") && run.stderr.contains("give --data DIR"), run.stderr)
            XCTAssertFalse(FileManager.default.fileExists(atPath: missing))
        }
        // verify could not run (exit 2), and says so with the same code and the CLI's words.
        for verb in [["verify"], ["verify", "--json"], ["head"], ["status"]] {
            let missing = folder + "-typo"
            let run = try CLIRun.run(["--data", missing] + verb)
            XCTAssertEqual(run.status, verb[0] == "verify" ? 2 : 1, "\(verb): \(run.stderr)")
            XCTAssertTrue(run.stderr.contains("\"no_ledger\"") && run.stderr.contains("give --data DIR"), "\(verb): \(run.stderr)")
            XCTAssertFalse(run.stderr.contains("Ledger(folder:)"), "\(verb): the library's words: \(run.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: missing))
        }
        // A copy cut short: an error naming the file, never a crash.
        let copy = folder + "-cut"
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try FileManager.default.copyItem(atPath: folder, toPath: copy)
        let data = copy + "/data.mdb"
        let size = try FileManager.default.attributesOfItem(atPath: data)[.size] as! Int
        XCTAssertEqual(truncate(data, off_t(size / 2)), 0)
        for verb in [["head"], ["verify"], ["events"]] {
            let cut = try CLIRun.run(["--data", copy] + verb)
            XCTAssertTrue([1, 2].contains(cut.status), "\(verb): \(cut.status) \(cut.stderr)")
            XCTAssertTrue(cut.stderr.contains("cut short"), cut.stderr)
        }
    }

    /// kill -9 during a long submit, then the same input again: nothing acknowledged is lost,
    /// acknowledged commands come back as duplicates, and the ledger equals an uninterrupted run.
    /// Keys and checkpoints: a private key is created new with mode 600 (never readable by others,
    /// never over an existing file, never without its .pub); a checkpoint never replaces its own
    /// signing key; `--until` before the checkpoint's position is a usage error, not a false alarm.
    func testKeysAndCheckpointsAreHandledWithCare() throws {
        _ = try CLIRun.run(["--data", folder, "submit"], stdin: commands(20))
        let key = folder + "-ops.key", orphan = folder + "-other.key"
        defer { for p in [key, key + ".pub", orphan, orphan + ".pub"] { try? FileManager.default.removeItem(atPath: p) } }
        XCTAssertEqual(try CLIRun.run(["keygen", "--out", key]).status, 0)
        let mode = try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as! Int
        XCTAssertEqual(mode, 0o600)
        let privateKey = try String(contentsOfFile: key, encoding: .utf8)
        XCTAssertTrue(try CLIRun.run(["keygen", "--out", key]).stderr.contains("exists"))
        // Only the .pub is there: nothing is written, and no private key is left behind.
        XCTAssertTrue(FileManager.default.createFile(atPath: orphan + ".pub", contents: Data("mine".utf8)))
        let refused = try CLIRun.run(["keygen", "--out", orphan])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("\(orphan).pub already exists"), refused.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: orphan))
        XCTAssertEqual(try String(contentsOfFile: orphan + ".pub", encoding: .utf8), "mine")
        XCTAssertEqual(try CLIRun.run(["keygen", "--out", "-"]).status, 2, "a private key is not printed")
        // The checkpoint's output is not its key.
        let overKey = try CLIRun.run(["--data", folder, "checkpoint", "--key", key, "--out", key])
        XCTAssertEqual(overKey.status, 1, overKey.stderr)
        XCTAssertTrue(overKey.stderr.contains("unwritable_output"), overKey.stderr)
        XCTAssertEqual(try String(contentsOfFile: key, encoding: .utf8), privateKey)
        let checkpoint = folder + "-cp.json"
        defer { try? FileManager.default.removeItem(atPath: checkpoint) }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "checkpoint", "--key", key, "--out", checkpoint]).status, 0)
        let pinned = ["--checkpoint", checkpoint, "--public-key", key + ".pub"]
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify"] + pinned).status, 0)
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify", "--until", "20"] + pinned).status, 0)
        let early = try CLIRun.run(["--data", folder, "verify", "--until", "19"] + pinned)
        XCTAssertEqual(early.status, 2, early.stdout + early.stderr)
        XCTAssertTrue(early.stderr.contains("before the checkpoint's position 20"), early.stderr)
    }

    /// An export killed mid-write leaves its temporary file; the next export to the same file
    /// removes it (its writer is gone), and leaves a running writer's alone.
    func testAnAbandonedPartialExportIsRemovedByTheNext() throws {
        _ = try CLIRun.run(["--data", folder, "submit"], stdin: commands(3))
        let file = folder + "-export.jsonl"
        var dead: Int32 = 4_194_000
        while kill(dead, 0) == 0 || errno != ESRCH { dead += 1 }
        let abandoned = file + ".partial-\(dead)", running = file + ".partial-\(getpid())"
        defer { for p in [file, abandoned, running] { try? FileManager.default.removeItem(atPath: p) } }
        let fresh = file + ".partial-\(dead + 1)"
        defer { try? FileManager.default.removeItem(atPath: fresh) }
        for p in [abandoned, running, fresh] { XCTAssertTrue(FileManager.default.createFile(atPath: p, contents: Data("{".utf8))) }
        for p in [abandoned, running] { try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-3600)], ofItemAtPath: p) }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "export", "--out", file]).status, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: abandoned))
        XCTAssertTrue(FileManager.default.fileExists(atPath: running))
        XCTAssertTrue(FileManager.default.fileExists(atPath: fresh), "written in the last minutes: maybe a writer elsewhere")
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").count, 3)
    }

    /// Number options read as the HTTP API reads them: digits only; a value past Int's range is the
    /// largest (a position past the head answers the head).
    func testNumberOptionsAreDigitsOnly() throws {
        _ = try CLIRun.run(["--data", folder, "submit"], stdin: commands(3))
        for bad in ["+2", "-1", "2.0", "", " 2"] {
            let run = try CLIRun.run(["--data", folder, "events", "--from", bad])
            XCTAssertEqual(run.status, 2, "\(bad): \(run.stderr)")
        }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "deliver", "--once", "--timeout", "+5"]).status, 2, "seconds are digits only too")
        let far = try CLIRun.run(["--data", folder, "audit", "--app", "acme", "--as-of", "99999999999999999999"])
        XCTAssertEqual(far.status, 0, far.stderr)
        XCTAssertEqual(far.stdout, try CLIRun.run(["--data", folder, "audit", "--app", "acme"]).stdout)
        XCTAssertEqual(far.lines.first?["entries"].arrayValue?.count, 3)
    }

    func testKillDuringSubmitLosesNothingAcknowledged() throws {
        let input = commands(30_000)
        let inputFile = folder + "-input.jsonl"
        try Data(input.utf8).write(to: URL(fileURLWithPath: inputFile))
        defer { try? FileManager.default.removeItem(atPath: inputFile) }

        let process = Process()
        process.executableURL = ProjectPaths.executable
        process.arguments = ["--data", folder, "submit", inputFile]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = Pipe()
        try process.run()
        var acknowledged = Data()
        let handle = out.fileHandleForReading
        while acknowledged.count < 200_000 {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            acknowledged.append(chunk)
        }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let acked = String(decoding: acknowledged, as: UTF8.self).split(separator: "\n").dropLast()
            .compactMap { try? JSONValue(parsing: String($0)) }
        XCTAssertGreaterThan(acked.count, 0)
        XCTAssertLessThan(acked.count, 30_000, "the run finished before it was killed; the test proves nothing")

        let rerun = try CLIRun.run(["--data", folder, "submit", inputFile])
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        let results = rerun.lines
        XCTAssertEqual(results.count, 30_000)
        for (n, first) in acked.enumerated() {
            XCTAssertEqual(results[n]["duplicate"], true, "acknowledged command \(n) was not found again")
            XCTAssertEqual(results[n]["position"], first["position"])
        }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify"]).status, 0)
        let head = try CLIRun.run(["--data", folder, "head"]).lines.first
        XCTAssertEqual(head?["head_position"], 30_000)
        // Every command's event is there exactly once, in input order.
        let events = try CLIRun.run(["--data", folder, "events"]).lines
        XCTAssertEqual(events.map { $0["data"]["user"].stringValue ?? "" }, (0..<30_000).map { "u\($0)" })
    }

    /// An auditor with py-lmdb and no Swift reads keys 1..N, JSON values, a valid chain and the head.
    func testPythonLMDBAuditorFindsAValidChain() throws {
        _ = try CLIRun.run(["--data", folder, "submit"], stdin: commands(25))
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = ["python3", ProjectPaths.root.appendingPathComponent("Scripts/check-ledger.py").path, folder]
        let out = Pipe()
        python.standardOutput = out
        python.standardError = Pipe()
        try python.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        python.waitUntilExit()
        let report = try JSONValue(parsing: Array(data).filter { $0 != 0x0A })
        XCTAssertEqual(python.terminationStatus, 0, "\(report.text)")
        XCTAssertEqual(report["events"], 25)
        XCTAssertEqual(report["ok"], true)
    }
}

/// Every fixture also plays through the real CLI (one `submit` process, query verbs), as the demo does.
final class FixtureCLITests: XCTestCase {
    func testEveryFixturePlaysThroughTheCLI() throws {
        for name in FixtureRunner.all {
            let folder = NSTemporaryDirectory() + "referral-ledger-history-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let python = Process()
            python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            python.arguments = ["python3", ProjectPaths.root.appendingPathComponent("Scripts/run-history.py").path, "--quiet",
                                "--cli", ProjectPaths.executable.path, "--data", folder,
                                ProjectPaths.fixtures.appendingPathComponent(name + ".jsonl").path]
            let out = Pipe()
            python.standardOutput = out
            python.standardError = out
            try python.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            python.waitUntilExit()
            XCTAssertEqual(python.terminationStatus, 0, "\(name) through the CLI:\n\(text)")
        }
    }
}

/// kill -9 during `rebuild` leaves a ledger whose next open finishes the rebuild.
final class RebuildCrashTests: XCTestCase {
    func testKillDuringRebuildIsFinishedByTheNextRun() throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-rebuild-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var input = #"{"type":"app.configure","app":"acme","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"# + "\n"
        input += #"{"type":"program.create","app":"acme","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"invite_accepted","reward":{"mode":"every","friends":3,"benefit":{"type":"points","amount":5}}},"friend":null,"new_users_only":false}}"# + "\n"
        for n in 0..<20_000 {
            input += #"{"type":"account.verify","app":"acme","at":"2026-01-01T00:00:00Z","user":"u\#(n)","account_created_at":"2026-01-01T00:00:00Z"}"# + "\n"
        }
        XCTAssertEqual(try CLIRun.run(["--data", folder, "submit"], stdin: input).status, 0)
        let before = try CLIRun.run(["--data", folder, "program", "--app", "acme", "--program", "p"]).stdout

        var interrupted = false
        for delay in [150_000, 300_000, 600_000] where !interrupted {
            let process = Process()
            process.executableURL = ProjectPaths.executable
            process.arguments = ["--data", folder, "rebuild"]
            process.standardOutput = Pipe()
            process.standardError = Pipe()
            try process.run()
            usleep(useconds_t(delay))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            interrupted = process.terminationReason == .uncaughtSignal
            if interrupted {
                // The folder opens; the next writer (here: rebuild) finishes the job.
                let again = try CLIRun.run(["--data", folder, "rebuild"])
                XCTAssertEqual(again.status, 0, again.stderr)
                XCTAssertEqual(again.lines.first?["events"], 20_002)
                // Its progress, in a log (stderr is a pipe here): a line as it starts, one at the end.
                let progress = again.stderr.split(separator: "\n").filter { $0.hasPrefix("rebuild: ") }
                XCTAssertGreaterThanOrEqual(progress.count, 2, again.stderr)
                XCTAssertTrue(progress.last?.hasPrefix("rebuild: 20002/20002 events, done in") == true, again.stderr)
            }
        }
        XCTAssertTrue(interrupted, "rebuild finished before it could be killed; the test proves nothing")
        // A reader of its progress that went away (a closed pipe) does not kill it; nor does a
        // closed stderr put its lines into the ledger's files.
        let process = Process()
        process.executableURL = ProjectPaths.executable
        process.arguments = ["--data", folder, "rebuild"]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try err.fileHandleForReading.close()
        try process.run()
        let answer = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationReason, .exit)
        XCTAssertEqual(process.terminationStatus, 0)
        XCTAssertEqual((try? JSONValue(parsing: Array(answer).filter { $0 != 0x0A }))?["events"], 20_002)
        let closed = Process()
        closed.executableURL = URL(fileURLWithPath: "/bin/sh")
        closed.arguments = ["-c", "\"$0\" --data \"$1\" rebuild 2>&- >/dev/null", ProjectPaths.executable.path, folder]
        try closed.run()
        closed.waitUntilExit()
        XCTAssertEqual(closed.terminationStatus, 0)
        let lock = try String(contentsOfFile: folder + "/writer.lock", encoding: .utf8)
        XCTAssertEqual(lock, "", "stderr's lines went into writer.lock")
        XCTAssertEqual(try CLIRun.run(["--data", folder, "program", "--app", "acme", "--program", "p"]).stdout, before)
        XCTAssertEqual(try CLIRun.run(["--data", folder, "verify"]).status, 0)
    }
}
