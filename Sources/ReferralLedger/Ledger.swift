import Foundation
import LedgerCodec
import LedgerStore
import ReferralProjections
import ReferralRules
import Synchronization

/// A referral ledger in a data folder: the one writer of its LMDB environment.
///
/// Commands go through `submit`, which decides a batch in one write transaction (group
/// commit) and answers only after the commit: an acknowledged command is durable. Queries
/// read the projections in short read transactions and never wait for the writer.
/// All methods are thread-safe; writes are serialised by one lock (LMDB has one writer).
public final class Ledger: @unchecked Sendable {
    /// The data folder (the LMDB environment).
    public let folder: String
    /// Opened with `init(readingFolder:)`: queries and the log only.
    public let isReadOnly: Bool
    let environment: LMDBEnvironment
    private let writerLock: WriterLock?
    private let writeMutex = NSLock()
    /// Set by `close()` (under `writeMutex`, so that a batch being decided finishes first): the
    /// writer lock is let go and writes are refused. Atomic, so that reading it (a delivery loop
    /// does at every turn) never waits for a batch.
    private let closed = Atomic<Bool>(false)
    /// Whether `close()` ran: this `Ledger` writes no more (a worker given it stops).
    public var isClosed: Bool { closed.load(ordering: .acquiring) }
    private var state = LedgerState()
    private var head = ChainHead.genesis
    private var codes = RandomInviteCodes()
    /// When stale reader slots were last cleared (at open, then every 10 s of writing at most).
    private var lastReaderCheck = Timestamp.now()
    /// The position of the state snapshot in the folder that this writer loaded or saved (0: none).
    private(set) var snapshotPosition: UInt64 = 0
    /// One state snapshot save at a time.
    private let snapshotMutex = NSLock()
    /// What `saveStateSnapshot()` waits for without an interval of its own (`init`'s).
    private let snapshotInterval: UInt64
    /// When a save last failed (under `snapshotMutex`).
    private var lastSnapshotFailure: Timestamp?
    /// A snapshot of the state at `head` encoded while a rebuild wrote its projections, for the
    /// next save to write (under the write lock; let go by that save).
    private(set) var preparedSnapshot: (head: ChainHead, bytes: [UInt8])?
    /// Why the state snapshot due at this writer's open could not be saved (the open went on: a
    /// save is a shortcut), for the caller to report; nil when it was saved or not due.
    public private(set) var snapshotErrorAtOpen: (any Error)?

    public static let databases = [EventLog.eventsDatabase, EventLog.metaDatabase, IdempotencyIndex.database, SecretStore.database]
        + ProjectionStore.all
    /// Secret settings by app (webhook secret, RevenueCat keys), loaded from the secrets store.
    private var secrets: [String: [String: String]] = [:]

    /// What an open reports while it folds the log or rebuilds projections.
    public typealias ProgressHandler = @Sendable (_ done: UInt64, _ total: UInt64) -> Void

    /// The range of `mapSize`: a first map past 1 TiB is refused by the kernel on most machines.
    static let smallestMap = 64 << 10, largestFirstMap = 1 << 40

    /// Opens (creating when missing) the ledger in `folder` for writing: takes the folder's
    /// writer lock, folds the log into the decision state, and rebuilds projections whose
    /// checkpoint or schema disagrees with the log (after an interrupted rebuild, say).
    ///
    /// With `rebuildingProjections`, every projection is dropped and rebuilt from the fold that
    /// loads the state (what `rebuild` runs: the log is folded once, not twice).
    ///
    /// `snapshotInterval`: the events folded since the last state snapshot before a new one is
    /// saved (at this open, and by `saveStateSnapshot()` without an interval). `mapSize`: the
    /// map's first size, 64 KiB to 1 TiB (`invalid_argument` otherwise); it grows as data fills it.
    public init(folder: String, mapSize: Int = 64 << 20, rebuildingProjections: Bool = false,
                snapshotInterval: UInt64 = Ledger.snapshotInterval, progress: ProgressHandler? = nil) throws {
        guard (Self.smallestMap...Self.largestFirstMap).contains(mapSize) else {
            throw LedgerError(code: "invalid_argument", message: "mapSize must be 64 KiB to 1 TiB, not \(mapSize): it is the map's first size, which the ledger grows as the data fills it (64 MiB unless given)")
        }
        self.folder = folder
        self.snapshotInterval = snapshotInterval
        isReadOnly = false
        writerLock = try WriterLock(folder: folder)
        environment = try LMDBEnvironment.open(path: folder, databases: Self.databases, mapSize: mapSize)
        if rebuildingProjections {
            try checkHeadAgainstLog()
            StateSnapshot.remove(folder: folder)
            try writeProjections(progress: progress)
            secrets = try environment.read { try SecretStore.all($0) }
            return
        }
        try loadState(progress: progress)
        let checkpoint = try environment.read { try ProjectionStore.checkpoint($0) }
        if checkpoint == nil || checkpoint!.position != head.position || checkpoint!.schema != ProjectionStore.schemaVersion || checkpoint!.rebuilding {
            try writeProjections(progress: nil)
        }
        // A long fold is saved at once, so that the next open (after a kill -9, say) is quick. A
        // shortcut only: a save that fails (a full disk) does not fail the open; the next one retries.
        do { try saveStateSnapshot() } catch { snapshotErrorAtOpen = error }
    }

