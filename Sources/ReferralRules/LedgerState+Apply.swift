import LedgerCodec

/// An event the fold cannot apply (bad or missing data): the log is not one the rules wrote.
public struct FoldError: Error, Sendable, CustomStringConvertible {
    public var position: UInt64
    public var message: String
    public var description: String { "event \(position): \(message)" }
}

/// Typed reads from event data for the fold; a missing field is a `FoldError`.
struct EventData {
    let data: JSONValue
    let position: UInt64

    func fail(_ message: String) -> FoldError { FoldError(position: position, message: message) }
    func string(_ key: String) throws -> String {
        guard let s = data[key].stringValue else { throw fail("missing string \"\(key)\"") }
        return s
    }
    func optionalString(_ key: String) -> String? { data[key].stringValue }
    func int(_ key: String) throws -> Int {
        guard let i = data[key].intValue else { throw fail("missing number \"\(key)\"") }
        return Int(i)
    }
    func optionalInt(_ key: String) -> Int? { data[key].intValue.map(Int.init) }
    /// A log position named by an event (1 or more).
    func position(_ key: String) throws -> UInt64 {
        guard let p = data[key].intValue, p >= 1 else { throw fail("missing position \"\(key)\"") }
        return UInt64(p)
    }
    func optionalPosition(_ key: String) throws -> UInt64? {
        if data[key].isNull { return nil }
        return try position(key)
    }
    func bool(_ key: String) -> Bool { data[key].boolValue ?? false }
    func timestamp(_ key: String) throws -> Timestamp {
        guard let s = data[key].stringValue, let t = Timestamp(rfc3339: s) else { throw fail("missing time \"\(key)\"") }
        return t
    }
    func optionalTimestamp(_ key: String) -> Timestamp? { data[key].stringValue.flatMap { Timestamp(rfc3339: $0) } }
    func benefit(_ key: String) throws -> Benefit {
        do { return try Benefit(json: data[key], context: key) } catch { throw fail("bad benefit \"\(key)\": \(error)") }
    }
    func config(_ key: String) throws -> ProgramConfig {
        do { return try ProgramConfig(json: data[key]) } catch { throw fail("bad config: \(error)") }
    }
}

extension LedgerState {
    /// Folds one stored event into the state. The events must come in position order.
    public mutating func apply(type typeName: String, at: Timestamp, data: JSONValue, position: UInt64) throws {
        guard position == head + 1 else { throw FoldError(position: position, message: "expected position \(head + 1)") }
        guard let type = EventType(rawValue: typeName) else { throw FoldError(position: position, message: "unknown event type \"\(typeName)\"") }
        let d = EventData(data: data, position: position)
        let appName = try d.string("app")
        // Taken out of the dictionary and put back (moved, not copied: a copy would retain and
        // release every collection it holds), so that the fold mutates it in place.
        var app = apps.removeValue(forKey: appName) ?? AppState(name: appName)
        changes.note(app: appName)
        let applied = Result { try apply(type, d, at: at, position: position, app: &app) }
        apps[appName] = consume app  // also when the event is refused, as far as it got
        try applied.get()
        head = position
    }

