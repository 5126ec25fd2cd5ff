import LedgerCodec

/// A request to the ledger (SPEC §2): decided against the current state, then either its
/// events are appended atomically or it is refused.
public struct Command: Sendable {
    public var type: String
    public var app: String
    public var at: Timestamp
    public var id: String?
    public var body: Body
    /// The command as recorded: the given object with `at` in canonical UTC form.
    public var json: JSONValue
    /// SHA-256 of the command as the rules read it, without `at`: the same `id` must come with the
    /// same fingerprint.
    public var fingerprint: String
    /// The fingerprint as versions before 2026-11-30 computed it (the command as sent, nulls and the
    /// code's spelling included): a retry of a command they recorded still matches its entry.
    public var formerFingerprint: String
    /// A bound this command breaks that holds for new commands only (`newCommandRejection`): given
    /// after the idempotency lookup, so that a retry of a command an earlier version recorded
    /// still answers its first result, and refused otherwise (with an id or without). Nil for
    /// commands read from the log.
    public var rejectionUnlessRepeated: Rejection?

    public enum Environment: String, Sendable { case live, sandbox }
    public enum Side: String, Sendable { case inviter, friend }

    public struct OfferCode: Sendable, Equatable {
        public var code: String
        public var expiresAt: Timestamp?

        public init(code: String, expiresAt: Timestamp?) {
            self.code = code
            self.expiresAt = expiresAt
        }
    }

    /// What a command asks, by type (SPEC §2). Embedders send one with `Ledger.submit(_:app:at:id:)`;
    /// it goes through the same strict reading as a client's JSON.
    public enum Body: Sendable, Equatable {
        case configureApp(settings: JSONValue)
        case createProgram(program: String, environment: Environment, config: ProgramConfig)
        case updateProgram(program: String, config: ProgramConfig)
        case activateProgram(program: String)
        case pauseProgram(program: String)
        case verifyAccount(user: String, accountCreatedAt: Timestamp)
        case createInvite(program: String, user: String)
        case enroll(program: String, friend: String, code: String, accountCreatedAt: Timestamp? = nil, deviceID: String? = nil)
        case track(user: String, name: String, eventID: String)
        case revenueCat(event: JSONValue)
        case approveReward(rewardID: String, by: String)
        case rejectReward(rewardID: String, by: String, reason: String)
        case substituteReward(rewardID: String, by: String, benefit: Benefit)
        case retryReward(rewardID: String, by: String)
        case recordDelivery(rewardID: String, by: String, note: String)
        case verifyEligibility(program: String, friend: String, by: String, eligible: Bool)
        case importInventory(program: String, side: Side, offerID: String, codes: [OfferCode])
        case deliveryStarted(rewardID: String, attempt: Int)
        case deliverySucceeded(rewardID: String, attempt: Int)
        case deliveryFailed(rewardID: String, attempt: Int, error: String)
        case spendPoints(user: String, amount: Int64, reason: String)
        /// `outcome`: `sent`, `failed`, or `simulated` (a sandbox program's notification: recorded, not mailed).
        case reportNotification(position: UInt64, outcome: String, error: String? = nil)
    }

    /// How deep a command may nest arrays and objects (the command object itself is level 1).
    public static let maximumNesting = 128

    /// Every command type, and those only an `owner` key may send (SPEC §10).
    public static let types: [String] = [
        "app.configure", "program.create", "program.update", "program.activate", "program.pause", "account.verify",
        "invite.create", "referral.enroll", "event.track", "revenuecat.event", "reward.approve", "reward.reject",
        "reward.substitute", "reward.retry", "reward.record_delivery", "eligibility.verify", "inventory.import",
        "delivery.started", "delivery.succeeded", "delivery.failed", "points.spend", "notification.report",
    ]

    /// This command with secret settings replaced by their digest (what the log records), and the
    /// secrets themselves (for the ledger's secrets store). Other commands come back unchanged.
    public func redactingSecrets() -> (Command, [String: String?]) {
        guard case .configureApp(let settings) = body else { return (self, [:]) }
        let (redacted, secrets) = AppSettings.redactSecrets(settings)
        guard !secrets.isEmpty else { return (self, [:]) }
        var copy = self
        copy.body = .configureApp(settings: redacted)
        copy.json["settings"] = redacted
        return (copy, secrets)
    }

    public static func isOwnerOnly(_ type: String) -> Bool {
        type == "app.configure" || type.hasPrefix("program.") || type == "inventory.import" || type.hasPrefix("reward.")
            || type == "eligibility.verify" || type.hasPrefix("delivery.") || type.hasPrefix("notification.")
    }