    /// Opens an existing ledger for reading only (no writer lock: a server may be writing). For
    /// queries (`forQueries`), projections that are missing, of another schema or half rebuilt are
    /// refused (`projections_stale`); reading the log itself (events, export, verify) needs none.
    public init(readingFolder folder: String, forQueries: Bool = true) throws {
        self.folder = folder
        snapshotInterval = .max
        isReadOnly = true
        writerLock = nil
        try LedgerFolder.requireLedger(folder)
        environment = try LMDBEnvironment.open(path: folder, databases: Self.databases, readOnly: true)
        let (checkpoint, logHead) = try environment.read { (try ProjectionStore.checkpoint($0), try EventLog.head($0)) }
        let stale = checkpoint.map { $0.schema != ProjectionStore.schemaVersion || $0.rebuilding } ?? (logHead.position > 0)
        if stale && forQueries {
            if checkpoint?.rebuilding == true, WriterLock.isHeld(folder: folder) {
                throw LedgerError(code: "projections_stale", message: "the projections in \(folder) are being rebuilt by the process writing this ledger; query again when it has finished")
            }
            throw LedgerError(code: "projections_stale", message: "the projections in \(folder) are missing, from another version or from an interrupted rebuild; run `referral-ledger rebuild`")
        }
    }

    /// The head of the chain as recorded in `meta`.
    public func currentHead() throws -> ChainHead {
        try environment.read { try EventLog.head($0) }
    }

    /// The head recorded in `meta`, confirmed against the log in one read: the last event is at its
    /// position, and its bytes hash to its hash. What a checkpoint signs: a head no event has
    /// would make every later proof of the genuine history fail.
    public func confirmedHead() throws -> ChainHead {
        try environment.read { txn in
            guard let head = try EventLog.confirmedHead(txn) else {
                let head = try EventLog.head(txn)
                throw LedgerError(code: "head_mismatch", message: "the head recorded in meta (position \(head.position), hash \(head.hash.prefix(64))) does not match the last event of the log: nothing is signed; run `referral-ledger verify` to see what is wrong")
            }
            return head
        }
    }

    /// Reads the writer's in-memory state and the apps' secrets (for the workers), under the write lock.
    func withState<T>(_ body: (LedgerState, [String: [String: String]]) -> T) -> T {
        writeMutex.lock()
        defer { writeMutex.unlock() }
        return body(state, secrets)
    }

    // MARK: - Folding

