import LedgerCodec

/// Enrolment (SPEC §5, §13) and eligibility review (§12).
extension LedgerState {
    /// The basis on which an enrolled friend is (or is not yet) eligible.
    enum EligibilityBasis: String {
        case newUsersOnlyOff = "new_users_only_off"
        case existingInviteesAllowed = "existing_invitees_allowed"
        case createdAfterInvite = "created_after_invite"
        case withinGracePeriod = "within_grace_period"
        case noEvidence = "no_evidence"
    }

    /// What the checks of an enrolment decided, before anything is recorded.
    private enum EnrollmentPlan {
        case duplicate(position: UInt64, inviter: String, eligibility: String)
        case refuse(RejectionCode, String, inviter: String?)
        case accept(inviter: String, code: String, version: Int, eligibility: Enrollment.Eligibility, basis: EligibilityBasis,
                    evidence: String, created: Timestamp?)
    }

    /// The checks of SPEC §5 in their order (and §13's), reading the state only.
    private func planEnrollment(_ p: ProgramState, _ friend: String, _ codeText: String, _ inlineCreated: Timestamp?, _ device: String?) -> EnrollmentPlan {
        let a = app
        let code = a.codes[InviteCodes.normalize(codeText)].flatMap { $0.program == p.key ? $0 : nil }
        // A retry of an accepted enrolment is recognised before any check.
        if let code, let existing = p.enrollments[friend], existing.inviter == code.inviter {
            return .duplicate(position: existing.position, inviter: existing.inviter, eligibility: existing.eligibility.rawValue)
        }
        guard let code else { return .refuse(.invalidCode, "\"\(codeText)\" is not an invite code of program \"\(p.key)\"", inviter: nil) }
        let inviter = code.inviter
        if isExpired(code, in: p) {
            return .refuse(.codeExpired, "invite code \(code.code) has expired; the inviter can create a new one", inviter: inviter)
        }
        if inviter == friend { return .refuse(.selfReferral, "a user cannot enrol with their own invite code", inviter: inviter) }
        if p.enrollments[friend] != nil {
            return .refuse(.alreadyEnrolled, "\(friend) is already enrolled in program \"\(p.key)\" by another inviter; the first inviter wins", inviter: inviter)
        }
        // "accepting new referrals" (SPEC §3), which takes in "New programs count from activation"
        // (SPEC §4 rule 4): a used-up allowance is `allowance_exhausted`, checked after the code's date.
        let refusal = a.acceptingRefusal(p, at: now)
        if let refusal, !refusal.isAllowanceUsed {
            return .refuse(.notAccepting, refusal.message(app: currentApp, program: p.key, what: "an enrolment"), inviter: inviter)
        }
        // A code is no code before it was issued: an enrolment dated earlier reports something that
        // cannot have happened.
        if now < code.issuedAt {
            return .refuse(.invalidCode, "invite code \(code.code) was issued at \(code.issuedAt), after this enrolment (\(now))", inviter: inviter)
        }
        if let refusal {  // (the allowance: the other reasons were answered above)
            return .refuse(.allowanceExhausted, refusal.message(app: currentApp, program: p.key, what: "an enrolment"), inviter: inviter)
        }
        if let max = p.current.invites.maxEnrollments, code.enrollments >= max {
            return .refuse(.codeExhausted, "invite code \(code.code) reached its limit of \(max) enrolments", inviter: inviter)
        }
        // The velocity cap (SPEC §13): at most `max_enrollments_per_30_days` in (at − 30 days, at].
        if let cap = p.current.inviter?.maxEnrollmentsPer30Days {
            let recent = p.inviters[inviter]?.enrollments(inDays: 30, endingAt: now) ?? 0
            if recent >= cap { return .refuse(.rateLimited, "the inviter reached \(cap) enrolments in the last 30 days; try again later", inviter: inviter) }
        }
        // The device limit (SPEC §13): one device enrols at most once per app.
        if let device, a.devices[device] != nil {
            return .refuse(.duplicateDevice, "this device has already enrolled in app \"\(currentApp)\"", inviter: inviter)
        }
        // The new-user rule: trusted evidence only, inline or recorded earlier (account.verify, or
        // inline evidence of an enrolment in another program of the app).
        let evidence: String
        let created: Timestamp?
        if let inlineCreated { evidence = "inline"; created = inlineCreated }
        else if let recorded = a.accountCreated[friend] { evidence = recorded.evidence; created = recorded.at }
        else { evidence = "none"; created = nil }
        var eligibility = Enrollment.Eligibility.eligible
        let basis: EligibilityBasis
        if !p.current.newUsersOnly {
            basis = .newUsersOnlyOff
        } else if a.settings.allowExistingInvitees {
            basis = .existingInviteesAllowed
        } else if let created {
            if created >= code.issuedAt {
                basis = .createdAfterInvite
            } else if let grace = a.settings.signupGraceDays, created >= now.adding(days: -grace) {
                basis = .withinGracePeriod
            } else {
                let rule = a.settings.signupGraceDays.map { " and more than \($0) days before enrolling (the grace period)" } ?? " (the grace period is off)"
                return .refuse(.accountNotNew, "the account was created \(created), before the invite was issued (\(code.issuedAt))\(rule)", inviter: inviter)
            }
        } else {
            // No trusted evidence: enrolled "pending eligibility review" (SPEC §5) until eligibility.verify.
            basis = .noEvidence
            eligibility = .pendingReview
        }
        return .accept(inviter: inviter, code: code.code, version: p.version, eligibility: eligibility, basis: basis, evidence: evidence, created: created)
    }

