import LedgerCodec

/// App settings, programs and their versions, account evidence and invites (SPEC §3–5).
extension LedgerState {
    mutating func configureApp(_ settings: JSONValue) -> Outcome {
        emit(.appConfigured, ["settings": settings])
        return .accepted()
    }

    mutating func createProgram(_ key: String, _ environment: Command.Environment, _ config: ProgramConfig) throws -> Outcome {
        if apps[currentApp]?.programs[key] != nil {
            throw Rejection(.programExists, "app \"\(currentApp)\" already has a program \"\(key)\"; campaign keys are fixed for ever, use program.update")
        }
        emit(.programCreated, ["program": .string(key), "environment": .string(environment.rawValue), "version": 1, "config": config.json])
        return .accepted(["program_version": 1])
    }

    /// A program's changes (versions, activation, pause) follow its own timeline: one dated before
    /// the latest change would rewrite what already happened (rewards earned, enrolments taken)
    /// with a time that contradicts it, so it is a bad time (`invalid_command`, nothing recorded).
    func checkProgramTimeline(_ key: String, _ action: String) throws {
        guard let changed = ifProgram(key, \.changedAt), now < changed else { return }
        throw Rejection.invalid("command.at (\(now)) is before the latest change of program \"\(key)\" (\(changed)): a \(action) cannot be dated before it")
    }

    /// Publishes version n+1 and re-evaluates every inviter at once: SPEC §4 rule 3,
    /// "Inviter progress follows the current configuration" (`program.update` replaces the whole config).
    mutating func updateProgram(_ key: String, _ config: ProgramConfig) throws -> Outcome {
        try checkProgramTimeline(key, "program.update")
        let version = try inProgram(key) { $0.version } + 1
        emit(.programVersionPublished, ["program": .string(key), "version": .int(version), "config": config.json])
        reevaluateProgram(key)
        return .accepted(["program_version": .int(version)])
    }

    /// Recounts every friend under the current version, then earns what is now due, inviter by inviter.
    mutating func reevaluateProgram(_ key: String) {
        guard let (friends, inviters) = ifProgram(key, { ($0.enrollmentOrder, $0.inviterOrder) }) else { return }
        for friend in friends {
            updateQualification(key, friend, disqualifiedBecause: "version_published")
        }
        for inviter in inviters {
            evaluateInviterRewards(key, inviter)
        }
    }

    mutating func activateProgram(_ key: String) throws -> Outcome {
        let (status, first) = try inProgram(key) { ($0.status, $0.firstActivatedAt == nil) }
        if status == .active { return .duplicate(["status": "active"]) }
        try checkProgramTimeline(key, "program.activate")
        emit(.programActivated, ["program": .string(key), "first_activation": .bool(first)])
        return .accepted(["status": "active"])
    }

    mutating func pauseProgram(_ key: String) throws -> Outcome {
        switch try inProgram(key, { $0.status }) {
        case .paused: return .duplicate(["status": "paused"])
        case .draft: throw Rejection(.invalidTransition, "program \"\(key)\" is a draft; only an active program can be paused")
        case .active:
            try checkProgramTimeline(key, "program.pause")
            emit(.programPaused, ["program": .string(key)])
            return .accepted(["status": "paused"])
        }
    }

    mutating func verifyAccount(_ user: String, _ created: Timestamp) -> Outcome {
        emit(.accountVerified, ["user": .string(user), "account_created_at": .string(created.description)])
        return .accepted()
    }

    /// Whether a code is refused as expired: replaced by a newer code of its inviter (which stays
    /// so whatever a later edit does to `expires_after_days`), or past the current version's
    /// `expires_after_days` at `now`.
    func isExpired(_ code: InviteCode, in p: ProgramState) -> Bool {
        if let current = p.invites[code.inviter], current != code.code { return true }
        guard let days = p.current.invites.expiresAfterDays else { return false }
        // "Older than expires_after_days" (SPEC §13): exactly that old is still accepted.
        return now > code.issuedAt.adding(days: days)
    }

    enum InvitePlan { case existing(InviteCode), issue(replaces: String?, config: ProgramConfig.InviteConfig), refuse(String) }

    /// The user's code for the program: the same one every time, a new one only after expiry (SPEC §5, §13).
    mutating func createInvite(_ key: String, _ user: String, codes: inout some InviteCodeMaker) throws -> Outcome {
        let plan: InvitePlan = try inProgram(key) { p in
            var replaces: String?
            if let existing = p.invites[user], let record = app.codes[InviteCodes.normalize(existing)] {
                if !isExpired(record, in: p) { return .existing(record) }
                replaces = record.code
            }
            // "accepting new referrals" (SPEC §3). A code dated before the program's first activation
            // would make every account created after that date "new" (SPEC §5): refused like such an enrolment.
            if let refusal = app.acceptingRefusal(p, at: now) {
                return .refuse(refusal.message(app: currentApp, program: p.key, what: "a new invite code"))
            }
            return .issue(replaces: replaces, config: p.current.invites)
        }
        switch plan {
        case .existing(let record):
            return .accepted(["code": .string(record.code), "url": shareURL(record.code), "position": .int(Int64(record.position))])
        case .refuse(let reason):
            throw Rejection(.notAccepting, reason)
        case .issue(let replaces, let config):
            var code = ""
            for _ in 0..<64 {
                code = codes.makeCode(config, user: user)
                if apps[currentApp]?.codes[InviteCodes.normalize(code)] == nil { break }
                code = ""
            }
            guard !code.isEmpty else { throw Rejection(.codeSpaceExhausted, Self.codeSpaceExhausted(config, user: user)) }
            var fields: JSONObject = ["program": .string(key), "user": .string(user), "code": .string(code),
                                               "url": shareURL(code), "replaces": .optional(replaces)]
            if let days = config.expiresAfterDays { fields["expires_at"] = .string(now.adding(days: days).description) }
            emit(.inviteCreated, fields)
            return .accepted(["code": .string(code), "url": shareURL(code)])
        }
    }

    /// What to change when 64 draws found no unused code: the drawn part of the format is (nearly) used up.
    static func codeSpaceExhausted(_ config: ProgramConfig.InviteConfig, user: String) -> String {
        switch config.format {
        case .username:
            let drawn = InviteCodes.usernameDrawnLength
            return "64 draws found no unused code \"\(InviteCodes.usernameStem(user))-\(String(repeating: "X", count: drawn))\" for this user: the \(drawn) drawn characters of that "
                + "stem are (nearly) all taken; set config.invites.format to random or prefixed with program.update"
        case .random, .prefixed:
            return "64 draws found no unused \(config.length)-character code: nearly all are taken; "
                + "lengthen config.invites.length with program.update"
        }
    }
}
