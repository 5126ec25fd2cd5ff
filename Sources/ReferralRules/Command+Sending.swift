import LedgerCodec

/// A command built in code, written as the JSON a client sends (SPEC §2), so that it is read and
/// checked exactly like one: `Command(json: Command.json(body, app: app), now: now).body == body`
/// for every body the ledger accepts.
extension Command {
    /// The JSON command that sends `body` for `app`; `at` left out is filled in by the ledger, `id`
    /// is the idempotency key.
    public static func json(_ body: Body, app: String, at: Timestamp? = nil, id: String? = nil) -> JSONValue {
        var members = body.fields
        members["type"] = .string(body.type)
        members["app"] = .string(app)
        if let at { members["at"] = .string(at.description) }
        if let id { members["id"] = .string(id) }
        return .object(members)
    }
}

extension Command.Body {
    /// The command type this body is sent as (`referral.enroll`, …).
    public var type: String {
        switch self {
        case .configureApp: return "app.configure"
        case .createProgram: return "program.create"
        case .updateProgram: return "program.update"
        case .activateProgram: return "program.activate"
        case .pauseProgram: return "program.pause"
        case .verifyAccount: return "account.verify"
        case .createInvite: return "invite.create"
        case .enroll: return "referral.enroll"
        case .track: return "event.track"
        case .revenueCat: return "revenuecat.event"
        case .approveReward: return "reward.approve"
        case .rejectReward: return "reward.reject"
        case .substituteReward: return "reward.substitute"
        case .retryReward: return "reward.retry"
        case .recordDelivery: return "reward.record_delivery"
        case .verifyEligibility: return "eligibility.verify"
        case .importInventory: return "inventory.import"
        case .deliveryStarted: return "delivery.started"
        case .deliverySucceeded: return "delivery.succeeded"
        case .deliveryFailed: return "delivery.failed"
        case .spendPoints: return "points.spend"
        case .reportNotification: return "notification.report"
        }
    }

    /// The command's own fields, named as on the wire (everything but `type`, `app`, `at`, `id`).
    public var fields: [String: JSONValue] {
        switch self {
        case .configureApp(let settings):
            return ["settings": settings]
        case .createProgram(let program, let environment, let config):
            return ["program": .string(program), "environment": .string(environment.rawValue), "config": config.json]
        case .updateProgram(let program, let config):
            return ["program": .string(program), "config": config.json]
        case .activateProgram(let program), .pauseProgram(let program):
            return ["program": .string(program)]
        case .verifyAccount(let user, let created):
            return ["user": .string(user), "account_created_at": .string(created.description)]
        case .createInvite(let program, let user):
            return ["program": .string(program), "user": .string(user)]
        case .enroll(let program, let friend, let code, let created, let device):
            var f: [String: JSONValue] = ["program": .string(program), "user": .string(friend), "code": .string(code)]
            if let created { f["account_created_at"] = .string(created.description) }
            if let device { f["device_id"] = .string(device) }
            return f
        case .track(let user, let name, let eventID):
            return ["user": .string(user), "name": .string(name), "event_id": .string(eventID)]
        case .revenueCat(let event):
            return ["event": event]
        case .approveReward(let reward, let by), .retryReward(let reward, let by):
            return ["reward_id": .string(reward), "by": .string(by)]
        case .rejectReward(let reward, let by, let reason):
            return ["reward_id": .string(reward), "by": .string(by), "reason": .string(reason)]
        case .substituteReward(let reward, let by, let benefit):
            return ["reward_id": .string(reward), "by": .string(by), "benefit": benefit.json]
        case .recordDelivery(let reward, let by, let note):
            return ["reward_id": .string(reward), "by": .string(by), "note": .string(note)]
        case .verifyEligibility(let program, let friend, let by, let eligible):
            return ["program": .string(program), "user": .string(friend), "by": .string(by),
                    "decision": .string(eligible ? "eligible" : "ineligible")]
        case .importInventory(let program, let side, let offer, let codes):
            return ["program": .string(program), "side": .string(side.rawValue), "offer_id": .string(offer),
                    "codes": .array(codes.map { ["code": .string($0.code), "expires_at": .optional($0.expiresAt?.description)] })]
        case .deliveryStarted(let reward, let attempt), .deliverySucceeded(let reward, let attempt):
            return ["reward_id": .string(reward), "attempt": .int(attempt)]
        case .deliveryFailed(let reward, let attempt, let error):
            return ["reward_id": .string(reward), "attempt": .int(attempt), "error": .string(error)]
        case .spendPoints(let user, let amount, let reason):
            return ["user": .string(user), "amount": .int(amount), "reason": .string(reason)]
        case .reportNotification(let position, let outcome, let error):
            var f: [String: JSONValue] = ["notification": .int(Int64(clamping: position)), "outcome": .string(outcome)]
            if let error { f["error"] = .string(error) }
            return f
        }
    }
}
