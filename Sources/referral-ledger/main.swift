import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger

/// `referral-ledger`: the thin command-line shell around the library (SPEC §10).

let usage = """
referral-ledger — an event-sourced ledger for friend referral programs

usage: referral-ledger [--data DIR] VERB [options]     (VERB --help for its options)

The data folder is --data DIR, else $REFERRAL_LEDGER_DATA, else ./ledger-data.
Writers (submit, serve, deliver, rebuild) save a snapshot of their decision state (state.snapshot) at their open and
as they finish (serve: every minute too) when $REFERRAL_LEDGER_SNAPSHOT_INTERVAL events (50000 unless set), and an
eighth of the log, came since the last one; a writer's open loads it and folds only the events after it. A save
needs room for two snapshots for a moment (the new one is renamed over the old).

verbs:
  submit [FILE]          decide JSON Lines commands (FILE or stdin); one JSON result line each
  progress               --app A --program P --user U [--as-of N]
  rewards                --app A --user U [--program P] [--limit K] [--cursor N] [--as-of N]
  program                --app A --program P [--as-of N]
  programs               --app A [--limit K] [--cursor C] [--as-of N]   (the app's programs, as `program` answers each)
  balance                --app A --user U [--as-of N]
  resolve                --app A --input TEXT [--as-of N]   (a typed code or a referral link → code and program)
  participants           --app A --program P [--user U | --user-prefix U] [--status S] [--limit K] [--cursor C] [--as-of N]
  deliveries             --app A [--program P] [--user U] [--status S] [--limit K] [--cursor C] [--as-of N]
  audit                  --app A [--program P] [--user U] [--type T] [--limit K] [--cursor N] [--as-of N]
  events [--from N] [--limit K]   stored events, one JSON value per line
  export [--out FILE]    the event log as stored, one value per line
  head                   the chain head (position and hash)
  verify [FILE]          replay: check the chain and every rule over the ledger or an export file
  rebuild                drop every projection and rebuild it from the events
  status                 head, projections (current?), writer running?, file and map sizes, entries per database, allocator
  backup --out DIR       a consistent, compacted copy of the whole ledger while writers go on (a data folder)
  keygen --out FILE      a new Ed25519 key pair for checkpoints (FILE and FILE.pub)
  checkpoint --key FILE [--out CP]   sign the current head (head_position, head_hash)
  deliver [--once] [--mail-command CMD] [--mail-timeout S] [--timeout S] [--concurrency N]
                         the delivery worker (signed webhooks, RevenueCat grants, owner mail)
  serve [--host H] [--port P] [--keys FILE] [--max-body BYTES] [--max-connections-per-client N]
        [--mail-command CMD] [--mail-timeout S] [--no-deliver]
                         the HTTP API (JSON in and out) with the delivery worker inside
"""