    /// Folds the whole log into a fresh state, in pages of short read transactions; each page is
    /// read and parsed on a second thread while the previous one is folded (`ReadAhead`).
    /// With `indexForAudit`, each page's audit index entries are made there too, and handed over
    /// once the page is folded (one entry per key; not in key order across the page).
    /// `start`: a state already folded up to its head (a snapshot), to go on from.
    static func fold(_ environment: LMDBEnvironment, from start: (LedgerState, ChainHead)? = nil, until limit: UInt64 = .max,
                     progress: ProgressHandler? = nil,
                     indexForAudit: (([ProjectionStore.Entry]) throws -> Void)? = nil) throws -> (LedgerState, ChainHead) {
        // The projections of a whole fold, when wanted, are made for everything it holds.
        var (state, head) = start ?? (LedgerState.replaying(), ChainHead.genesis)
        state.tracksChanges = false
        let total = min(limit, try environment.read { try EventLog.head($0) }.position)
        var next: UInt64 = head.position + 1
        let pages = LogPages(environment: environment, from: next, through: total)
        let auditing = indexForAudit != nil
        precondition(!auditing || (next == 1 && UInt64(pages.pageSize) % ProjectionStore.auditBlock == 0),
                     "a fold indexing for the audit reads whole audit blocks from the start")
        try ReadAhead.run(produce: { _ -> ParsedPage? in
            guard let page = try pages.next() else { return nil }
            // Parsing (and indexing) is the larger half of a fold: the page is parsed on both cores,
            // in runs of whole audit blocks (pages read from position 1 start blocks), so each run's
            // audit entries are complete and no two runs share a key.
            let runs = concurrentMap(Self.foldRuns) { run -> Result<([FoldEvent], [ProjectionStore.Entry]), any Error> in
                let range = Self.foldRun(run, of: page.count, unit: auditing ? Int(ProjectionStore.auditBlock) : 1)
                return Result {
                    let events = try page[range].map { try FoldEvent(bytes: $0.1) }
                    return (events, auditing ? ProjectionStore.indexEntries(events) : [])
                }
            }
            var events: [FoldEvent] = []
            events.reserveCapacity(page.count)
            var audit: [ProjectionStore.Entry] = []
            for run in runs {
                let (parsed, entries) = try run.get()
                events.append(contentsOf: parsed)
                audit.append(contentsOf: entries)
            }
            return ParsedPage(events: events, positions: page.map(\.0), lastHash: SHA256.hex(page[page.count - 1].1), audit: audit)
        }) { page in
            for (position, event) in zip(page.positions, page.events) {
                guard position == next else { throw LedgerError(code: "broken_log", message: "event \(next) is missing from the log; run `referral-ledger verify`") }
                try state.apply(type: event.type, at: event.at, data: event.data, position: position)
                next += 1
            }
            try indexForAudit?(page.audit)
            head = ChainHead(position: next - 1, hash: page.lastHash)
            progress?(next - 1, total)
            return true
        }
        return (state, head)
    }

    /// Runs a page is split into for parsing on every core.
    private static let foldRuns = 4

    /// The values of run `run` of a page of `count`: about a `foldRuns`th of them, cut at whole
    /// `unit`s from the page's start (the last run takes the rest).
    private static func foldRun(_ run: Int, of count: Int, unit: Int) -> Range<Int> {
        let units = (count + unit - 1) / unit
        func bound(_ n: Int) -> Int { min(count, units * n / foldRuns * unit) }
        return bound(run)..<bound(run + 1)
    }

    /// A page of the log, parsed ahead, with the hash of its last value (the head once it is folded).
    private struct ParsedPage: Sendable {
        var events: [FoldEvent]
        var positions: [UInt64]
        var lastHash: String
        /// The page's audit index entries, one per key, in no order (when the fold was asked for
        /// them; whoever writes them sorts them).
        var audit: [ProjectionStore.Entry]
    }

    /// `log` is the log's last value as read: its position and the SHA-256 of its bytes (nil when empty).
    private static func headMismatch(recorded: ChainHead, log: ChainHead?) -> LedgerError {
        let problem: String
        if let log, log.position == recorded.position {
            problem = "the head in meta names event \(recorded.position) with head_hash \(recorded.hash.prefix(12))…, but that event's SHA-256 is \(log.hash.prefix(12))…"
        } else {
            problem = "the head in meta (position \(recorded.position)) does not match the log (last position \(log?.position ?? 0))"
        }
        return LedgerError(code: "broken_log", message: problem + "; run `referral-ledger verify`")
    }

    /// The head in meta must be the head of the log just folded.
    private func checkRecordedHead(_ folded: ChainHead) throws {
        let recorded = try currentHead()
        guard recorded == folded else { throw Self.headMismatch(recorded: recorded, log: folded) }
    }

    /// Before a rebuild drops the projections: the head in meta must name the log's last value
    /// (its position and hash), so a log that cannot be folded leaves the projections as they were.
    private func checkHeadAgainstLog() throws {
        let recorded = try currentHead()
        let tail = try environment.read { try EventLog.values($0, from: max(recorded.position, 1), limit: 2) }
        let last = tail.last.map { ChainHead(position: $0.0, hash: SHA256.hex($0.1)) }
        let matches = recorded.position == 0 ? tail.isEmpty : tail.count == 1 && last == recorded
        guard matches else { throw Self.headMismatch(recorded: recorded, log: last) }
    }

