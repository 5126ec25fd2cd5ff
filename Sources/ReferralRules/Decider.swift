import LedgerCodec

/// What a command decided: the events to append (already folded into the state), or a
/// refusal, plus what its result says besides (`code`, `url`, …).
public struct Decision: Sendable {
    public var events: [NewEvent] = []
    public var rejection: Rejection?
    public var duplicate = false
    /// Extra result fields, e.g. `code` and `url` for `invite.create`, `position` of the original for duplicates.
    public var extra: [String: JSONValue] = [:]
    /// Set when deciding met a state the rules and the fold disagree on (only a forged or corrupt
    /// history, or a bug, leads there): the events are not to be trusted, and the state that decided
    /// them must be folded again from the log. Never a crash: the verifier reports it, the writer
    /// rolls the batch back.
    public var inconsistency: String?
}

/// How a handler ended (events, if any, are in the outbox).
enum Outcome {
    case accepted([String: JSONValue] = [:])
    case duplicate([String: JSONValue] = [:])
    case refusedWithRecord(Rejection)
}

/// Where new invite codes come from: live ledgers draw from the secure random source; a replay
/// hands back the code the log recorded, so re-deciding reaches the same events.
public protocol InviteCodeMaker {
    mutating func makeCode(_ config: ProgramConfig.InviteConfig, user: String) -> String
}

public struct RandomInviteCodes: InviteCodeMaker {
    public init() {}
    public mutating func makeCode(_ config: ProgramConfig.InviteConfig, user: String) -> String {
        InviteCodes.make(config, user: user) { SecureRandom.index(below: $0) }
    }
}

/// Delivery attempts in one round before a reward is `failed` (SPEC §11).
public let maxDeliveryAttempts = 5

extension LedgerState {
    /// Decides `command` against this state. Accepted events are folded in before this returns;
    /// a refusal that records nothing leaves the state exactly as it was.
    public mutating func decide(_ command: Command, codes: inout some InviteCodeMaker) -> Decision {
        now = command.at
        currentApp = command.app
        outbox = []
        currentCommand = command.json
        inconsistency = nil
        var decision = Decision()
        do {
            switch try handle(command, codes: &codes) {
            case .accepted(let extra): decision.extra = extra
            case .duplicate(let extra): decision.duplicate = true; decision.extra = extra
            case .refusedWithRecord(let rejection): decision.rejection = rejection
            }
        } catch let rejection as Rejection {
            if !outbox.isEmpty, inconsistency == nil { inconsistency = "a rule refused the command after deciding events: \(rejection)" }
            decision.rejection = rejection
        } catch {
            if !outbox.isEmpty, inconsistency == nil { inconsistency = "unexpected error after deciding events: \(error)" }
            decision.rejection = Rejection.invalid("\(error)")
        }
        decision.events = outbox.map { NewEvent(type: $0.type.rawValue, at: now, data: $0.data) }
        decision.inconsistency = inconsistency
        outbox = []
        inconsistency = nil
        return decision
    }

    private mutating func handle(_ command: Command, codes: inout some InviteCodeMaker) throws -> Outcome {
        switch command.body {
        case .configureApp(let settings): return configureApp(settings)
        case .createProgram(let p, let env, let config): return try createProgram(p, env, config)
        case .updateProgram(let p, let config): return try updateProgram(p, config)
        case .activateProgram(let p): return try activateProgram(p)
        case .pauseProgram(let p): return try pauseProgram(p)
        case .verifyAccount(let user, let created): return verifyAccount(user, created)
        case .createInvite(let p, let user): return try createInvite(p, user, codes: &codes)
        case .enroll(let p, let friend, let code, let created, let device): return try enroll(p, friend, code, created, device)
        case .track(let user, let name, let eventID): return track(user, name, eventID)
        case .revenueCat(let event): return revenueCat(event)
        case .approveReward(let id, let by): return try approve(id, by)
        case .rejectReward(let id, let by, let reason): return try reject(id, by, reason)
        case .substituteReward(let id, let by, let benefit): return try substitute(id, by, benefit)
        case .retryReward(let id, let by): return try retry(id, by)
        case .recordDelivery(let id, let by, let note): return try recordDelivery(id, by, note)
        case .verifyEligibility(let p, let friend, let by, let eligible): return try verifyEligibility(p, friend, by, eligible)
        case .importInventory(let p, let side, let offer, let list): return try importInventory(p, side, offer, list)
        case .deliveryStarted(let id, let attempt): return try deliveryStarted(id, attempt)
        case .deliverySucceeded(let id, let attempt): return try deliverySucceeded(id, attempt)
        case .deliveryFailed(let id, let attempt, let error): return try deliveryFailed(id, attempt, error)
        case .spendPoints(let user, let amount, let reason): return try spendPoints(user, amount, reason)
        case .reportNotification(let position, let outcome, let error): return try reportNotification(position, outcome, error)
        }
    }

    // MARK: - The outbox

    /// Records an event: folds it in now (so later rules see it) and queues it for the log.
    /// The first event of a command carries the command itself, for replays and audits.
    /// (The most frequent events' fields are written in key order, the order they are stored in:
    /// such a literal is only checked, not sorted.)
    mutating func emit(_ type: EventType, _ fields: JSONObject) {
        var data = fields
        data["app"] = .string(currentApp)
        if outbox.isEmpty { data["command"] = currentCommand }
        let value = JSONValue.object(data)
        guard inconsistency == nil else { return }
        do {
            try apply(type: type.rawValue, at: now, data: value, position: head + 1)
        } catch {
            inconsistency = "the fold refused a \(type.rawValue) event the rules decided: \(error)"
            return
        }
        outbox.append(NewEventDraft(type: type, data: value))
    }

    // MARK: - Lookups
    //
    // Rules read the state and keep only small values across `emit`: a copy of a program or an
    // app held while the fold mutates it would make the fold copy its collections (O(size) per
    // event). So lookups hand a borrowed program to a closure, and `app` is only used inline.

    var app: AppState { apps[currentApp] ?? AppState(name: currentApp) }

    /// Reads the current app's program `key`; refuses with `unknown_program` when there is none.
    func inProgram<T>(_ key: String, _ body: (ProgramState) throws -> T) throws -> T {
        guard let p = apps[currentApp]?.programs[key] else {
            throw Rejection(.unknownProgram, "app \"\(currentApp)\" has no program \"\(key)\"; create it with program.create")
        }
        return try body(p)
    }

    /// Reads the current app's program `key`, if it exists.
    func ifProgram<T>(_ key: String, _ body: (ProgramState) -> T?) -> T? {
        guard let p = apps[currentApp]?.programs[key] else { return nil }
        return body(p)
    }

    /// A reward of the current app (a copy of the reward only).
    func reward(_ id: String) throws -> Reward {
        guard let pk = apps[currentApp]?.rewardPrograms[id], let r = apps[currentApp]?.programs[pk]?.rewards[id] else {
            throw Rejection(.unknownReward, "app \"\(currentApp)\" has no reward \"\(id)\"")
        }
        return r
    }

    /// The deterministic reward ID of (app, program, side, recipient, slot) (SPEC §7).
    public static func rewardID(app: String, program: String, side: Command.Side, recipient: String, slot: String) -> String {
        "rw_" + String(SHA256.hex([app, program, side.rawValue, recipient, slot].joined(separator: "\u{1F}")).prefix(32))
    }

    func shareURL(_ code: String) -> JSONValue {
        guard let host = app.settings.shareLinkHost else { return .null }
        return .string("https://\(host)/r/\(code)")
    }
}
