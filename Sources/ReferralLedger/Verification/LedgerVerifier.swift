import LedgerCodec
import LedgerStore
import ReferralProjections
import ReferralRules

/// The replay verifier (SPEC §9, §10 `verify`): integrity of the chain, the rules by an
/// independent fold, and reproducibility: re-deciding every recorded command against the
/// state before it must give exactly the recorded events.
///
/// Two ways to replay. `.full` keeps two states: the fold of the recorded events and the state the
/// re-decisions run on (reset to the recorded one after a mismatch), and reports every mismatch.
/// `.fast` keeps one: each command is re-decided against it, and as long as the decision equals
/// the recorded events, the state after deciding *is* the fold of the recorded events, so nothing
/// is folded twice. At the first surprise (a mismatch, a group without its command, a command that
/// cannot be read) it stops and asks for a `.full` replay (`needsFullReplay`), which then names
/// every violation. A clean history is proven by the fast replay alone.
public struct LedgerVerifier {
    public enum Replay: Sendable { case fast, full }
    public let replay: Replay
    private var chain = ChainVerifier()
    /// The rules, audited on a queue of their own as the events come (a copy of this verifier
    /// shares it: feed one copy only).
    private let rules = RuleAuditStage()
    /// The fold of the recorded events (in a fast replay: the state the decisions reached, the same
    /// whenever `needsFullReplay` is false).
    public private(set) var recorded = LedgerState.replaying()
    /// The state the re-decisions run on in a full replay; equal to `recorded` whenever the history is reproducible.
    private var decided = LedgerState.replaying()
    private var group: [StoredEvent] = []
    /// The command that opened the current group, as read ahead.
    private var groupCommand: Command?
    private var replayViolations: [Violation] = []
    private var foldBroken = false
    /// A fast replay met something only a full replay can report.
    public private(set) var needsFullReplay = false
    /// Stop checking after this position (`--until N`).
    public var until: UInt64 = .max
    public private(set) var checked: UInt64 = 0
    /// A position whose value hash to remember (a checkpoint's head), and that hash.
    public var pinnedPosition: UInt64?
    public private(set) var pinnedHash: String?
    private var sawCut = false
    private var lastGroupCut = false

    public init(replay: Replay = .full) { self.replay = replay }

    /// Feeds the next stored value (with its LMDB key, or nil when read from an export file).
    public mutating func add(key: UInt64?, value: [UInt8]) {
        add(ExaminedValue(key: key, value: value))
    }

    /// Feeds the next stored value, examined ahead (possibly on another thread).
    public mutating func add(_ examined: ExaminedValue) {
        guard (examined.key ?? checked + 1) <= until else {
            // The cut may fall inside a command's events: then its decision cannot be re-checked.
            if !sawCut, let next = examined.event, next.data["command"].isNull { lastGroupCut = true }
            sawCut = true
            return
        }
        checked += 1
        let event = chain.check(examined)
        if let pinnedPosition, (examined.key ?? checked) == pinnedPosition { pinnedHash = chain.lastHash }
        guard let event else { return }
        if !event.data["command"].isNull {
            if !group.isEmpty { redecide() }
            groupCommand = examined.command
        }
        rules.add(event, unnormalized: examined.unnormalized)
        if replay == .full, !foldBroken {
            do {
                try recorded.apply(type: event.type, at: event.at, data: event.data, position: event.position)
            } catch {
                replayViolations.append(Violation(position: event.position, rule: "fold.error", message: "the rules cannot apply this event: \(error)"))
                foldBroken = true
            }
        }
        group.append(event)
    }

    /// Fast replay: re-decides the group's command on the one state; anything but an exact match
    /// leaves that state unusable and calls for a full replay.
    private mutating func redecideFast() {
        defer { group = [] }
        guard !needsFullReplay, let first = group.first else { return }
        guard !first.data["command"].isNull, let command = groupCommand else {
            needsFullReplay = true
            return
        }
        var codes = ReplayCodes(recorded: group.first { $0.type == "invite.created" }?.data["code"].stringValue)
        let decision = recorded.decide(command, codes: &codes)
        if decision.inconsistency != nil || decision.events.count != group.count
            || zip(decision.events, group).contains(where: { $0.type != $1.type || $0.at != $1.at || $0.data != $1.data }) {
            needsFullReplay = true
        }
    }