    /// Loads the decision state: from the state snapshot when there is one to trust, then the
    /// events after it; else by folding the whole log.
    private func loadState(progress: ProgressHandler?) throws {
        let saved = StateSnapshot.read(folder: folder)
        let trusted = try saved.flatMap { s in try environment.read { try StateSnapshot.names(s.meta, $0) } ? s : nil }
        let start = trusted.flatMap { StateSnapshot.state(from: $0.bytes, $0.meta) }
        // (One that does not read back is replaced at the next save.)
        snapshotPosition = start?.1.position ?? 0
        let (folded, foldedHead) = try Self.fold(environment, from: start, progress: progress)
        try checkRecordedHead(foldedHead)
        var s = folded
        s.tracksChanges = true
        state = s
        head = foldedHead
        secrets = try environment.read { try SecretStore.all($0) }
    }

    // MARK: - Projections

    /// Drops every projection and writes it again from a fresh fold of the log (`rebuild`).
    /// Crash-safe: a `rebuilding` mark is committed first and removed last, and an open that
    /// finds it rebuilds again. The state snapshot is dropped; when one is due, it is encoded from
    /// the rebuild's fold and written by the next `saveStateSnapshot()` (as `rebuild` does next).
    /// A ledger opened for queries only (`Ledger(readingFolder:)`) refuses, `read_only`.
    public func rebuildProjections(progress: ProgressHandler? = nil) throws -> UInt64 {
        try requireWriter()
        return try rebuildProjections(progress: progress, auditBatch: Self.auditBatch)
    }

    /// Refuses, `read_only`, what only the writer may do. (`ledger_closed` is checked under
    /// `writeMutex`, where a `close()` cannot come between.)
    func requireWriter() throws {
        guard !isReadOnly else {
            throw LedgerError(code: "read_only", message: "this ledger was opened for queries only (Ledger(readingFolder:)); open it with Ledger(folder:) to write")
        }
    }

    static func closedError(_ folder: String) -> LedgerError {
        LedgerError(code: "ledger_closed", message: "this Ledger of \(folder) was closed for writing (close()); open the folder again with Ledger(folder:)")
    }

    /// Closes the ledger for writing: waits for the batch being decided, then lets go of the
    /// folder's writer lock, so another writer (a `Ledger(folder:)` in this process, `serve` or
    /// `submit`) may open it at once — without waiting for the last reference to this one, a
    /// `GroupCommitter`'s or `DeliveryWorker`'s included, to go. Later commands, rebuilds and
    /// state snapshot saves are refused with `ledger_closed` (a committer's queued batches too);
    /// queries and the log still read the folder. Closing again does nothing. A ledger opened
    /// for queries only holds no writer lock: for it, this only refuses nothing more.
    public func close() {
        snapshotMutex.lock()
        defer { snapshotMutex.unlock() }
        writeMutex.lock()
        defer { writeMutex.unlock() }
        closed.store(true, ordering: .releasing)
        preparedSnapshot = nil
        writerLock?.release()
    }

    /// Audit index entries a rebuild gathers before it hands them to its writing stage.
    static let auditBatch = 100_000

    /// `auditBatch`: smaller in tests, so that a small ledger goes through the writing stage.
    func rebuildProjections(progress: ProgressHandler?, auditBatch: Int) throws -> UInt64 {
        // In the order a save takes them: a save in flight finishes before the snapshot is dropped.
        snapshotMutex.lock()
        defer { snapshotMutex.unlock() }
        writeMutex.lock()
        defer { writeMutex.unlock() }
        guard !isClosed else { throw Self.closedError(folder) }
        StateSnapshot.remove(folder: folder)
        snapshotPosition = 0
        try writeProjections(progress: progress, auditBatch: auditBatch)
        return head.position
    }

