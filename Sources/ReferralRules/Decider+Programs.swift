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

    /// Publishes version n+1 and re-evaluates every inviter at once (SPEC §4 rule 3).
    mutating func updateProgram(_ key: String, _ config: ProgramConfig) throws -> Outcome {
        let p = try program(key)
        let version = p.version + 1
        emit(.programVersionPublished, ["program": .string(key), "version": .int(version), "config": config.json])
        reevaluateProgram(key)
        return .accepted(["program_version": .int(version)])
    }

    /// Recounts every friend under the current version, then earns what is now due, inviter by inviter.
    mutating func reevaluateProgram(_ key: String) {
        guard let p = apps[currentApp]?.programs[key] else { return }
        for friend in p.enrollmentOrder {
            updateQualification(key, friend, disqualifiedBecause: "version_published")
        }
        for inviter in p.inviterOrder {
            evaluateInviterRewards(key, inviter)
        }
    }

    mutating func activateProgram(_ key: String) throws -> Outcome {
        let p = try program(key)
        if p.status == .active { return .duplicate(["status": "active"]) }
        emit(.programActivated, ["program": .string(key), "first_activation": .bool(p.firstActivatedAt == nil)])
        return .accepted(["status": "active"])
    }

    mutating func pauseProgram(_ key: String) throws -> Outcome {
        let p = try program(key)
        switch p.status {
        case .paused: return .duplicate(["status": "paused"])
        case .draft: throw Rejection(.invalidTransition, "program \"\(key)\" is a draft; only an active program can be paused")
        case .active:
            emit(.programPaused, ["program": .string(key)])
            return .accepted(["status": "paused"])
        }
    }

    mutating func verifyAccount(_ user: String, _ created: Timestamp) -> Outcome {
        emit(.accountVerified, ["user": .string(user), "account_created_at": .string(created.description)])
        return .accepted()
    }

    /// Whether a code is past the current version's `expires_after_days` at `now`.
    func isExpired(_ code: InviteCode, in p: ProgramState) -> Bool {
        guard let days = p.current.invites.expiresAfterDays else { return false }
        return now >= code.issuedAt.adding(days: days)
    }

    /// The user's code for the program: the same one every time, a new one only after expiry (SPEC §5, §13).
    mutating func createInvite(_ key: String, _ user: String, codes: inout some InviteCodeMaker) throws -> Outcome {
        let p = try program(key)
        let a = app
        var replaces: JSONValue = .null
        if let existing = p.invites[user], let record = a.codes[InviteCodes.normalize(existing)] {
            if !isExpired(record, in: p) {
                return .accepted(["code": .string(record.code), "url": shareURL(record.code), "position": .int(Int64(record.position))])
            }
            replaces = .string(record.code)
        }
        guard a.isAccepting(p, at: now) else {
            throw Rejection(.notAccepting, notAcceptingReason(p))
        }
        var code = ""
        for _ in 0..<64 {
            code = codes.makeCode(p.current.invites, user: user)
            if a.codes[InviteCodes.normalize(code)] == nil { break }
            code = ""
        }
        guard !code.isEmpty else {
            throw Rejection(.notAccepting, "could not draw an unused invite code; lengthen config.invites.length")
        }
        var fields: [String: JSONValue] = ["program": .string(key), "user": .string(user), "code": .string(code),
                                           "url": shareURL(code), "replaces": replaces]
        if let days = p.current.invites.expiresAfterDays { fields["expires_at"] = .string(now.adding(days: days).description) }
        emit(.inviteCreated, fields)
        return .accepted(["code": .string(code), "url": shareURL(code)])
    }

    func notAcceptingReason(_ p: ProgramState) -> String {
        let a = app
        if !a.settings.friendReferralsEnabled {
            return "friend referrals are turned off for app \"\(currentApp)\" (settings.friend_referrals_enabled)"
        }
        if p.status != .active { return "program \"\(p.key)\" is \(p.status.rawValue), not active" }
        return "app \"\(currentApp)\" used its monthly enrolment allowance for \(now.monthKey)"
    }
}