    private mutating func apply(_ type: EventType, _ d: EventData, at: Timestamp, position: UInt64, app: inout AppState) throws {
        let appName = app.name
        func programKey() throws -> String { try d.string("program") }
        func withProgram(_ body: (inout ProgramState) throws -> Void) throws {
            let key = try programKey()
            guard var p = app.programs.removeValue(forKey: key) else { throw d.fail("unknown program \"\(key)\"") }
            changes.note(program: ProgramKey(app: appName, program: key))
            let applied = Result { try body(&p) }
            app.programs[key] = consume p
            try applied.get()
        }
        func withReward(_ body: (inout ProgramState, inout Reward) throws -> Void) throws {
            try withProgram { p in
                let id = try d.string("reward_id")
                guard var r = p.rewards[id] else { throw d.fail("unknown reward \(id)") }
                let before = r.status
                p.tallies[r.recipient, default: RewardTally()].count(r, -1)
                try body(&p, &r)
                p.tallies[r.recipient, default: RewardTally()].count(r, 1)
                syncDeliveryQueue(appName, r)
                if r.status != before {
                    p.counts.rewardsByStatus[before.rawValue, default: 0] -= 1
                    p.counts.rewardsByStatus[r.status.rawValue, default: 0] += 1
                }
                p.rewards[id] = r
                changes.note(reward: RewardKey(app: appName, rewardID: id))
                changes.note(participant: UserKey(app: appName, program: p.key, user: r.recipient))
            }
        }
        func touch(_ program: String, _ user: String) {
            changes.note(participant: UserKey(app: appName, program: program, user: user))
            if app.knownUsers.insert(user).inserted { changes.note(user: UserKey(app: appName, program: "", user: user)) }
        }

        switch type {
        case .appConfigured:
            app.settings.merge(d.data["settings"])

        case .programCreated:
            let key = try programKey()
            guard app.programs[key] == nil else { throw d.fail("program \(key) created twice") }
            guard let env = Command.Environment(rawValue: try d.string("environment")) else { throw d.fail("bad environment") }
            app.programs[key] = ProgramState(key: key, environment: env, versions: [try d.config("config")], createdAt: at, changedAt: at)
            app.programOrder.append(key)
            changes.note(program: ProgramKey(app: appName, program: key))

        case .programVersionPublished:
            let config = try d.config("config")
            try withProgram { p in
                guard try d.int("version") == p.versions.count + 1 else { throw d.fail("version out of order") }
                p.versions.append(config)
                p.changedAt = at
            }

        case .programActivated:
            try withProgram { p in
                p.status = .active
                p.changedAt = at
                if p.firstActivatedAt == nil { p.firstActivatedAt = at }
            }

        case .programPaused:
            try withProgram { p in
                p.status = .paused
                p.changedAt = at
            }

        case .accountVerified:
            let user = try d.string("user")
            app.accountCreated[user] = (try d.timestamp("account_created_at"), "account_verify")
            // The app's backend vouched for the account: a user the app knows (queries answer them).
            if app.knownUsers.insert(user).inserted { changes.note(user: UserKey(app: appName, program: "", user: user)) }

        case .inviteCreated:
            let user = try d.string("user")
            let code = try d.string("code")
            try withProgram { p in
                if p.invites[user] == nil { p.counts.invites += 1 }
                p.invites[user] = code
                app.codes[InviteCodes.normalize(code)] = InviteCode(code: code, program: p.key, inviter: user, issuedAt: at, position: position)
                touch(p.key, user)
            }

        case .referralEnrolled:
            let friend = try d.string("friend")
            let inviter = try d.string("inviter")
            let code = try d.string("code")
            guard let eligibility = Enrollment.Eligibility(rawValue: try d.string("eligibility")) else { throw d.fail("bad eligibility") }
            try withProgram { p in
                p.enrollments[friend] = Enrollment(friend: friend, inviter: inviter, code: code, version: try d.int("program_version"),
                                                   at: at, position: position, eligibility: eligibility)
                p.enrollmentOrder.append(friend)
                p.counts.enrolled += 1
                if eligibility == .pendingReview { p.counts.pendingReview += 1 }
                var known = true
                update(&p.inviters[inviter, default: { known = false; return InviterState() }()]) { i in
                    i.friends.append(friend)
                    i.enrolledCount += 1
                    i.noteEnrollment(at: at)
                }
                if !known { p.inviterOrder.append(inviter) }
                app.friendPrograms[friend, default: []].append(p.key)
                touch(p.key, friend)
                touch(p.key, inviter)
            }
            app.codes[InviteCodes.normalize(code)]?.enrollments += 1
            app.enrollmentsByMonth[at.monthKey, default: 0] += 1
            if let device = d.optionalString("device_id") { app.devices[device] = friend }
            if d.optionalString("evidence") == "inline", let created = d.optionalTimestamp("account_created_at") {
                app.accountCreated[friend] = (created, "earlier_enrolment")
            }

        case .referralRejected, .eventRejected:
            // Evidence only: a refusal changes no state (a refused event's event_id stays free for
            // the event it should have been).
            break

        case .notificationRequested:
            let key = try programKey(), kind = try d.string("kind")
            var n = PendingNotification(
                position: position, app: appName, program: key, kind: kind, rewardID: d.optionalString("reward_id"),
                recipients: (d.data["recipients"].arrayValue ?? []).compactMap(\.stringValue), subject: try d.string("subject"), at: at)
            // An eligibility review is requested by the enrolment it follows, in the same command:
            // the program's latest.
            if kind == "eligibility_review" { n.user = app.programs[key]?.enrollmentOrder.last }
            pendingNotifications[position] = n

        case .notificationSent, .notificationWithdrawn:
            pendingNotifications[try d.position("notification")] = nil

        case .notificationFailed:
            let position = try d.position("notification")
            if let retryAt = d.optionalTimestamp("retry_at"), var n = pendingNotifications[position] {
                n.attempts = d.optionalInt("attempt") ?? n.attempts + 1
                n.retryAt = retryAt
                if let recipients = d.data["recipients"].arrayValue { n.recipients = recipients.compactMap(\.stringValue) }
                pendingNotifications[position] = n
            } else {
                pendingNotifications[position] = nil  // the last try, or a report of an older version
            }

        case .eligibilityVerified:
            var codeGivenBack: String?
            defer { if let code = codeGivenBack { app.codes[code]?.enrollments -= 1 } }
            let friend = try d.string("friend")
            let eligible = try d.string("decision") == "eligible"
            try withProgram { p in
                guard var e = p.enrollments[friend] else { throw d.fail("\(friend) is not enrolled") }
                if e.eligibility == .pendingReview { p.counts.pendingReview -= 1 }
                e.eligibility = eligible ? .eligible : .ineligible
                p.enrollments[friend] = e
                if !eligible { p.counts.ineligible += 1; p.counts.enrolled -= 1 }
                if !eligible { p.inviters[e.inviter]?.enrolledCount -= 1 }
                // No successful use of the code: `max_enrollments` counts the eligible and the pending.
                if !eligible { codeGivenBack = InviteCodes.normalize(e.code) }
                touch(p.key, friend)
                touch(p.key, e.inviter)
            }

        case .eventTracked:
            let user = try d.string("user")
            let fact = Fact(name: try d.string("name"), at: at, position: position, transactionID: d.optionalString("transaction_id"),
                            originalTransactionID: d.optionalString("original_transaction_id"), environment: d.optionalString("environment"))
            app.facts[user, default: UserFacts()].append(fact)
            if let eventID = d.optionalString("event_id") {
                if d.optionalString("source") == "revenuecat" { app.revenueCatEventIDs[Array(eventID.utf8)] = position } else { app.trackedEventIDs[eventID] = position }
            }

        case .purchaseRefunded:
            let user = try d.string("user")
            let refunded = try d.position("refunded_position")
            app.facts[user]?.revokePurchase(at: refunded)
            if let rc = d.optionalString("revenuecat_event_id") { app.revenueCatEventIDs[Array(rc.utf8)] = position }

        case .referralQualified, .referralDisqualified:
            let friend = try d.string("friend")
            let qualified = type == .referralQualified
            try withProgram { p in
                guard var e = p.enrollments[friend] else { throw d.fail("\(friend) is not enrolled") }
                if e.qualified != qualified { p.counts.qualified += qualified ? 1 : -1 }
                e.qualified = qualified
                e.qualifiedBy = qualified ? try d.optionalPosition("fact_position") : nil
                p.enrollments[friend] = e
                if qualified { p.inviters[e.inviter]?.qualified.insert(friend) } else { p.inviters[e.inviter]?.qualified.remove(friend) }
                touch(p.key, e.inviter)
                touch(p.key, friend)
            }

        case .rewardEarned:
            let id = try d.string("reward_id")
            guard let side = Command.Side(rawValue: try d.string("side")),
                  let status = Reward.Status(rawValue: try d.string("status")) else { throw d.fail("bad side or status") }
            let recipient = try d.string("recipient")
            let reward = Reward(id: id, program: try programKey(), programVersion: try d.int("program_version"), side: side, recipient: recipient,
                                milestoneID: d.optionalString("milestone_id"), slot: try d.string("slot"), threshold: d.optionalInt("threshold"),
                                benefit: try d.benefit("benefit"), status: status, reviewReason: d.optionalString("review_reason"),
                                simulated: d.bool("simulated"), earnedAt: at, fulfilledAt: status == .fulfilled ? at : nil,
                                position: position, inviter: d.optionalString("inviter"),
                                triggerPosition: try d.optionalPosition("trigger_position"))
            try withProgram { p in
                guard p.rewards[id] == nil else { throw d.fail("reward \(id) earned twice") }
                p.rewards[id] = reward
                p.rewardOrder.append(id)
                p.tallies[recipient, default: RewardTally()].count(reward, 1)
                p.counts.rewardsByStatus[status.rawValue, default: 0] += 1
                if status == .awaitingInventory { p.awaitInventory(reward) }
                if side == .inviter {
                    if let m = reward.milestoneID { p.inviters[recipient, default: InviterState()].milestones.insert(m) } else { p.inviters[recipient, default: InviterState()].numericSlots += 1 }
                    p.inviters[recipient, default: InviterState()].rewardIDs.append(id)
                } else {
                    p.enrollments[recipient]?.friendRewardID = id
                    app.welcomed.insert(recipient)
                }
                touch(p.key, recipient)
            }
            app.rewardPrograms[id] = try programKey()
            syncDeliveryQueue(appName, reward)
            changes.note(reward: RewardKey(app: appName, rewardID: id))
            if status == .fulfilled { creditPoints(reward, in: &app) }

        case .rewardWithheld:
            let friend = try d.string("friend")
            try withProgram { p in
                p.enrollments[friend]?.friendWithheld = true
                p.counts.withheld += 1
                touch(p.key, friend)
            }

        case .offerCodeAssigned:
            let index = try d.int("index")
            let key = ProgramState.inventoryKey(side: Command.Side(rawValue: try d.string("side")) ?? .inviter, offerID: try d.string("offer_id"))
            try withReward { p, r in
                r.code = try d.string("code")
                r.codeExpiresAt = d.optionalTimestamp("expires_at")
                r.status = .ready
                // Dead codes at the head of the queue (dead at this time) leave it for `passed`,
                // where only a command dated before their expiry looks; one passed over further
                // along (dead by this reward's earning, or behind a live one) stays in the queue.
                var inventory = p.inventory[key, default: OfferInventory()]
                if index < inventory.next {
                    inventory.takePassed(index)
                } else if inventory.handedOutAhead.insert(index).inserted {
                    inventory.noteGone(index)
                }
                while inventory.next < inventory.codes.count {
                    if inventory.handedOutAhead.remove(inventory.next) != nil {
                        inventory.next += 1
                    } else if inventory.next < index, let expiry = inventory.codes[inventory.next].expiresAt, expiry <= at {
                        inventory.passNext()
                    } else {
                        break
                    }
                }
                p.inventory[key] = inventory
                if p.inventory[key]!.remaining <= LedgerState.lowInventory { p.inventory[key]!.lowWarned = true }
                p.stopAwaitingInventory(r.id)
            }

        case .inventoryImported:
            guard let side = Command.Side(rawValue: try d.string("side")) else { throw d.fail("bad side") }
            let key = ProgramState.inventoryKey(side: side, offerID: try d.string("offer_id"))
            var codes: [Command.OfferCode] = []
            for item in d.data["codes"].arrayValue ?? [] {
                guard let code = item["code"].stringValue else { throw d.fail("bad code") }
                codes.append(Command.OfferCode(code: code, expiresAt: item["expires_at"].stringValue.flatMap { Timestamp(rfc3339: $0) }))
                app.offerCodesSeen.insert(InviteCodes.normalize(code))
            }
            try withProgram { p in
                p.inventory[key, default: OfferInventory()].add(codes)
                if p.inventory[key]!.remaining > LedgerState.lowInventory { p.inventory[key]!.lowWarned = false }
            }

        case .rewardApproved, .rewardRetried:
            guard let status = Reward.Status(rawValue: try d.string("status")) else { throw d.fail("bad status") }
            var credited: Reward?
            try withReward { p, r in
                r.status = status
                r.reviewReason = nil
                // Approved or retried, the reward starts a fresh round of delivery attempts.
                r.roundAttempts = 0
                r.retryAt = nil
                if status == .awaitingInventory { p.awaitInventory(r) }
                if status == .fulfilled { r.fulfilledAt = at; credited = r }
            }
            if let credited { creditPoints(credited, in: &app) }

        case .rewardRejected:
            try withReward { p, r in
                r.status = .rejected
                r.retryAt = nil
                r.rejectionReason = d.optionalString("reason")
                p.stopAwaitingInventory(r.id)
            }

        case .rewardSubstituted:
            let benefit = try d.benefit("benefit")
            try withReward { _, r in r.benefit = benefit }

        case .rewardDeliveryRecorded:
            var credited: Reward?
            try withReward { p, r in
                let wasFulfilled = r.status == .fulfilled
                r.status = .fulfilled
                r.fulfilledAt = at
                // Delivered: no retry is due, and the last failure is history (in `deliveries`).
                r.retryAt = nil
                r.lastError = nil
                // A review (a refund's) is settled by the delivery, as an approval settles it.
                r.reviewReason = nil
                r.deliveredOutside = true
                r.deliveries.append(DeliveryAttempt(attempt: r.attempts, startedAt: at, finishedAt: at, outcome: .recordedOutside,
                                                    by: d.optionalString("by"), note: d.optionalString("note")))
                p.stopAwaitingInventory(r.id)
                if !wasFulfilled { credited = r }
            }
            if let credited { creditPoints(credited, in: &app) }

        case .rewardReviewRequested:
            try withReward { p, r in
                r.status = .pendingReview
                r.retryAt = nil
                // Flagged while its call was in flight, the call failed: nothing was delivered.
                if r.refundedInFlight { r.refundFlagged = false }
                r.refundedInFlight = false
                r.reviewReason = d.optionalString("review_reason")
                r.reviewRequestedAt = at
                r.reviewRequestedPosition = position
                p.stopAwaitingInventory(r.id)
            }

        case .rewardRefundFlagged:
            try withReward { _, r in
                r.refundFlagged = true
                if r.status == .fulfilling { r.refundedInFlight = true }
            }

        case .deliveryStarted:
            try withReward { _, r in
                r.status = .fulfilling
                r.attempts += 1
                r.roundAttempts += 1
                r.retryAt = nil
                r.deliveries.append(DeliveryAttempt(attempt: r.attempts, startedAt: at, outcome: .inFlight))
            }

        case .deliverySucceeded where d.data["after_recorded_delivery"].boolValue == true,
             .deliveryFailed where d.data["after_recorded_delivery"].boolValue == true:
            // A call that was in flight when the owner recorded the delivery: its outcome, nothing else.
            let attempt = Int(try d.int("attempt"))
            try withReward { _, r in
                guard let i = r.deliveries.lastIndex(where: { $0.attempt == attempt && $0.outcome == .inFlight }) else {
                    throw d.fail("attempt \(attempt) of reward \(r.id) is not in flight")
                }
                r.deliveries[i].outcome = type == .deliverySucceeded ? .succeeded : .failed
                r.deliveries[i].finishedAt = at
                r.deliveries[i].error = d.optionalString("error")
            }

        case .deliverySucceeded:
            try withReward { _, r in
                r.status = .fulfilled
                r.fulfilledAt = at
                r.lastError = nil
                if !r.deliveries.isEmpty { r.deliveries[r.deliveries.count - 1].outcome = .succeeded; r.deliveries[r.deliveries.count - 1].finishedAt = at }
            }

        case .deliveryFailed:
            try withReward { _, r in
                r.lastError = d.optionalString("error")
                r.retryAt = d.optionalTimestamp("retry_at")
                r.status = r.retryAt == nil ? .failed : .ready
                if !r.deliveries.isEmpty {
                    let last = r.deliveries.count - 1
                    r.deliveries[last].outcome = .failed
                    r.deliveries[last].finishedAt = at
                    r.deliveries[last].error = r.lastError
                    r.deliveries[last].retryAt = r.retryAt
                }
            }

        case .pointsSpent:
            let user = try d.string("user")
            app.points[user, default: PointsBalance()].spent += Int64(try d.int("amount"))
            if app.knownUsers.insert(user).inserted { changes.note(user: UserKey(app: appName, program: "", user: user)) }
            changes.note(balance: UserKey(app: appName, program: "", user: user))
        }
    }

    /// Keeps the delivery worker's queue: rewards `ready` for an outside call.
    private mutating func syncDeliveryQueue(_ app: String, _ r: Reward) {
        let key = app + "\u{1F}" + r.id
        if r.status == .ready && r.benefit.needsDeliveryCall {
            deliveryQueue[key] = DeliveryRef(app: app, program: r.program, rewardID: r.id)
        } else {
            deliveryQueue[key] = nil
        }
    }

    /// Points count in a balance once fulfilled, and never from sandbox programs.
    private mutating func creditPoints(_ reward: Reward, in app: inout AppState) {
        guard case .points(let amount) = reward.benefit, !reward.simulated else { return }
        app.points[reward.recipient, default: PointsBalance()].earned += amount
        changes.note(balance: UserKey(app: app.name, program: "", user: reward.recipient))
    }
}

/// Changes a value in place through one access (a dictionary entry found once, not once per field).
@inline(__always)
private func update<Value>(_ value: inout Value, _ body: (inout Value) -> Void) { body(&value) }