    private func writeProjections(progress: ProgressHandler?, auditBatch: Int = Ledger.auditBatch) throws {
        try environment.writeGrowing { txn in
            for name in ProjectionStore.all { try txn.clear(name) }
            try txn.put(ProjectionStore.meta, Array("rebuilding".utf8), Array("1".utf8))
        }
        // The audit index is written every 100,000 entries or so, sorted in key order, so each
        // write walks its B-tree once: sorted and written on a thread of their own while the fold
        // goes on (nothing else writes meanwhile: the caller holds the write lock, and writes again
        // only after `finish`).
        let environment = self.environment
        let auditWriter = SerialStage<[ProjectionStore.Entry]>(label: "rebuild.audit", depth: 2) { batch in
            var batch = batch
            ProjectionStore.Entry.sortInKeyOrder(&batch)
            try environment.writeGrowing { txn in try ProjectionStore.put(batch, txn) }
        }
        // However the fold ends, no write of the stage outlives it.
        defer { auditWriter.waitUntilIdle() }
        var audited: [ProjectionStore.Entry] = []
        let (fresh, freshHead) = try Self.fold(environment, progress: progress) { entries in
            audited.append(contentsOf: entries)
            if audited.count >= auditBatch {
                try auditWriter.submit(audited)
                audited = []
            }
        }
        try auditWriter.finish()
        try checkRecordedHead(freshHead)
        // The state snapshot this fold calls for, when one is due, is encoded from it on another
        // thread while the projections are written (the encoding overlaps their records and
        // commit); the next `saveStateSnapshot()` writes those bytes. Not the file itself: it would
        // take disk space the projections' commit may need.
        let encoding = StateSnapshot.build != nil && isSnapshotDue(at: freshHead.position) ? Pending.start { fresh.snapshotBytes() } : nil
        var s = fresh
        s.tracksChanges = true
        do {
            try environment.writeGrowing { txn in
                ProjectionStore.Entry.sortInKeyOrder(&audited)
                try ProjectionStore.put(audited, txn)
                try ProjectionStore.writeAll(s, txn)
                try ProjectionStore.writeCheckpoint(freshHead.position, txn)
                try txn.delete(ProjectionStore.meta, Array("rebuilding".utf8))
            }
        } catch {
            _ = try? encoding?.wait()  // no work of this rebuild outlives it
            throw error
        }
        state = s
        head = freshHead
        if let bytes = try? encoding?.wait() { preparedSnapshot = (freshHead, bytes) }
    }

    // MARK: - State snapshot

    /// Whether a snapshot of the state at `position` is due: `interval` events since the last one
    /// (or since the start), else this ledger's interval and an eighth of the log. (Under the write lock.)
    private func isSnapshotDue(at position: UInt64, interval: UInt64? = nil) -> Bool {
        let due = interval ?? max(snapshotInterval, position / 8)
        return position > snapshotPosition && position - snapshotPosition >= due
    }

    /// Events folded since the last state snapshot (or from the start) before a new one is saved:
    /// below that, folding them costs less than writing the state. A save also waits for an eighth
    /// of the log since the last one (it writes the whole state, which grows with the log), and
    /// for ten minutes after a save that failed.
    public static let snapshotInterval: UInt64 = 50_000

    /// Saves the decision state as the folder's state snapshot (`StateSnapshot`) when at least
    /// `interval` events have been folded since the last one (or since the start, when there is
    /// none), so that the next open of a long ledger loads it instead of folding the whole log.
    /// Answers whether it saved. The CLI's writing verbs call it as they finish, and `serve` every
    /// minute; a library user may call it at any time from any thread. Commands do not wait for
    /// it: the state is copied under the write lock, then encoded and written to its file outside it.
    @discardableResult
    public func saveStateSnapshot(interval: UInt64? = nil) throws -> Bool {
        guard !isReadOnly else { return false }
        snapshotMutex.lock()
        defer { snapshotMutex.unlock() }
        let backingOff = interval == nil && lastSnapshotFailure.map { Timestamp.now().milliseconds - $0.milliseconds < 600_000 } ?? false
        let taken: (LedgerState, ChainHead, [UInt8]?)? = {
            writeMutex.lock()
            defer { writeMutex.unlock() }
            // A rebuild's encoded bytes are used now or let go, never held for a later save.
            let prepared = preparedSnapshot
            preparedSnapshot = nil
            guard !isClosed, !backingOff, isSnapshotDue(at: head.position, interval: interval) else { return nil }
            return (state, head, prepared.flatMap { $0.head == head ? $0.bytes : nil })
        }()
        guard let (state, head, prepared) = taken, let build = StateSnapshot.build else { return false }
        do {
            let meta = try StateSnapshot.save(at: head, build: build, folder: folder) { prepared ?? state.snapshotBytes() }
            lastSnapshotFailure = nil
            writeMutex.lock()
            snapshotPosition = meta.position
            writeMutex.unlock()
            return true
        } catch {
            lastSnapshotFailure = Timestamp.now()
            throw error
        }
    }

    // MARK: - Commands

    /// Decides and appends a batch of commands (JSON texts, one each) in one write transaction,
    /// and answers one result each, in order, once the transaction committed.
    public func submit(lines: [[UInt8]], now: Timestamp = .now()) throws -> [CommandResult] {
        try submit(lines.map(CommandInput.text), now: now)
    }