    /// Re-decides the command that opened the current group and compares the events.
    private mutating func redecide() {
        if replay == .fast { return redecideFast() }
        defer { group = [] }
        guard !foldBroken, let first = group.first else { return }
        let recordedEvents = group.map { NewEvent(type: $0.type, at: $0.at, data: $0.data) }
        guard !first.data["command"].isNull else {
            report(first.position, "replay.no_command", "these events do not start with the command that caused them")
            decided = recorded
            return
        }
        let command: Command
        do {
            // Read ahead already; read again only to say why it cannot be read.
            command = try groupCommand ?? Ledger.recordedCommand(first.data["command"], at: first.at)
        } catch {
            report(first.position, "replay.command", "the recorded command cannot be read: \(error)")
            decided = recorded
            return
        }
        var codes = ReplayCodes(recorded: group.first { $0.type == "invite.created" }?.data["code"].stringValue)
        let decision = decided.decide(command, codes: &codes)
        if let inconsistency = decision.inconsistency {
            report(first.position, "replay.inconsistent",
                   "re-deciding the \(command.type) command met a state the rules cannot continue from (\(inconsistency)): the history before it was altered")
            decided = recorded
            return
        }
        if decision.events != recordedEvents {
            let index = zip(decision.events, recordedEvents).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                ?? min(decision.events.count, recordedEvents.count)
            let position = index < group.count ? group[index].position : group[group.count - 1].position
            let expected = index < decision.events.count ? decision.events[index] : nil
            let found = index < recordedEvents.count ? recordedEvents[index] : nil
            let difference: String
            if let expected, let found, expected.type == found.type {
                let article = "aeiou".contains(found.type.first ?? "x") ? "an" : "a"
                difference = "\(article) \(found.type) event whose \(Self.firstDifference(decided: expected, recorded: found))"
            } else {
                difference = "\(expected?.type ?? "nothing") where the log holds \(found?.type ?? "nothing")"
            }
            report(position, "replay.mismatch",
                   "re-deciding the \(command.type) command gives \(difference): the recorded decision is not what the rules decide")
            decided = recorded
        }
    }

    /// Where two events of one type part: `at`, else the first `data` field (in key order) whose
    /// values differ, with both values, shortened.
    static func firstDifference(decided: NewEvent, recorded: NewEvent) -> String {
        func shown(_ value: JSONValue?) -> String {
            guard let value else { return "absent" }
            let text = value.text
            return text.count <= 80 ? text : text.prefix(77) + "..."
        }
        if decided.at != recorded.at { return "at is \(recorded.at) in the log, \(decided.at) re-decided" }
        let d = decided.data.objectValue, r = recorded.data.objectValue
        for key in Set(d?.keys ?? []).union(r?.keys ?? []).sorted() where d?[key] != r?[key] {
            return "data.\(key) is \(shown(r?[key])) in the log, \(shown(d?[key])) re-decided"
        }
        return "data is \(shown(recorded.data)) in the log, \(shown(decided.data)) re-decided"
    }

    private mutating func report(_ position: UInt64, _ rule: String, _ message: String) {
        if replayViolations.count < 1000 { replayViolations.append(Violation(position: position, rule: rule, message: message)) }
    }

    /// Ends the history: re-decides the last command and checks the head, if given. A fast replay
    /// may only now find that it needs a full one (`needsFullReplay`).
    public mutating func finish(head: ChainHead?) -> [Violation] {
        if !group.isEmpty && !lastGroupCut { redecide() }
        // The head is checked when the history was read up to it (a cut at the head is only the
        // look one event past it, at what a writer appended meanwhile).
        if let head, !sawCut || head.position <= until { chain.checkHead(head) }
        return (chain.violations + rules.violations + replayViolations).sorted { ($0.position, $0.rule) < ($1.position, $1.rule) }
    }

    public var eventCount: UInt64 { chain.count }

    /// Whether `recorded` is the fold of every event of the history read: no value was missing or
    /// unreadable and every event applied. Then stored projections can be compared with it, even
    /// when the history breaks rules.
    public var foldedWholeHistory: Bool { chain.readEveryValue && !foldBroken }
}

/// Hands a replay the invite code the log recorded.
struct ReplayCodes: InviteCodeMaker {
    var recorded: String?
    mutating func makeCode(_ config: ProgramConfig.InviteConfig, user: String) -> String { recorded ?? "" }
}
