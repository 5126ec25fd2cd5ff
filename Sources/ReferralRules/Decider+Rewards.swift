import LedgerCodec

/// Rewards: earning, owner review, offer-code inventory, delivery and points (SPEC §7, §11–13).
extension LedgerState {
    /// Earns a reward in its slot; the reward carries its version and benefit for ever (SPEC §4
    /// rule 1, "Earned benefits keep their configuration": later edits never change either).
    mutating func earn(_ key: String, side: Command.Side, recipient: String, slot: String, milestoneID: String?, threshold: Int?,
                       version: Int, benefit: Benefit, inviter: String?, trigger: UInt64?) {
        guard let (review, sandbox) = ifProgram(key, { ($0.current.delivery == .review, $0.isSandbox) }) else { return }
        let id = Self.rewardID(app: currentApp, program: key, side: side, recipient: recipient, slot: slot)
        let status: Reward.Status = review ? .pendingReview : automaticStatus(benefit)
        emit(.rewardEarned, ["benefit": benefit.json, "inviter": .optional(inviter), "milestone_id": .optional(milestoneID),
                             "program": .string(key), "program_version": .int(version), "recipient": .string(recipient),
                             "reward_id": .string(id), "side": .string(side.rawValue), "simulated": .bool(sandbox),
                             "slot": .string(slot), "status": .string(status.rawValue), "threshold": .optional(threshold),
                             "trigger_position": trigger.map { .int(Int64($0)) } ?? .null])
        if status == .pendingReview {
            notify(key, kind: "reward_review", rewardID: id, subject: "Reward \(id) for \(recipient) in \(key) is waiting for review")
        } else if status == .awaitingInventory {
            assignCode(key, id)
        }
    }

    /// The status a reward takes under automatic delivery (or once approved).
    func automaticStatus(_ benefit: Benefit) -> Reward.Status {
        switch benefit {
        case .appleOfferCode: return .awaitingInventory
        case .points: return .fulfilled
        case .custom, .revenueCatEntitlement: return .ready
        }
    }

    /// Hands the reward the next unexpired code of its offer, in import order; answers whether one was left.
    /// `notifyWhenEmpty`: an import that runs out says so once (`inventory_empty` at 0 left), not
    /// again for each reward it leaves waiting.
    @discardableResult
    mutating func assignCode(_ key: String, _ rid: String, notifyWhenEmpty: Bool = true) -> Bool {
        guard let (r, inventory) = ifProgram(key, { p -> (Reward, OfferInventory)? in
            guard let r = p.rewards[rid], let offer = r.benefit.offerID else { return nil }
            return (r, p.inventory[ProgramState.inventoryKey(side: r.side, offerID: offer)] ?? OfferInventory())
        }), let offer = r.benefit.offerID else { return false }
        // Unexpired at assignment, and when the reward was earned: a command dated before the
        // reward (a late import, say) must not hand it a code that was dead by the time it existed.
        let assignedAt = max(now, r.earnedAt)
        func usable(_ n: Int) -> Bool { !inventory.handedOutAhead.contains(n) && inventory.isUnexpired(n, at: assignedAt) }
        // A code passed over as dead at a later command's time comes first, if this command is
        // dated while it was valid (it precedes the queue in import order); else the queue's first.
        let passed = inventory.firstPassed(unexpiredAt: assignedAt)
        var i: Int
        if let passed {
            i = passed
        } else {
            i = inventory.next
            while i < inventory.codes.count, !usable(i) { i += 1 }
        }
        guard i < inventory.codes.count else {
            // Said once for the rewards of this offer and side that wait (looked for only now: an
            // import resuming many waiting rewards would otherwise look at all of them for each).
            let othersWaiting = ifProgram(key) { p in
                p.awaitingInventory.contains { $0 != rid && p.rewards[$0]?.benefit.offerID == offer && p.rewards[$0]?.side == r.side }
            } ?? false
            if !othersWaiting && notifyWhenEmpty {
                notify(key, kind: "inventory_empty", rewardID: rid, subject: "No \(r.side.rawValue) offer codes of \(offer) left in \(key): rewards are waiting")
            }
            return false
        }
        let code = inventory.codes[i]
        // Codes that can still be handed out (those already expired do not count as left), counted
        // only as far as the low-inventory warning needs: not every remaining code at every assignment.
        var left = 0
        if passed != nil {
            for n in inventory.passed where n > i && left <= Self.lowInventory && inventory.isUnexpired(n, at: assignedAt) { left += 1 }
        }
        var j = max(i + 1, inventory.next)
        while j < inventory.codes.count, left <= Self.lowInventory {
            if usable(j) { left += 1 }
            j += 1
        }
        emit(.offerCodeAssigned, ["program": .string(key), "reward_id": .string(rid), "recipient": .string(r.recipient), "side": .string(r.side.rawValue),
                                  "offer_id": .string(offer), "code": .string(code.code), "index": .int(i),
                                  "expires_at": .optional(code.expiresAt?.description)])
        // Empty, or low for the first time since the last import that refilled it (an import of
        // fewer codes than the threshold is low from its first assignment).
        if left == 0 || (left <= Self.lowInventory && !inventory.lowWarned) {
            notify(key, kind: left == 0 ? "inventory_empty" : "inventory_low", rewardID: nil,
                   subject: "\(left) \(r.side.rawValue) offer codes of \(offer) left in \(key)")
        }
        return true
    }