    /// Submits one command.
    public func submit(_ command: JSONValue, now: Timestamp = .now()) throws -> CommandResult {
        try submit([.value(command)], now: now)[0]
    }

    /// Submits a command built in code: `try ledger.submit(.createInvite(program: "spring", user: "alice"), app: "acme")`.
    /// It is sent as its JSON (`Command.json`), read and decided like any client's; `at` left out
    /// is now, `id` is the idempotency key.
    public func submit(_ command: Command.Body, app: String, at: Timestamp? = nil, id: String? = nil, now: Timestamp = .now()) throws -> CommandResult {
        try submit(Command.json(command, app: app, at: at, id: id), now: now)
    }

    /// Decides and appends a batch of commands, given as text or as parsed JSON (a server that
    /// already parsed a body saves the writer the work), in one write transaction.
    public func submit(_ inputs: [CommandInput], now: Timestamp = .now()) throws -> [CommandResult] {
        try submit(Self.prepare(inputs, now: now))
    }

    /// Commands parsed and read (JSON, fields, types: the checks that need no state), ready for
    /// `submit(_:)`. Reading takes a good part of a command's cost and needs no lock, so a caller
    /// with a stream of batches prepares the next one while the ledger decides this one.
    public struct PreparedCommands: Sendable {
        let commands: [Result<Command, Rejection>]
        let now: Timestamp
        /// How many commands it holds.
        public var count: Int { commands.count }

        /// Batches prepared apart (by several callers), in order, as one: decided in one
        /// transaction and recorded at `recordedAt` (the time the writer takes them: the log's
        /// `recorded_at` then follows the order of the log), or at the latest time one was
        /// prepared, should the clock have gone back since.
        public static func joined(_ parts: [PreparedCommands], recordedAt: Timestamp = .now()) -> PreparedCommands {
            PreparedCommands(commands: parts.count == 1 ? parts[0].commands : parts.flatMap(\.commands),
                             now: max(recordedAt, parts.map(\.now).max() ?? recordedAt))
        }
    }

    /// Parses and reads a batch on every core, without the writer's lock. `now` is the time a
    /// command without `at` is given, and the time recorded with the events.
    public static func prepare(_ inputs: [CommandInput], now: Timestamp = .now()) -> PreparedCommands {
        PreparedCommands(commands: read(inputs, now: now), now: now)
    }

    /// Decides and appends a prepared batch in one write transaction, and answers one result
    /// each, in order, once the transaction committed.
    public func submit(_ prepared: PreparedCommands) throws -> [CommandResult] {
        try requireWriter()
        let commands = prepared.commands, now = prepared.now
        writeMutex.lock()
        defer { writeMutex.unlock() }
        guard !isClosed else { throw Self.closedError(folder) }
        // A server runs for months: readers that died mid-read elsewhere are cleared now and then.
        let clock = Timestamp.now()
        if clock.milliseconds - lastReaderCheck.milliseconds >= 10_000 || clock < lastReaderCheck {
            try environment.clearStaleReaders()
            lastReaderCheck = clock
        }
        if environment.usedBytes > environment.mapSize / 4 * 3 { try environment.grow() }
        // A command the rules cannot decide consistently is answered `internal_error` alone; the
        // others of its batch (other clients' commands, in a server) are decided without it.
        var setAside: [Int: CommandResult] = [:]
        while true {
            let kept = commands.indices.filter { setAside[$0] == nil }
            do {
                let decided = try environment.write { txn in try decide(kept.map { commands[$0] }, now: now, txn) }
                guard !setAside.isEmpty else { return decided }
                var results = setAside
                for (n, result) in zip(kept, decided) { results[n] = result }
                return commands.indices.map { results[$0]! }
            } catch let error as LMDBError where error.isMapFull {
                // The batch was rolled back; so is the state, by folding the committed log again.
                try loadState(progress: nil)
                try environment.grow()
            } catch let inconsistent as InconsistentDecision {
                try loadState(progress: nil)
                setAside[kept[inconsistent.index]] = .internalError(inconsistent.message)
            } catch {
                try loadState(progress: nil)
                throw error
            }
        }
    }

    /// A command of a batch that could not be decided consistently (only a forged or corrupt
    /// history, or a bug, leads there): its batch rolls back and is decided again without it.
    struct InconsistentDecision: Error {
        var index: Int
        var message: String
    }