    mutating func enroll(_ key: String, _ friend: String, _ codeText: String, _ inlineCreated: Timestamp?, _ device: String?) throws -> Outcome {
        let plan = try inProgram(key) { planEnrollment($0, friend, codeText, inlineCreated, device) }
        switch plan {
        case .duplicate(let position, let inviter, let eligibility):
            // The first answer's fields again (its inviter and eligibility now), at the enrolment's position.
            return .duplicate(["position": .int(Int64(position)), "inviter": .string(inviter), "eligibility": .string(eligibility)])
        case .refuse(let reason, let message, let inviter):
            emit(.referralRejected, ["program": .string(key), "friend": .string(friend), "code": .string(codeText),
                                     "inviter": .optional(inviter), "reason": .string(reason.rawValue), "device_id": .optional(device)])
            return .refusedWithRecord(Rejection(reason, message))
        case .accept(let inviter, let code, let version, let eligibility, let basis, let evidence, let created):
            emit(.referralEnrolled, ["account_created_at": .optional(created?.description), "code": .string(code),
                                     "device_id": .optional(device), "eligibility": .string(eligibility.rawValue),
                                     "eligibility_basis": .string(basis.rawValue), "evidence": .string(evidence),
                                     "friend": .string(friend), "inviter": .string(inviter), "program": .string(key),
                                     "program_version": .int(version)])
            if created != nil, eligibility == .eligible {
                emit(.eventTracked, ["event_id": .null, "name": "signup_completed", "source": "enrollment", "user": .string(friend)])
            }
            if eligibility == .pendingReview {
                notify(key, kind: "eligibility_review", rewardID: nil,
                       subject: "Enrolment of \(friend) in \(key) needs an eligibility review (no account creation evidence)")
            }
            afterFactsChanged(friend, disqualifiedBecause: "facts_changed")
            return .accepted(["inviter": .string(inviter), "eligibility": .string(eligibility.rawValue)])
        }
    }

    mutating func verifyEligibility(_ key: String, _ friend: String, _ by: String, _ eligible: Bool) throws -> Outcome {
        guard let e = try inProgram(key, { $0.enrollments[friend] }) else {
            throw Rejection(.notEnrolled, "\(friend) is not enrolled in program \"\(key)\"")
        }
        // The same decision again changes nothing (a retried review answers as a duplicate);
        // another decision cannot overturn one already made.
        if e.eligibility == (eligible ? .eligible : .ineligible) {
            return .duplicate(["eligibility": .string(e.eligibility.rawValue)])
        }
        guard e.eligibility == .pendingReview else {
            throw Rejection(.invalidTransition, "the enrolment of \(friend) is \(e.eligibility.rawValue), not pending review; a decision cannot be changed")
        }
        // The decision records the friend's signup at its time: dated before the enrolment, that
        // signup could never count (facts count from the enrolment on), and the approval would be lost.
        guard now >= e.at else {
            throw Rejection(.invalidTransition, "this decision is dated \(now), before the enrolment of \(friend) it decides (\(e.at)); send it with a time at or after the enrolment")
        }
        emit(.eligibilityVerified, ["program": .string(key), "friend": .string(friend), "inviter": .string(e.inviter),
                                    "decision": .string(eligible ? "eligible" : "ineligible"), "by": .string(by)])
        if eligible {
            emit(.eventTracked, ["user": .string(friend), "name": "signup_completed", "event_id": .null, "source": "eligibility_verify"])
            afterFactsChanged(friend, disqualifiedBecause: "facts_changed")
        }
        return .accepted()
    }
}