    /// Reads a command strictly. `now` fills a missing `at` (SPEC §1), for every type: the webhook
    /// route, not the command, takes `at` from a RevenueCat event's `event_timestamp_ms`.
    ///
    /// `fingerprinting: false` leaves `fingerprint` and `formerFingerprint` empty: for a command
    /// read back from the log to be decided again (`verify`), which is never compared with a retry.
    public init(json value: JSONValue, now: Timestamp, fingerprinting: Bool = true) throws {
        // The log stores a command a few levels down inside its first event (and results hold
        // events), and reads every value back with a parser bounded at 256 levels: a command
        // nesting up to that bound would be accepted and leave the log unreadable.
        guard !value.nests(deeperThan: Self.maximumNesting) else {
            throw Rejection.invalid("the command nests arrays and objects more than \(Self.maximumNesting) levels deep")
        }
        var r = try FieldReader(value, context: "command")
        r.refusesBlankIdentifiers = true
        let type = try r.string("type")
        guard Self.types.contains(type) else {
            throw Rejection.invalid("unknown command type \"\(type)\"; known types: \(Self.types.joined(separator: ", "))")
        }
        self.type = type
        app = try r.identifier("app")
        guard app.utf8.count <= 64 else { throw Rejection.invalid("command.app is longer than 64 bytes") }
        id = try r.optionalIdentifier("id")
        let at = try r.optionalTimestamp("at") ?? now

        func user(_ key: String = "user") throws -> String { try r.identifier(key) }
        func program() throws -> String {
            let p = try r.identifier("program")
            guard p.utf8.count <= 64, p.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == ".") }) else {
                throw Rejection.invalid("command.program must be a campaign key of 1–64 ASCII letters, digits, '_', '-' or '.'")
            }
            return p
        }

        switch type {
        case "app.configure":
            body = .configureApp(settings: try AppSettings.validate(try r.object("settings")))
        case "program.create":
            let p = try program()
            let env = try r.oneOf("environment", ["live", "sandbox"])
            body = .createProgram(program: p, environment: Environment(rawValue: env)!, config: try ProgramConfig(json: try r.object("config")))
        case "program.update":
            body = .updateProgram(program: try program(), config: try ProgramConfig(json: try r.object("config")))
        case "program.activate":
            body = .activateProgram(program: try program())
        case "program.pause":
            body = .pauseProgram(program: try program())
        case "account.verify":
            body = .verifyAccount(user: try user(), accountCreatedAt: try r.timestamp("account_created_at"))
        case "invite.create":
            body = .createInvite(program: try program(), user: try user())
        case "referral.enroll":
            let p = try program()
            let friend = try user()
            let code = try r.string("code")
            guard code.utf8.count <= 128 else { throw Rejection.invalid("command.code is longer than 128 bytes") }
            // Typed codes keep their surrounding spaces in the record (tab and newlines included,
            // which JSON escapes); anything else must be an identifier's characters, so nothing
            // the log would hold raw (C1 controls, line separators) gets in.
            let inner = code.trimmingSpaces()
            guard !inner.isEmpty else { throw Rejection.invalid("command.code is blank: send the invite code the friend typed or followed") }
            try FieldReader.checkIdentifier(inner, "command.code")
            // Around it, only the controls JSON escapes (C0: tab, newlines) may stand.
            guard !code.unicodeScalars.contains(where: { $0.value >= 0x7F && FieldReader.isControl($0) }) else {
                throw Rejection.invalid("command.code must not contain control characters")
            }
            let created = try r.optionalTimestamp("account_created_at")
            let device = try r.optionalIdentifier("device_id")
            body = .enroll(program: p, friend: friend, code: code, accountCreatedAt: created, deviceID: device)
        case "event.track":
            let u = try user()
            let name = try r.string("name")
            try ProgramConfig.checkEventName(name, "command.name")
            body = .track(user: u, name: name, eventID: try r.identifier("event_id"))
        case "revenuecat.event":
            let event = try r.object("event")
            guard let rcID = event["id"].stringValue, !rcID.isEmpty else { throw Rejection.invalid("command.event.id must be RevenueCat's event id (a string)") }
            _ = rcID
            guard event["type"].stringValue != nil else { throw Rejection.invalid("command.event.type must be a string") }
            if !event["event_timestamp_ms"].isNull {
                // Only times that RFC 3339 can write (years 1970–9999) may become a command's `at`;
                // checked also when `at` is given, so the log never holds a time no reader can read.
                guard case .int(let ms) = event["event_timestamp_ms"] else {
                    throw Rejection.invalid("command.event.event_timestamp_ms must be a whole number of milliseconds since 1970 (RevenueCat sends one), not \(event["event_timestamp_ms"].typeName == "number" ? "a fraction or an exponent" : "a \(event["event_timestamp_ms"].typeName)")")
                }
                guard ms >= 0, ms <= Timestamp.latest.milliseconds else {
                    throw Rejection.invalid("command.event.event_timestamp_ms is not a time between 1970 and 9999")
                }
            }
            body = .revenueCat(event: event)
        case "reward.approve":
            body = .approveReward(rewardID: try r.identifier("reward_id"), by: try r.identifier("by"))
        case "reward.reject":
            body = .rejectReward(rewardID: try r.identifier("reward_id"), by: try r.identifier("by"), reason: try r.string("reason"))
        case "reward.substitute":
            let rid = try r.identifier("reward_id")
            let by = try r.identifier("by")
            body = .substituteReward(rewardID: rid, by: by, benefit: try Benefit(json: try r.object("benefit"), context: "command.benefit"))
        case "reward.retry":
            body = .retryReward(rewardID: try r.identifier("reward_id"), by: try r.identifier("by"))
        case "reward.record_delivery":
            body = .recordDelivery(rewardID: try r.identifier("reward_id"), by: try r.identifier("by"), note: try r.string("note"))
        case "eligibility.verify":
            let p = try program()
            let friend = try user()
            let by = try r.identifier("by")
            let decision = try r.oneOf("decision", ["eligible", "ineligible"])
            body = .verifyEligibility(program: p, friend: friend, by: by, eligible: decision == "eligible")
        case "inventory.import":
            let p = try program()
            let side = Side(rawValue: try r.oneOf("side", ["inviter", "friend"]))!
            let offer = try r.identifier("offer_id")
            var codes: [OfferCode] = []
            for (n, item) in try r.array("codes").enumerated() {
                var c = try FieldReader(item, context: "command.codes[\(n)]")
                c.refusesBlankIdentifiers = true
                // An offer code as typed into the store: surrounding spaces are not part of it.
                let code = try c.identifier("code").trimmingSpaces()
                guard !code.isEmpty else { throw Rejection.invalid("command.codes[\(n)].code is blank") }
                // `expires_at` must be given (SPEC §2: `{code, expires_at}`); null says, on purpose, never.
                guard c.has("expires_at") else {
                    throw Rejection.invalid("missing field command.codes[\(n)].expires_at (the code's expiry from App Store Connect, or null for none)")
                }
                codes.append(OfferCode(code: code, expiresAt: try c.optionalTimestamp("expires_at")))
                try c.finish()
            }
            body = .importInventory(program: p, side: side, offerID: offer, codes: codes)
        case "delivery.started":
            body = .deliveryStarted(rewardID: try r.identifier("reward_id"), attempt: Int(try r.int("attempt", min: 1)))
        case "delivery.succeeded":
            body = .deliverySucceeded(rewardID: try r.identifier("reward_id"), attempt: Int(try r.int("attempt", min: 1)))
        case "delivery.failed":
            let rid = try r.identifier("reward_id")
            let attempt = Int(try r.int("attempt", min: 1))
            body = .deliveryFailed(rewardID: rid, attempt: attempt, error: try r.string("error"))
        case "notification.report":
            let position = try r.int("notification", min: 1, max: Int64(1) << 53)
            let outcome = try r.oneOf("outcome", ["sent", "failed", "simulated", "withdrawn"])
            let error = try r.optionalString("error")
            if (outcome == "failed") != (error != nil) {
                throw Rejection.invalid(outcome == "failed" ? "command.error is required when outcome is \"failed\"" : "command.error goes only with outcome \"failed\"")
            }
            body = .reportNotification(position: UInt64(position), outcome: outcome, error: error)
        default: // points.spend
            let u = try user()
            let amount = try r.int("amount", min: 1)
            body = .spendPoints(user: u, amount: amount, reason: try r.string("reason"))
        }
        try r.finish()
        self.at = at
        var recorded = r.normalized
        recorded["at"] = .string(at.description)
        json = .object(recorded)
        (fingerprint, formerFingerprint) = id == nil || !fingerprinting ? ("", "") : Self.fingerprints(r.normalized, body)
    }

    /// Whether a command recorded under this command's `id` with `recorded` as its fingerprint is
    /// this command (by the fingerprint of today's versions, or of the versions before 2026-11-30).
    public func hasFingerprint(_ recorded: String) -> Bool {
        precondition(id == nil || !fingerprint.isEmpty, "a command made without its fingerprint is never compared with a retry")
        return recorded == fingerprint || recorded == formerFingerprint
    }

    /// What a repeated `id` is compared by (SPEC §2): the command as the rules read it, without `at`.
    /// An optional field sent as `null` is absent (a client's serialiser may write either), and an
    /// enrolment's code is compared as it is matched: whatever its case and surrounding spaces (§12).
    /// Also the former fingerprint (the command as sent, without `at`), hashed only when it differs.
    static func fingerprints(_ normalized: JSONObject, _ body: Body) -> (current: String, former: String) {
        var sent = normalized
        sent["at"] = nil
        var compared = sent
        // Required fields are never null here (the reader refused them); nested nulls (a setting
        // removed, a side disabled) mean something and stay.
        for member in normalized.members where member.value.isNull { compared[member.key] = nil }
        if case .enroll(_, _, let code, _, _) = body { compared["code"] = .string(InviteCodes.normalize(code)) }
        let current = SHA256.hex(JSONValue.object(compared).bytes)
        return (current, compared == sent ? current : SHA256.hex(JSONValue.object(sent).bytes))
    }
}