    static let lowInventory = 5

    /// Who owner notifications of a program go to now: its `notify` list, else the app's `owner_email`.
    public func notificationRecipients(app name: String, program key: String) -> [String] {
        let configured = apps[name]?.programs[key]?.current.notify ?? []
        return configured.isEmpty ? (apps[name]?.settings.ownerEmail.map { [$0] } ?? []) : configured
    }

    /// Records an owner notification for the program's `notify` addresses, else the app owner's.
    mutating func notify(_ key: String, kind: String, rewardID: String?, subject: String) {
        let recipients = notificationRecipients(app: currentApp, program: key)
        emit(.notificationRequested, ["program": .string(key), "kind": .string(kind), "reward_id": .optional(rewardID),
                                      "recipients": .array(recipients.map { .string($0) }), "subject": .string(subject)])
    }

    /// The mail sender reports a notification's outcome; a failure is recorded and never blocks delivery.
    mutating func reportNotification(_ position: UInt64, _ outcome: String, _ error: String?) throws -> Outcome {
        guard let n = pendingNotifications[position], n.app == currentApp else {
            throw Rejection(.invalidTransition, "event \(position) is not a notification of app \"\(currentApp)\" waiting to be sent")
        }
        // Sandbox programs never call outside (SPEC §7, §11), e-mail included: their notifications
        // are recorded as simulated, and only theirs.
        let sandbox = ifProgram(n.program) { $0.isSandbox } ?? false
        // A review decided before the notice went out is withdrawn, not mailed: the owner would be
        // asked to decide what is decided.
        if outcome == "withdrawn" {
            guard let reason = withdrawalReason(n) else {
                throw Rejection(.invalidTransition, "notification \(position) asks for a review that is still waiting (or is not a review): send it")
            }
            emit(.notificationWithdrawn, ["program": .string(n.program), "notification": .int(Int64(position)), "reason": .string(reason)])
            return .accepted()
        }
        if (outcome == "simulated") != sandbox {
            throw Rejection(.invalidTransition, sandbox
                ? "notification \(position) is of sandbox program \"\(n.program)\": it is recorded as simulated, never mailed"
                : "notification \(position) is of live program \"\(n.program)\": it is sent or failed, not simulated")
        }
        let sent = outcome != "failed"
        // Requested before anyone was set to receive it: it goes to whoever is set now.
        let recipients = n.recipients.isEmpty ? notificationRecipients(app: n.app, program: n.program) : n.recipients
        var fields: JSONObject = ["program": .string(n.program), "notification": .int(Int64(position)),
                                  "recipients": .array(recipients.map { .string($0) }), "error": .optional(error.map { String($0.prefix(2000)) })]
        guard !sent else {
            if sandbox { fields["simulated"] = true }
            emit(.notificationSent, fields)
            return .accepted()
        }
        // A failed send is tried again with backoff (the mail command may fail for a while, or the
        // recipients may be set later), 5 times in all.
        let attempt = n.attempts + 1
        let final = attempt >= maxDeliveryAttempts
        let retryAt: JSONValue = final ? .null : .string(now.adding(milliseconds: Self.backoff(attempt, "notification#\(position)")).description)
        fields["attempt"] = .int(attempt)
        fields["retry_at"] = retryAt
        fields["final"] = .bool(final)
        emit(.notificationFailed, fields)
        return .accepted(["retry_at": retryAt])
    }