struct VerbHelp {
    static let texts: [String: String] = [
        "submit": "referral-ledger submit [FILE]\n  Reads JSON Lines commands from FILE or stdin (no FILE, or -) and writes one JSON result line per command, in order.\n  A malformed line gets an invalid_command result and the rest go on. Blank lines are skipped; a line over 64 MiB\n  is refused unread. Commands arriving together (up to 1,000) share one durable write transaction; a FILE is\n  read at most a few batches ahead, so a file of any size can be submitted.",
        "progress": "referral-ledger progress --app A --program P --user U [--as-of N]\n  An inviter's progress: qualified_count, required_count, enrolled_count, remaining_count, earned_rewards, next_threshold.",
        "rewards": "referral-ledger rewards --app A --user U [--program P] [--limit K] [--cursor N] [--as-of N]\n  The user's rewards, in earning order. With --limit (or --cursor): at most K, earned after log position N,\n  and next_cursor, the position to pass as --cursor next (null when none is left).",
        "program": "referral-ledger program --app A --program P [--as-of N]\n  Status, version, accepting_new_referrals, config and counts.",
        "programs": "referral-ledger programs --app A [--limit K] [--cursor C] [--as-of N]\n  The app's programs in campaign key order, each as `program` answers it (status, version,\n  accepting_new_referrals, config, counts). Pass next_cursor of one page as --cursor to get the next.",
        "resolve": "referral-ledger resolve --app A --input TEXT [--as-of N]\n  Accepts a typed code, https://{share_link_host}/r/{code}, a URL on that host with a code parameter,\n  or {app_url_scheme}://referral?code=...; answers {\"code\", \"program\"} (never the inviter), else invalid_code.",
        "balance": "referral-ledger balance --app A --user U [--as-of N]\n  Points: balance, earned, spent (sandbox points never count).",
        "participants": "referral-ledger participants --app A --program P [--user U | --user-prefix U] [--status S] [--limit K] [--cursor C] [--as-of N]\n  Participants in user ID order (--user: that user only); S is one of inviter, friend, eligible, pending_review, ineligible, qualified.\n  Pass next_cursor of one page as --cursor to get the next.",
        "deliveries": "referral-ledger deliveries --app A [--program P] [--user U] [--status S] [--limit K] [--cursor C] [--as-of N]\n  Rewards (of recipient U) with every delivery attempt, outcome and error.",
        "audit": "referral-ledger audit --app A [--program P] [--user U] [--type T] [--limit K] [--cursor N] [--as-of N]\n  Audit entries: the recorded events that name the user or program, with who acted and the evidence,\n  in log order. --type keeps one event type (referral.rejected) or subject (reward.).",
        "events": "referral-ledger events [--from N] [--limit K]\n  Stored events from position N (default 1), at most K (default all), one JSON value per line.",
        "export": "referral-ledger export [--out FILE]\n  Writes every stored value, one per line, in order: the chain can be checked from the file alone.",
        "head": "referral-ledger head\n  Prints {\"head_position\", \"head_hash\"} from the meta database.",
        "keygen": "referral-ledger keygen --out FILE\n  Writes a new Ed25519 private key (PEM, mode 600) to FILE and its public key to FILE.pub.",
        "checkpoint": "referral-ledger checkpoint --key FILE [--out CP]\n  Signs the current head_position and head_hash with the operator's Ed25519 private key\n  (made once with `referral-ledger keygen --out FILE`, or any Ed25519 PEM key, e.g. `openssl genpkey -algorithm ed25519`).\n  An auditor keeps the checkpoint and later runs verify --checkpoint CP --public-key FILE.pub.",
        "verify": "referral-ledger verify [FILE] [--until N] [--checkpoint CP --public-key PUB] [--json | --text]\n  The replay verifier. Checks the ledger, or an export FILE alone (no LMDB needed;\n  FILE may be - or a pipe: `referral-ledger export | referral-ledger verify -`):\n  integrity (positions 1..N, JSON values, prev_hash chain, head), the rules of SPEC 4-7 and 13 by an\n  independent fold, that re-deciding every recorded command gives the recorded events, and (for a\n  ledger) that the stored projections equal a fresh fold. Each violation: position, rule, message.\n  With a signed checkpoint: proves the history holds exactly that head (and extends it); PUB is the operator's\n  public key (FILE.pub of `referral-ledger keygen --out FILE`, which made the key `checkpoint --key` signs with).\n  Output is JSON (--text for lines). --until N checks events 1..N only. Exit 0 when clean, 1 with violations, 2 when the input cannot be read\n  or the report cannot be written.",
        "deliver": CLI.deliverHelp,
        "serve": CLI.serveHelp,
        "status": "referral-ledger status\n  What an operator checks: head_position and head_hash, projections.state (current, missing, rebuilding,\n  other_schema, behind: all but current are put right by the next writer's open or by rebuild), whether a\n  writer (serve, submit, deliver) holds the folder, file_bytes, map_bytes, used_bytes, entries per database, and\n  state_snapshot: the position and size of the writer's state snapshot, and whether this build wrote it (a writer's\n  open loads only such a one and folds the events after it), or null; allocator: the malloc this executable\n  runs on (jemalloc and its version).",
        "backup": "referral-ledger backup --out DIR\n  Copies the whole ledger (log, projections, idempotency keys, secrets) as one read transaction sees it,\n  compacted, into the new or empty folder DIR, while a server or submit goes on writing. DIR is written\n  whole or not at all and opens as a data folder (--data DIR); its data.mdb is readable by its owner only.\n  DIR is new (its missing parent folders are made), or an empty folder (a mounted backup volume: the copy is\n  made on it); not inside the data folder.\n  Prints {\"backup\", \"head_position\", \"head_hash\", \"projections\", \"bytes\", \"state_snapshot\"}; projections is\n  \"current\", or (a copy taken while a rebuild ran) \"rebuilding\": the copy's first writer, or rebuild, rebuilds them.\n  state_snapshot is the position of the writer's state snapshot copied with it (its first writer folds only the\n  events after it), or null.",
        "rebuild": "referral-ledger rebuild\n  Drops every projection and rebuilds it from the events, showing its progress on stderr: a bar on a\n  terminal; in a log, a line as it starts, every 10 seconds, when the projections are being written, and at the end. Prints {\"rebuilt\", \"events\", \"seconds\"}.\n  The writer's state snapshot is dropped too, and saved again from the rebuild's fold when due\n  ($REFERRAL_LEDGER_SNAPSHOT_INTERVAL events, 50000 unless set, and an eighth of the log).",
    ]
}