    /// Parses and reads the commands of a batch, on every core and before the writer's lock is
    /// taken: only state-free checks happen here (JSON, fields, types).
    static func read(_ inputs: [CommandInput], now: Timestamp) -> [Result<Command, Rejection>] {
        @Sendable func read(_ input: CommandInput) -> Result<Command, Rejection> {
            let value: JSONValue
            switch input {
            case .value(let v):
                value = v
            case .text(let line):
                do {
                    value = try JSONValue(parsing: line)
                } catch {
                    return .failure(.invalid("the command is not valid JSON: \(error)"))
                }
            }
            do {
                // The command's own checks come first: they bound its nesting before the walk below.
                var command = try Command(json: value, now: now)
                if let rejection = Command.unnormalizedIdentifier(value) {
                    return .failure(rejection)
                }
                // It may be the retry of a command recorded before the bound: `decide` looks first.
                command.rejectionUnlessRepeated = Command.newCommandRejection(command, value)
                return .success(command)
            } catch let rejection as Rejection {
                return .failure(rejection)
            } catch {
                return .failure(.invalid("\(error)"))
            }
        }
        guard inputs.count >= 64 else { return inputs.map(read) }
        return try! concurrentMap(inputs, read)  // `read` answers every failure as a value: nothing is thrown
    }

    /// A command as the log recorded it, read as the ledger reads a command it is sent (identifiers
    /// in NFC included): a history holding one the ledger would have refused cannot verify.
    static func recordedCommand(_ json: JSONValue, at: Timestamp) throws -> Command {
        // The ledger records every command with its `at` (filled in when it was sent without).
        guard json["at"].stringValue != nil else { throw Rejection.invalid("the recorded command has no at") }
        // Decided again, never compared with a retry: no fingerprint.
        let command = try Command(json: json, now: at, fingerprinting: false)
        if let rejection = Command.unnormalizedIdentifier(json) { throw rejection }
        return command
    }

    /// A command of a batch the rules decided, with where its events go in the log.
    private struct DecidedCommand: Sendable {
        var command: Command
        var decision: Decision
        /// The position of its first event (its events follow one by one).
        var firstPosition: UInt64
        /// The log's head once it was decided (its last event's position, or the head before it
        /// when it appended nothing).
        var headAfter: UInt64
    }

    /// What answers a command of a batch: a result known while deciding, the command's own
    /// decision, or the first result of an earlier command of the batch under the same `id`.
    private enum Answer {
        case known(CommandResult)
        case decided(Int)
        case repeating(Int)
    }