    func refuseTransition(_ r: Reward, _ action: String) -> Rejection {
        Rejection(.invalidTransition, "reward \(r.id) is \(r.status.rawValue); \(action) is not allowed from that status")
    }

    mutating func approve(_ rid: String, _ by: String) throws -> Outcome {
        let r = try reward(rid)
        guard r.status == .pendingReview else { throw refuseTransition(r, "approve") }
        // The approval hands out the benefit (an offer code unexpired then, say): it cannot come
        // before the reward it approves existed.
        let underReviewSince = max(r.earnedAt, r.reviewRequestedAt ?? r.earnedAt)
        guard now >= underReviewSince else {
            throw Rejection(.invalidTransition, "this approval is dated \(now), before reward \(rid) was \(underReviewSince == r.earnedAt ? "earned" : "sent to review") (\(underReviewSince)); send it with a time at or after that")
        }
        let status = automaticStatus(r.benefit)
        emit(.rewardApproved, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "by": .string(by), "status": .string(status.rawValue)])
        if status == .awaitingInventory { assignCode(r.program, rid) }
        return .accepted(["status": .string(ifProgram(r.program, { $0.rewards[rid]?.status.rawValue }) ?? status.rawValue)])
    }

    mutating func reject(_ rid: String, _ by: String, _ reason: String) throws -> Outcome {
        let r = try reward(rid)
        guard [.pendingReview, .awaitingInventory, .ready, .failed].contains(r.status) else { throw refuseTransition(r, "reject") }
        emit(.rewardRejected, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "by": .string(by), "reason": .string(reason),
                               "previous_status": .string(r.status.rawValue)])
        return .accepted(["status": "rejected"])
    }

    mutating func substitute(_ rid: String, _ by: String, _ benefit: Benefit) throws -> Outcome {
        let r = try reward(rid)
        guard r.status == .pendingReview else { throw refuseTransition(r, "substitute") }
        emit(.rewardSubstituted, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "by": .string(by),
                                  "benefit": benefit.json, "previous_benefit": r.benefit.json])
        return .accepted(["status": "pending_review"])
    }

    mutating func retry(_ rid: String, _ by: String) throws -> Outcome {
        let r = try reward(rid)
        guard r.status == .failed else { throw refuseTransition(r, "retry") }
        emit(.rewardRetried, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "by": .string(by), "status": "ready"])
        return .accepted(["status": "ready"])
    }

    mutating func recordDelivery(_ rid: String, _ by: String, _ note: String) throws -> Outcome {
        let r = try reward(rid)
        if r.status == .fulfilled { return .duplicate(["status": "fulfilled"]) }
        guard r.status != .rejected else { throw refuseTransition(r, "record_delivery") }
        emit(.rewardDeliveryRecorded, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "by": .string(by), "note": .string(note),
                                       "previous_status": .string(r.status.rawValue)])
        return .accepted(["status": "fulfilled"])
    }

    mutating func deliveryStarted(_ rid: String, _ attempt: Int) throws -> Outcome {
        let r = try reward(rid)
        guard r.benefit.needsDeliveryCall else {
            throw Rejection(.invalidTransition, "reward \(rid) has a benefit of type \(r.benefit.typeName), which the delivery worker does not deliver")
        }
        guard r.status == .ready else { throw refuseTransition(r, "delivery.started") }
        guard attempt == r.attempts + 1 else {
            throw Rejection(.invalidTransition, "reward \(rid) has had \(r.attempts) attempts; the next is attempt \(r.attempts + 1), not \(attempt)")
        }
        // A failed attempt's reward is `ready`, "due then" (SPEC §12): not before its retry_at, the
        // time the worker waits for. (Not also "not before it was earned": a store's clock a little
        // ahead of the worker's would leave a reward the worker picks and may never start.)
        if let due = r.retryAt, now < due {
            throw Rejection(.invalidTransition, "reward \(rid) is not due again until \(due) (this start is dated \(now))")
        }
        emit(.deliveryStarted, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "attempt": .int(attempt), "simulated": .bool(r.simulated)])
        return .accepted(["status": "fulfilling"])
    }

    /// The outcome of a call that was in flight when the owner recorded the reward as delivered
    /// outside: recorded as such (the attempt's outcome, for the history), the status stays fulfilled.
    mutating func lateOutcome(_ r: Reward, _ attempt: Int, _ type: EventType, _ error: String?) -> Outcome? {
        guard r.status == .fulfilled, r.deliveredOutside,
              r.deliveries.contains(where: { $0.attempt == attempt && $0.outcome == .inFlight }) else { return nil }
        var fields: JSONObject = ["program": .string(r.program), "reward_id": .string(r.id), "recipient": .string(r.recipient), "attempt": .int(attempt),
                                  "after_recorded_delivery": true]
        if let error { fields["error"] = .string(String(error.prefix(2000))) } else { fields["simulated"] = .bool(r.simulated) }
        emit(type, fields)
        return .accepted(["status": "fulfilled"])
    }

    mutating func deliverySucceeded(_ rid: String, _ attempt: Int) throws -> Outcome {
        let r = try reward(rid)
        if let late = lateOutcome(r, attempt, .deliverySucceeded, nil) { return late }
        guard r.status == .fulfilling, attempt == r.attempts else { throw refuseTransition(r, "delivery.succeeded of attempt \(attempt)") }
        emit(.deliverySucceeded, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "attempt": .int(attempt), "simulated": .bool(r.simulated)])
        return .accepted(["status": "fulfilled"])
    }

    mutating func deliveryFailed(_ rid: String, _ attempt: Int, _ error: String) throws -> Outcome {
        let r = try reward(rid)
        // Sandbox programs never call outside (SPEC §7, §11): nothing was called, nothing can fail.
        guard !r.simulated else {
            throw Rejection(.invalidTransition, "reward \(rid) is of a sandbox program: its delivery is simulated (no outside call) and cannot fail")
        }
        if let late = lateOutcome(r, attempt, .deliveryFailed, error) { return late }
        guard r.status == .fulfilling, attempt == r.attempts else { throw refuseTransition(r, "delivery.failed of attempt \(attempt)") }
        let final = r.roundAttempts >= maxDeliveryAttempts
        let retryAt: JSONValue = final ? .null : .string(now.adding(milliseconds: Self.backoff(r.roundAttempts, rid)).description)
        emit(.deliveryFailed, ["program": .string(r.program), "reward_id": .string(rid), "recipient": .string(r.recipient), "attempt": .int(attempt),
                               "error": .string(String(error.prefix(2000))), "retry_at": retryAt, "final": .bool(final)])
        // A refund that revoked the reward's qualification while this call was in flight only
        // flagged it; now that the call failed, nothing was delivered: it goes to review (SPEC §6, §12).
        if r.refundedInFlight {
            reviewOrFlag(r.program, rid)
            return .accepted(["status": "pending_review", "retry_at": .null])
        }
        if final {
            notify(r.program, kind: "delivery_failed", rewardID: rid, subject: "Delivery of reward \(rid) failed \(maxDeliveryAttempts) times: \(error.prefix(200))")
        }
        return .accepted(["status": final ? "failed" : "ready", "retry_at": retryAt])
    }

    /// Milliseconds until the next try after the n-th failed attempt of a round: 5 s, 30 s, 2 min,
    /// 10 min, with up to 20% jitter derived from the reward ID (deterministic, so replays agree).
    static func backoff(_ n: Int, _ rid: String) -> Int64 {
        let base: [Int64] = [5_000, 30_000, 120_000, 600_000]
        let b = base[min(max(n, 1), base.count) - 1]
        let h = SHA256.digest(Array("\(rid)#\(n)".utf8))
        let jitter = Int64(UInt16(h[0]) << 8 | UInt16(h[1])) * (b / 5) / 65_536
        return b + jitter
    }

    mutating func importInventory(_ key: String, _ side: Command.Side, _ offer: String, _ codes: [Command.OfferCode]) throws -> Outcome {
        let waiting = try inProgram(key) { $0.awaitingInventory.ids }
        // Codes of this import so far, besides every code the app ever imported (not a copy of that
        // set, which would cost the app's whole inventory at every import).
        let seen = app.offerCodesSeen
        var fresh: Set<String> = []
        var accepted: [JSONValue] = []
        var excluded: [JSONValue] = []
        for c in codes {
            let normalized = InviteCodes.normalize(c.code)
            if let expiry = c.expiresAt, expiry <= now {
                excluded.append(["code": .string(c.code), "reason": "expired"])
            } else if seen.contains(normalized) || !fresh.insert(normalized).inserted {
                // Offer codes redeem whatever their case: "aaa1" is the code "AAA1" again.
                excluded.append(["code": .string(c.code), "reason": "duplicate"])
            } else {
                accepted.append(["code": .string(c.code), "expires_at": .optional(c.expiresAt?.description)])
            }
        }
        emit(.inventoryImported, ["program": .string(key), "side": .string(side.rawValue), "offer_id": .string(offer),
                                  "codes": .array(accepted), "excluded": .array(excluded)])
        // In earning order: by the time each reward was earned (the log's order where times agree,
        // as they do unless commands came dated out of order), so that a code passed over as expired
        // for one reward (see `assignCode`) had expired for every reward after it too.
        let earned = Dictionary(uniqueKeysWithValues: waiting.compactMap { rid in ifProgram(key, { $0.rewards[rid] }).map { (rid, $0.earnedAt) } })
        let inEarningOrder = waiting.enumerated().sorted { a, b in
            let (ta, tb) = (earned[a.element] ?? now, earned[b.element] ?? now)
            return ta != tb ? ta < tb : a.offset < b.offset
        }.map(\.element)
        var resumed = 0
        for rid in inEarningOrder {
            guard let r = ifProgram(key, { $0.rewards[rid] }), r.status == .awaitingInventory, r.side == side, r.benefit.offerID == offer else { continue }
            guard assignCode(key, rid, notifyWhenEmpty: false) else { break }
            resumed += 1
        }
        return .accepted(["imported": .int(accepted.count), "excluded": .array(excluded), "resumed": .int(resumed)])
    }

    mutating func spendPoints(_ user: String, _ amount: Int64, _ reason: String) throws -> Outcome {
        let balance = app.points[user] ?? PointsBalance()
        guard balance.balance >= amount else {
            throw Rejection(.insufficientPoints, "\(user) has \(balance.balance) points, fewer than the \(amount) to spend")
        }
        emit(.pointsSpent, ["user": .string(user), "amount": .int(amount), "reason": .string(reason), "balance_after": .int(balance.balance - amount)])
        return .accepted(["balance": .int(balance.balance - amount)])
    }
}