func run(_ argv: [String]) -> Int32 {
    // Started with stdin, stdout or stderr closed (`2>&-`), the next file opened would take its
    // number, and a message meant for the terminal would be written into it (a ledger's file):
    // each closed one is opened on /dev/null first.
    for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 {
        _ = open("/dev/null", O_RDWR)
    }
    // A reader that goes away (`submit … | head -1`) makes the next write fail with EPIPE, which
    // the verb reports (`unwritable_output`, saying what was recorded), instead of a silent death.
    signal(SIGPIPE, SIG_IGN)
    // Arguments are text: one that is not UTF-8 would reach Swift with U+FFFD in place of its bad
    // bytes and name another user, or another file, than the one typed.
    if let bad = CommandLine.argumentsNotUTF8() {
        Terminal.error(code: "invalid_usage", "argument \(bad) is not valid UTF-8 text; give user IDs and paths as UTF-8")
        return 2
    }
    var args = Array(argv.dropFirst())
    var dataFlag: String?
    if let i = args.firstIndex(where: { $0 == "--data" || $0.hasPrefix("--data=") }) {
        if args[i] == "--data" {
            guard i + 1 < args.count else { Terminal.error(code: "invalid_usage", "--data needs a folder"); return 2 }
            dataFlag = args[i + 1]
            args.removeSubrange(i...(i + 1))
        } else {
            dataFlag = String(args[i].dropFirst("--data=".count))
            args.remove(at: i)
        }
        if args.contains(where: { $0 == "--data" || $0.hasPrefix("--data=") }) {
            Terminal.error(code: "invalid_usage", "--data is given more than once")
            return 2
        }
    }
    guard let verb = args.first, verb != "--help", verb != "-h", verb != "help" else {
        if args.isEmpty {
            Terminal.error(code: "invalid_usage", "give a verb; `referral-ledger --help` lists them")
            return 2
        }
        print(usage)
        return 0
    }
    if let dataFlag, dataFlag.isEmpty {
        Terminal.error(code: "invalid_usage", "--data needs a folder, not an empty value")
        return 2
    }
    let rest = Array(args.dropFirst())
    if rest.contains("--help") || rest.contains("-h") {
        guard let text = VerbHelp.texts[verb] else {
            Terminal.error(code: "invalid_usage", "unknown verb \"\(verb)\"; `referral-ledger --help` lists the verbs")
            return 2
        }
        print(text)
        return 0
    }
    let folder = LedgerFolder.resolve(flag: dataFlag)
    do {
        return try CLI(folder: folder).run(verb, rest)
    } catch let e as Arguments.UsageError {
        // Errors are JSON like every other output (SPEC §10); the verb's help is one flag away.
        Terminal.error(code: "invalid_usage", VerbHelp.texts[verb] == nil
            ? "unknown verb \"\(verb)\"; `referral-ledger --help` lists the verbs"
            : "\(verb): \(e.message); see `referral-ledger \(verb) --help`")
        return 2
    } catch let e as CodedError {
        // The ledger's, the store's, a query's, the key reader's: each has its code. A missing
        // ledger is told what to do in the CLI's words.
        Terminal.error(code: e.errorCode, CLI.message(of: e, folder: folder))
        return 1
    } catch {
        Terminal.error(code: "error", "\(error)")
        return 1
    }
}

extension CommandLine {
    /// The position (1 for the first after the program's name) of the first argument whose bytes
    /// are not UTF-8, or nil.
    static func argumentsNotUTF8() -> Int? {
        for i in 1..<Int(argc) {
            guard let pointer = unsafeArgv[i] else { continue }
            if String(validatingCString: pointer) == nil { return i }
        }
        return nil
    }
}

exit(run(CommandLine.arguments))