    /// Decides a batch in three steps. The rules decide each command in order (one thread: the
    /// state is theirs); then the events' JSON is made on every core (pure work on values already
    /// decided); then the events are chained and stored in order, and the results (on every core),
    /// the idempotency entries, the audit entries and the records (on every core) follow, in this
    /// transaction.
    private func decide(_ commands: [Result<Command, Rejection>], now: Timestamp, _ txn: LMDBTransaction) throws -> [CommandResult] {
        var answers: [Answer] = []
        answers.reserveCapacity(commands.count)
        var decided: [DecidedCommand] = []
        decided.reserveCapacity(commands.count)
        // The ids this batch appended under so far (not in the index until it is written below).
        var batchIDs: [String: [String: Int]] = [:]
        let firstNew = head.position + 1
        var position = head.position
        for (index, read) in commands.enumerated() {
            let parsed: Command
            switch read {
            case .success(let command): parsed = command
            case .failure(let rejection):
                answers.append(.known(.refused(rejection)))
                continue
            }
            // Secrets never enter the log: it records their digest, the secrets store keeps them.
            let (command, newSecrets) = parsed.redactingSecrets()
            // A retry: of a command earlier in this batch, or of one the index remembers.
            var used = false
            if let id = command.id {
                if let k = batchIDs[command.app]?[id] {
                    used = true
                    if command.hasFingerprint(decided[k].command.fingerprint) {
                        answers.append(.repeating(k))
                        continue
                    }
                } else if let entry = try IdempotencyIndex.entry(app: command.app, id: id, txn) {
                    used = true
                    if command.hasFingerprint(entry.fingerprint) {
                        var first = (try? JSONValue(parsing: entry.result)) ?? .null
                        if let (position, count) = entry.events {
                            let values = try EventLog.values(txn, from: position, limit: count)
                            first["events"] = .array(try values.map { try JSONValue(parsing: $0.1) })
                        }
                        answers.append(.known(.repeated(first)))
                        continue
                    }
                }
            }
            // Not a retry: a command breaking a bound for new commands is refused for what it is
            // (also under the id of another command: it is malformed first).
            if let rejection = command.rejectionUnlessRepeated {
                answers.append(.known(.refused(rejection)))
                continue
            }
            if let id = command.id, used {
                answers.append(.known(.refused(Rejection(.idempotencyConflict,
                    "command id \"\(id)\" was already used in app \"\(command.app)\" for a different command; use a new id"))))
                continue
            }
            let decision = state.decide(command, codes: &codes)
            if let inconsistency = decision.inconsistency {
                // The batch rolls back, the state is folded again from the committed log, and the
                // batch is decided again without this command.
                throw InconsistentDecision(index: index, message: "the \(command.type) command could not be decided consistently (\(inconsistency)); it was not recorded; run `referral-ledger verify`")
            }
            if decision.rejection == nil, !newSecrets.isEmpty {
                try SecretStore.save(app: command.app, newSecrets, txn)
                for (key, value) in newSecrets { secrets[command.app, default: [:]][key] = value }
            }
            let first = position + 1
            position += UInt64(decision.events.count)
            precondition(position == state.head, "the log and the state disagree on the head")
            if let id = command.id, !decision.events.isEmpty { batchIDs[command.app, default: [:]][id] = decided.count }
            answers.append(.decided(decided.count))
            decided.append(DecidedCommand(command: command, decision: decision, firstPosition: first, headAfter: position))
        }

        // The events' JSON, on every core when there are many.
        let eventCount = Int(position + 1 - firstNew)
        let many = eventCount >= 256
        let work = decided
        @Sendable func encode(_ d: DecidedCommand) -> [EventLog.UnchainedEvent] {
            d.decision.events.enumerated().map { n, event in
                EventLog.UnchainedEvent(position: d.firstPosition + UInt64(n), event: event, commandID: d.command.id, recordedAt: now)
            }
        }
        let unchained = many ? try! concurrentMap(work, encode) : work.map(encode)
        // Chained and stored in order.
        var stored: [[StoredEvent]] = []
        stored.reserveCapacity(unchained.count)
        for events in unchained { stored.append(try EventLog.append(chaining: events, head: &head, txn)) }
        precondition(head.position == position, "the log and the state disagree on the head")

        // The results (and the index form of those with an id).
        struct Made: Sendable {
            var result: CommandResult
            var indexForm: [UInt8]?
        }
        let storedNow = stored
        @Sendable func make(_ n: Int) -> Made {
            let d = work[n], events = storedNow[n]
            if d.command.id != nil, !events.isEmpty {
                let (result, withoutEvents) = CommandResult.decidedWithIndexForm(d.decision, stored: events)
                return Made(result: result, indexForm: withoutEvents)
            }
            return Made(result: CommandResult.decided(d.decision, stored: events, head: d.headAfter), indexForm: nil)
        }
        let made = many ? try! concurrentMap(Array(work.indices), make) : work.indices.map(make)
        for (d, m) in zip(work, made) {
            guard let id = d.command.id, let indexForm = m.indexForm else { continue }
            try IdempotencyIndex.remember(app: d.command.app, id: id, .init(fingerprint: d.command.fingerprint, result: indexForm,
                                                                              events: (d.firstPosition, d.decision.events.count)), txn)
        }
        let audit = try ProjectionStore.newIndexEntries(ProjectionStore.indexEntries(stored.joined()), firstPosition: firstNew, txn)
        try ProjectionStore.write(state.takeChanges(), state, audit: audit, txn)
        if eventCount > 0 {
            try EventLog.writeHead(head, txn)
            try ProjectionStore.writeCheckpoint(head.position, txn)
        }
        return answers.map { answer in
            switch answer {
            case .known(let result): return result
            case .decided(let n): return made[n].result
            case .repeating(let n): return .repeated(made[n].result.json)
            }
        }
    }
}

/// One command for `submit`: its JSON text as received, or already parsed.
public enum CommandInput: Sendable {
    case text([UInt8])
    case value(JSONValue)
}

/// A ledger-level failure: a code and a message saying what to do.
public struct LedgerError: CodedError, Sendable {
    /// `shutting_down`, `projections_stale`, `no_ledger`, `unreadable_input`, `read_only`, …
    public var code: String
    /// What happened and what to do, in words meant for the operator.
    public var message: String
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }
    public var errorCode: String { code }
}
