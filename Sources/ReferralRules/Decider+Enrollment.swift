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

    mutating func enroll(_ key: String, _ friend: String, _ codeText: String, _ inlineCreated: Timestamp?, _ device: String?) throws -> Outcome {
        let p = try program(key)
        let a = app
        let normalized = InviteCodes.normalize(codeText)
        let code = a.codes[normalized].flatMap { $0.program == key ? $0 : nil }

        // A retry of an accepted enrolment is recognised before any check.
        if let code, let existing = p.enrollments[friend], existing.inviter == code.inviter {
            return .duplicate(["position": .int(Int64(existing.position)), "eligibility": .string(existing.eligibility.rawValue)])
        }

        func refuse(_ reason: RejectionCode, _ message: String) -> Outcome {
            emit(.referralRejected, ["program": .string(key), "friend": .string(friend), "code": .string(codeText),
                                     "inviter": .optional(code?.inviter), "reason": .string(reason.rawValue),
                                     "device_id": .optional(device)])
            return .refusedWithRecord(Rejection(reason, message))
        }

        guard let code else {
            return refuse(.invalidCode, "\"\(codeText)\" is not an invite code of program \"\(key)\"")
        }
        if isExpired(code, in: p) {
            return refuse(.codeExpired, "invite code \(code.code) has expired; the inviter can create a new one")
        }
        if code.inviter == friend {
            return refuse(.selfReferral, "a user cannot enrol with their own invite code")
        }
        if p.enrollments[friend] != nil {
            return refuse(.alreadyEnrolled, "\(friend) is already enrolled in program \"\(key)\" by another inviter; the first inviter wins")
        }
        if !a.settings.friendReferralsEnabled || p.status != .active {
            return refuse(.notAccepting, notAcceptingReason(p))
        }
        if let allowance = a.settings.monthlyEnrollmentAllowance, a.enrollmentsIn(month: now.monthKey) >= allowance {
            return refuse(.allowanceExhausted, "app \"\(currentApp)\" reached its allowance of \(allowance) new enrolments for \(now.monthKey)")
        }
        if let max = p.current.invites.maxEnrollments, code.enrollments >= max {
            return refuse(.codeExhausted, "invite code \(code.code) reached its limit of \(max) enrolments")
        }
        if let cap = p.current.inviter?.maxEnrollmentsPer30Days {
            let windowStart = now.adding(days: -30)
            let recent = p.inviters[code.inviter]?.enrollmentTimes.filter { $0 > windowStart && $0 <= now }.count ?? 0
            if recent >= cap {
                return refuse(.rateLimited, "the inviter reached \(cap) enrolments in the last 30 days; try again later")
            }
        }
        if let device, a.devices[device] != nil {
            return refuse(.duplicateDevice, "this device has already enrolled in app \"\(currentApp)\"")
        }

        // The new-user rule: trusted evidence only, inline or from account.verify.
        let evidence: String
        let created: Timestamp?
        if let inlineCreated { evidence = "inline"; created = inlineCreated }
        else if let verified = a.accountCreatedAt[friend] { evidence = "account_verify"; created = verified }
        else { evidence = "none"; created = nil }
        let config = p.current
        var eligibility = Enrollment.Eligibility.eligible
        let basis: EligibilityBasis
        if !config.newUsersOnly {
            basis = .newUsersOnlyOff
        } else if a.settings.allowExistingInvitees {
            basis = .existingInviteesAllowed
        } else if let created {
            if created >= code.issuedAt {
                basis = .createdAfterInvite
            } else if let grace = a.settings.signupGraceDays, created >= now.adding(days: -grace) {
                basis = .withinGracePeriod
            } else {
                let rule = a.settings.signupGraceDays.map { "or at most \($0) days before enrolling" } ?? "(the grace period is off)"
                return refuse(.accountNotNew, "the account was created \(created), before the invite was issued \(rule)")
            }
        } else {
            basis = .noEvidence
            eligibility = .pendingReview
        }

        emit(.referralEnrolled, ["program": .string(key), "friend": .string(friend), "inviter": .string(code.inviter),
                                 "code": .string(code.code), "program_version": .int(p.version),
                                 "eligibility": .string(eligibility.rawValue), "eligibility_basis": .string(basis.rawValue),
                                 "evidence": .string(evidence), "account_created_at": .optional(created?.description),
                                 "device_id": .optional(device)])
        if created != nil, eligibility == .eligible {
            emit(.eventTracked, ["user": .string(friend), "name": "signup_completed", "event_id": .null, "source": "enrollment"])
        }
        if eligibility == .pendingReview {
            notify(key, kind: "eligibility_review", rewardID: nil,
                   subject: "Enrolment of \(friend) in \(key) needs an eligibility review (no account creation evidence)")
        }
        afterFactsChanged(friend, disqualifiedBecause: "facts_changed")
        return .accepted(["inviter": .string(code.inviter), "eligibility": .string(eligibility.rawValue)])
    }

    mutating func verifyEligibility(_ key: String, _ friend: String, _ by: String, _ eligible: Bool) throws -> Outcome {
        let p = try program(key)
        guard let e = p.enrollments[friend] else {
            throw Rejection(.notEnrolled, "\(friend) is not enrolled in program \"\(key)\"")
        }
        guard e.eligibility == .pendingReview else {
            throw Rejection(.invalidTransition, "the enrolment of \(friend) is \(e.eligibility.rawValue), not pending review")
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
