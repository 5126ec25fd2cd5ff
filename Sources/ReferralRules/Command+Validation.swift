// The standard library's own normalizer: the one `String ==` and hashing use.
@_spi(_Unicode) import Swift
import LedgerCodec

/// Checks on a command's JSON beyond reading its fields (`Command(json:now:)`): identifiers in one
/// Unicode form (every command, recorded ones too), and the bounds that hold for new commands only
/// (a command already in the log is read as it was accepted).
extension Command {
    /// Fields whose text names something the rules compare: a user, a program, a code, an event,
    /// an offer, a milestone, a workspace. Free text (a reason, a note) and bodies kept as sent (a
    /// RevenueCat `event`, a custom `payload`) are not identifiers.
    static let identifierFields: Set<String> = ["app", "id", "program", "user", "code", "event_id", "name", "by", "reward_id",
                                                "device_id", "offer_id", "workspace", "qualifying_event", "trigger", "feature",
                                                "entitlement", "prefix",
                                                // and in events: the people a reward or enrolment names
                                                "recipient", "friend", "inviter"]
    static let bodiesKeptAsSent: Set<String> = ["event", "payload", "revenuecat_event"]

    /// Identifiers must be in Unicode normalization form C. Swift compares strings by canonical
    /// equivalence, so `e` + U+0301 and U+00E9 would be one user to the rules and two to every
    /// byte-keyed index (LMDB, an auditor's reader). With one form only, equal means equal bytes.
    /// Answers the refusal naming the first identifier that is not (under `root`), or nil.
    public static func unnormalizedIdentifier(_ command: JSONValue, root: String = "command") -> Rejection? {
        // ASCII text is always in NFC: most commands hold nothing else, and skip the walk below.
        guard !isAllASCII(command) else { return nil }
        func check(_ value: JSONValue, _ path: String, named: Bool) -> Rejection? {
            switch value {
            case .string(let text) where named:
                return isNFC(text) ? nil : .invalid("\(path) is not in Unicode normalization form C; send it precomposed (NFC), so that one ID has one spelling")
            case .object(let object):
                for (key, member) in object where !bodiesKeptAsSent.contains(key) {
                    if let problem = check(member, path + "." + key, named: identifierFields.contains(key)) { return problem }
                }
            case .array(let items):
                for (n, item) in items.enumerated() {
                    if let problem = check(item, path + "[\(n)]", named: named) { return problem }
                }
            default: break
            }
            return nil
        }
        return check(command, root, named: false)
    }

    /// The bounds a new command is held to, which the log's older commands may not meet (so a
    /// recorded command is not checked against them): the refusal, or nil. `json` is the command
    /// as sent.
    public static func newCommandRejection(_ command: Command, _ json: JSONValue) -> Rejection? {
        do {
            switch command.body {
            case .createProgram(_, _, let config), .updateProgram(_, let config): try checkNewConfig(config)
            case .substituteReward(_, _, let benefit): try checkNewBenefit(benefit, "command.benefit")
            default: break
            }
        } catch let rejection as Rejection {
            return rejection
        } catch {
            return .invalid("\(error)")
        }
        // `{"sha256": …}` is how the log records a secret; a client sends the secret itself
        // (a digest sent in would claim a rotation the worker never saw).
        if command.type == "app.configure", let settings = json["settings"].objectValue,
           let key = AppSettings.secretKeys.sorted().first(where: { settings[$0]?.objectValue != nil }) {
            return .invalid("settings.\(key) must be the secret itself (a string) or null; {\"sha256\": …} is only how the log records it")
        }
        // Every notice records its recipients, and an append key's enrolment can cause one.
        if command.type.hasPrefix("program."), let notify = json["config"]["notify"].arrayValue, notify.count > 50 {
            return .invalid("command.config.notify holds at most 50 addresses (use a mailing list for more)")
        }
        return nil
    }

    /// A config sent in a new command, held to the checks added since configs were first read so
    /// (a recorded config is read back with the rules that accepted it, so an old ledger still opens,
    /// and a retry of a command an older version recorded answers its first result).
    private static func checkNewConfig(_ config: ProgramConfig) throws {
        for (n, address) in config.notify.enumerated() where !ProgramConfig.isMailAddress(address) {
            throw Rejection.invalid("command.config.notify[\(n)] must be one plain e-mail address such as owner@example.com")
        }
        if let friend = config.friend { try checkNewBenefit(friend.benefit, "command.config.friend.benefit") }
        switch config.inviter?.reward {
        case .once(_, let benefit)?, .every(_, _, let benefit)?:
            try checkNewBenefit(benefit, "command.config.inviter.reward.benefit")
        case .milestones(let list)?:
            for (n, m) in list.enumerated() {
                try FieldReader.checkNotBlank(m.id, "command.config.inviter.reward.milestones[\(n)].id")
                try checkNewBenefit(m.benefit, "command.config.inviter.reward.milestones[\(n)].benefit")
            }
        case nil:
            break
        }
    }

    /// A benefit in a new command (a config's, or `reward.substitute`'s): its identifiers not only
    /// white space, and a RevenueCat `duration` with each unit once and in ISO 8601's order
    /// (`P1M1M`, `P1D1M` are refused rather than read one way of several).
    private static func checkNewBenefit(_ benefit: Benefit, _ context: String) throws {
        switch benefit {
        case .appleOfferCode(let offerID): try FieldReader.checkNotBlank(offerID, "\(context).offer_id")
        case .revenueCatEntitlement(let entitlement, let duration):
            try FieldReader.checkNotBlank(entitlement, "\(context).entitlement")
            guard duration.hasUnitsInOrder else {
                throw Rejection.invalid("\(context).duration \"\(duration.text)\" repeats a unit or puts them out of order; write each unit once, in the order Y M W D T H M S (P1M15D, P1Y2M)")
            }
        case .custom(let feature, _): try FieldReader.checkNotBlank(feature, "\(context).feature")
        case .points: break
        }
    }

    /// Whether `text` is in Unicode normalization form C (ASCII always is), as the Swift standard
    /// library normalizes: the form its `==` compares. Foundation's normalizer can lag behind it
    /// (combining marks added in Unicode 16 are left unordered there), and two spellings it
    /// passed would be one user to the rules and two to every byte-keyed index.
    public static func isNFC(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 < 0x80 } || text.utf8.elementsEqual(text._nfcCodeUnits)
    }

    /// Whether every string in `value` (member names aside) is ASCII.
    private static func isAllASCII(_ value: JSONValue) -> Bool {
        switch value {
        case .string(var text): return text.withUTF8 { !$0.contains { $0 >= 0x80 } }
        case .object(let object): return object.members.allSatisfy { isAllASCII($0.value) }
        case .array(let items): return items.allSatisfy(isAllASCII)
        default: return true
        }
    }
}
