import LedgerCodec
import LedgerStore
import ReferralRules

/// Checks the rules of SPEC §4–7 and §13 event by event, with a small model of its own folded
/// from the recorded events (independent of the ledger's state and projections), and names each
/// broken rule with a stable identifier.
struct RuleAuditor {
    private(set) var violations: [Violation] = []
    var limit = 1000

    private struct Program {
        var environment: String
        var versions: [ProgramConfig] = []
        var status = "draft"
        var firstActivation: Timestamp?
        var changedAt: Timestamp
        var current: ProgramConfig { versions[versions.count - 1] }
    }
    private struct Enrollment {
        var inviter: String
        var position: UInt64
        var version: Int
        var at: Timestamp
        var eligibility: String
        var qualified = false
        var friendReward: String?
        /// The app and normalised invite code it used (an ineligible one gives its use back).
        var code = ""
    }
    private struct Inviter {
        var qualified = 0
        var slots = 0
        var milestones: Set<String> = []
        var enrollments: [Timestamp] = []
    }
    private struct RewardModel {
        var status: String
        var fulfilledOnce = false
        var benefit: JSONValue
        var simulated = false
        var recipient = ""
        var earnedAt: Timestamp
        /// The owner recorded the delivery while a call was in flight: that call's outcome may follow.
        var inFlightWhenRecorded = false
    }
    private struct Fact { var user: String; var name: String; var at: Timestamp }
    private struct Code { var inviter: String; var program: String; var issuedAt: Timestamp; var enrollments = 0; var replaced = false }

    private var settings: [String: AppSettings] = [:]
    private var monthCounts: [String: Int] = [:]
    private var programs: [String: Program] = [:]
    private var enrollments: [String: Enrollment] = [:]
    private var inviters: [String: Inviter] = [:]
    private var rewards: [String: RewardModel] = [:]
    private var facts: [UInt64: Fact] = [:]
    private var codes: [String: Code] = [:]
    private var devices: Set<String> = []
    private var inventory: [String: Timestamp?] = [:]
    /// The program, side and offer each imported code belongs to.
    private var inventoryShelf: [String: String] = [:]
    private var assigned: Set<String> = []
    private var balances: [String: Int64] = [:]
    /// The command that caused the current group of events (from its first event).
    private var groupCommandType = ""
    private var groupCommandID: String?
    /// Command ids (by app) that already appended events: an id answers its first result ever after.
    private var usedIDs: Set<String> = []

    /// A composite key: the parts joined by U+001F, made in one String sized once.
    private static func k(_ a: String, _ b: String) -> String {
        var key = ""
        key.reserveCapacity(a.utf8.count + 1 + b.utf8.count)
        key.append(a); key.append("\u{1F}"); key.append(b)
        return key
    }

    private static func k(_ a: String, _ b: String, _ c: String) -> String { k(k(a, b), c) }

    mutating func flag(_ e: StoredEvent, _ rule: String, _ message: String) {
        if violations.count < limit { violations.append(Violation(position: e.position, rule: rule, message: message)) }
    }

    mutating func check(_ e: StoredEvent) {
        let d = e.data
        let app = d["app"].stringValue ?? ""
        let program = d["program"].stringValue ?? ""
        checkCommandID(e, app: app)
        let pk = Self.k(app, program)
        let s = settings[app] ?? AppSettings(app: app)

        switch e.type {
        case "app.configured":
            for key in AppSettings.secretKeys.sorted() {
                let recorded = [d["settings"][key], d["command"]["settings"][key]]
                if recorded.contains(where: { !$0.isNull && $0["sha256"].stringValue?.utf8.count != 64 }) {
                    flag(e, "settings.secret_in_log", "\(key) is recorded as it was sent: the log keeps only a secret's SHA-256 digest")
                }
            }
            var merged = s
            merged.merge(d["settings"])
            settings[app] = merged

        case "program.created":
            guard let c = config(e) else { return }
            var p = Program(environment: d["environment"].stringValue ?? "live", changedAt: e.at)
            p.versions = [c]
            programs[pk] = p
        case "program.version_published":
            guard let c = config(e) else { return }
            checkTimeline(e, pk)
            programs[pk]?.versions.append(c)
        case "program.activated":
            checkTimeline(e, pk)
            programs[pk]?.status = "active"
            if programs[pk]?.firstActivation == nil { programs[pk]?.firstActivation = e.at }
        case "program.paused":
            checkTimeline(e, pk)
            programs[pk]?.status = "paused"

        case "invite.created":
            if let code = d["code"].stringValue, let user = d["user"].stringValue {
                let ck = Self.k(app, InviteCodes.normalize(code))
                if codes[ck] != nil { flag(e, "invite.code_twice", "invite code \(code) was issued before in app \(app): codes are unique in the app") }
                checkAccepting(e, s, programs[pk], "invite", what: "invite code \(code) was issued", dated: "invite code \(code) is dated")
                if let config = programs[pk]?.current.invites, !InviteCodes.fits(code, config, user: user) {
                    flag(e, "invite.code_format", "invite code \(code) is not in the program's code format (\(config.format.rawValue))")
                }
                codes[ck] = Code(inviter: user, program: program, issuedAt: e.at)
                if let old = d["replaces"].stringValue { codes[Self.k(app, InviteCodes.normalize(old))]?.replaced = true }
            }

        case "referral.enrolled":
            checkEnrollment(e, app: app, pk: pk, settings: s)

        case "eligibility.verified":
            let ek = Self.k(pk, d["friend"].stringValue ?? "")
            if enrollments[ek]?.eligibility != "pending_review" {
                flag(e, "eligibility.not_pending", "an eligibility decision was recorded for an enrolment that was not pending review")
            }
            enrollments[ek]?.eligibility = d["decision"].stringValue == "eligible" ? "eligible" : "ineligible"
            // An enrolment decided ineligible is no successful use of its code (`max_enrollments`).
            if d["decision"].stringValue == "ineligible", let code = enrollments[ek]?.code { codes[code]?.enrollments -= 1 }

        case "event.tracked":
            let name = d["name"].stringValue ?? ""
            if name == "paid_purchase" && (d["source"].stringValue != "revenuecat" || groupCommandType != "revenuecat.event") {
                flag(e, "paid_purchase.source", "a paid_purchase was recorded from \(d["source"].stringValue ?? "?"), not from RevenueCat")
            }
            facts[e.position] = Fact(user: d["user"].stringValue ?? "", name: name, at: e.at)

        case "referral.qualified":
            checkQualification(e, pk: pk)
        case "referral.disqualified":
            let ek = Self.k(pk, d["friend"].stringValue ?? "")
            if enrollments[ek]?.qualified == true {
                enrollments[ek]?.qualified = false
                inviters[Self.k(pk, enrollments[ek]!.inviter), default: Inviter()].qualified -= 1
            } else {
                flag(e, "qualification.not_qualified", "a friend who was not qualified was disqualified")
            }

        case "reward.earned":
            checkEarned(e, app: app, pk: pk)

        case "offer_code.assigned":
            let code = Self.k(app, InviteCodes.normalize(d["code"].stringValue ?? ""))
            if assigned.contains(code) { flag(e, "offer_code.assigned_twice", "offer code \(d["code"].stringValue ?? "") was assigned before") }
            // From the inventory of the reward's program, side and offer, not any other.
            let shelf = Self.k(program, d["side"].stringValue ?? "", d["offer_id"].stringValue ?? "")
            if let expiry = inventory[code], inventoryShelf[code] == shelf {
                // Unexpired when assigned and when the reward was earned (an assignment dated before it).
                let earnedAt = rewards[Self.k(app, d["reward_id"].stringValue ?? "")]?.earnedAt ?? e.at
                if let expiry, expiry <= max(e.at, earnedAt) {
                    flag(e, "offer_code.expired", "offer code \(d["code"].stringValue ?? "") had expired when it was assigned, or before its reward was earned")
                }
            } else {
                flag(e, "offer_code.unknown", "offer code \(d["code"].stringValue ?? "") was never imported for this program, side and offer")
            }
            assigned.insert(code)
            transition(e, app, from: ["awaiting_inventory"], to: "ready")
        case "inventory.imported":
            for c in d["codes"].arrayValue ?? [] {
                let expiry = c["expires_at"].stringValue.flatMap { Timestamp(rfc3339: $0) }
                if let expiry, expiry <= e.at { flag(e, "inventory.expired_import", "an expired code was imported") }
                let code = Self.k(app, InviteCodes.normalize(c["code"].stringValue ?? ""))
                inventory[code] = .some(expiry)
                inventoryShelf[code] = Self.k(program, d["side"].stringValue ?? "", d["offer_id"].stringValue ?? "")
            }

        case "reward.approved": transition(e, app, from: ["pending_review"], to: d["status"].stringValue ?? "ready")
        case "reward.rejected": transition(e, app, from: ["pending_review", "awaiting_inventory", "ready", "failed"], to: "rejected")
        case "reward.substituted": transition(e, app, from: ["pending_review"], to: "pending_review")
        case "reward.retried": transition(e, app, from: ["failed"], to: "ready")
        case "reward.delivery_recorded":
            let rk = Self.k(app, d["reward_id"].stringValue ?? "")
            let wasInFlight = rewards[rk]?.status == "fulfilling"
            transition(e, app, from: ["pending_review", "awaiting_inventory", "ready", "fulfilling", "failed"], to: "fulfilled")
            if wasInFlight { rewards[rk]?.inFlightWhenRecorded = true }
        // Workers before 2026-11-30 recorded a sandbox delivery they found cut short as failed
        // (`Ledger.interruptedDeliveryError`): no call was made then either, but it is their honest
        // record, which the re-decision shows as the rule change it is (replay.mismatch); any other
        // failure is not.
        case "delivery.failed" where rewards[Self.k(app, d["reward_id"].stringValue ?? "")]?.simulated == true:
            if d["error"].stringValue != Ledger.interruptedDeliveryError {
                flag(e, "delivery.simulated_failed", "a failed delivery of a sandbox reward: sandbox deliveries make no outside call and cannot fail")
            }
            transition(e, app, from: ["fulfilling"], to: d["retry_at"].isNull ? "failed" : "ready")
        case "delivery.succeeded" where d["after_recorded_delivery"].boolValue == true,
             "delivery.failed" where d["after_recorded_delivery"].boolValue == true:
            let rk = Self.k(app, d["reward_id"].stringValue ?? "")
            if rewards[rk]?.inFlightWhenRecorded != true || rewards[rk]?.status != "fulfilled" {
                flag(e, "reward.transition", "\(e.type) after a recorded delivery, but no call was in flight when it was recorded")
            }
            rewards[rk]?.inFlightWhenRecorded = false
        case "reward.review_requested":
            transition(e, app, from: ["pending_review", "awaiting_inventory", "ready", "failed"], to: "pending_review")
        case "delivery.started":
            // Only custom and RevenueCat benefits are delivered by a call (SPEC §7): an Apple code
            // is usable once assigned, points are fulfilled when earned.
            if let r = rewards[Self.k(app, d["reward_id"].stringValue ?? "")],
               let benefit = try? Benefit(json: r.benefit, context: "benefit"), !benefit.needsDeliveryCall {
                flag(e, "reward.transition", "delivery.started of a \(benefit.typeName) reward, which no delivery call fulfils")
            }
            transition(e, app, from: ["ready"], to: "fulfilling")
        case "delivery.succeeded": transition(e, app, from: ["fulfilling"], to: "fulfilled")
        case "delivery.failed": transition(e, app, from: ["fulfilling"], to: d["retry_at"].isNull ? "failed" : "ready")

        case "points.spent":
            let key = Self.k(app, d["user"].stringValue ?? "")
            let amount = d["amount"].intValue ?? 0
            if (balances[key] ?? 0) < amount {
                flag(e, "points.negative_balance", "\(d["user"].stringValue ?? "") spent \(amount) points with a balance of \(balances[key] ?? 0)")
            }
            balances[key, default: 0] -= amount

        default:
            break
        }
    }

    /// The event's program config; a program is followed only from a config the rules could have
    /// written (any other is flagged).
    private mutating func config(_ e: StoredEvent) -> ProgramConfig? {
        guard let c = try? ProgramConfig(json: e.data["config"]) else {
            flag(e, "program.bad_config", "the recorded config is not a program config the rules accept")
            return nil
        }
        return c
    }

    /// A program's versions and status changes are dated in order (none before the latest).
    private mutating func checkTimeline(_ e: StoredEvent, _ pk: String) {
        guard let changed = programs[pk]?.changedAt else { return }
        if e.at < changed { flag(e, "program.backdated", "a change of the program dated \(e.at), before its latest change (\(changed))") }
        programs[pk]?.changedAt = max(changed, e.at)
    }

    /// Idempotency (SPEC §2): every event of a command carries its `id` as `command_id`, and an id
    /// that appended events is never used by a later command of the app (a retry appends nothing).
    private mutating func checkCommandID(_ e: StoredEvent, app: String) {
        let command = e.data["command"]
        if !command.isNull {
            groupCommandType = command["type"].stringValue ?? ""
            groupCommandID = command["id"].stringValue
            if let id = groupCommandID {
                let key = Self.k(app, id)
                if !usedIDs.insert(key).inserted {
                    flag(e, "command.id_reused", "command id \"\(id)\" of app \(app) appended events a second time: a repeated id must answer its first result and append nothing")
                }
            }
        }
        if e.commandID != groupCommandID {
            flag(e, "command.id_mismatch", "command_id \(e.commandID.map { "\"\($0)\"" } ?? "null") is not the id of the command that caused the event (\(groupCommandID.map { "\"\($0)\"" } ?? "null"))")
        }
    }

    private mutating func checkEnrollment(_ e: StoredEvent, app: String, pk: String, settings s: AppSettings) {
        let d = e.data
        let friend = d["friend"].stringValue ?? ""
        let inviter = d["inviter"].stringValue ?? ""
        let ek = Self.k(pk, friend)
        guard let p = programs[pk] else {
            flag(e, "referral.unknown_program", "an enrolment in a program that does not exist")
            return
        }
        if friend == inviter { flag(e, "referral.self_referral", "\(friend) was enrolled with their own invite code") }
        if let existing = enrollments[ek] {
            flag(e, "referral.second_inviter", "\(friend) was already enrolled in this program by \(existing.inviter)")
        }
        checkAccepting(e, s, p, "referral", what: "an enrolment was recorded", dated: "an enrolment counted is dated")
        let month = Self.k(app, e.at.monthKey)
        if let allowance = s.monthlyEnrollmentAllowance, (monthCounts[month] ?? 0) >= allowance {
            flag(e, "referral.allowance_exceeded", "an enrolment beyond the monthly allowance of \(allowance)")
        }
        monthCounts[month, default: 0] += 1
        let ck = Self.k(app, InviteCodes.normalize(d["code"].stringValue ?? ""))
        if let code = codes[ck] {
            if code.inviter != inviter || Self.k(app, code.program) != pk {
                flag(e, "referral.code_mismatch", "the code belongs to \(code.inviter) in \(code.program), not to the recorded inviter")
            }
            if e.at < code.issuedAt {
                flag(e, "referral.before_code", "an enrolment dated \(e.at), before its invite code was issued (\(code.issuedAt))")
            }
            if code.replaced {
                flag(e, "referral.code_expired", "the invite code had been replaced by a newer one of its inviter")
            } else if let days = p.current.invites.expiresAfterDays, e.at > code.issuedAt.adding(days: days) {
                flag(e, "referral.code_expired", "the invite code had expired")
            }
            if let max = p.current.invites.maxEnrollments, code.enrollments >= max {
                flag(e, "referral.code_exhausted", "the invite code had reached \(max) enrolments")
            }
            codes[ck]?.enrollments += 1
        } else {
            flag(e, "referral.unknown_code", "the invite code was never issued")
        }
        let ik = Self.k(pk, inviter)
        if let cap = p.current.inviter?.maxEnrollmentsPer30Days {
            if (inviters[ik]?.enrollments.filter { $0.isWithin(days: 30, endingAt: e.at) }.count ?? 0) >= cap {
                flag(e, "referral.rate_limited", "the inviter was over \(cap) enrolments in 30 days")
            }
        }
        inviters[ik, default: Inviter()].enrollments.append(e.at)
        if let device = d["device_id"].stringValue {
            if !devices.insert(Self.k(app, device)).inserted { flag(e, "referral.duplicate_device", "device \(device) had already enrolled in the app") }
        }
        if d["program_version"].intValue.map(Int.init) != p.versions.count {
            flag(e, "referral.version", "the enrolment does not carry the version in force (\(p.versions.count))")
        }
        if enrollments[ek] == nil {
            enrollments[ek] = Enrollment(inviter: inviter, position: e.position, version: Int(d["program_version"].intValue ?? 1), at: e.at,
                                         eligibility: d["eligibility"].stringValue ?? "", code: ck)
        }
    }

    /// New invites and enrolments only while the program accepts referrals (SPEC §3), and never dated
    /// before its first activation (§4 rule 4, "New programs count from activation"):
    /// `SUBJECT.not_accepting`, `SUBJECT.before_activation`.
    private mutating func checkAccepting(_ e: StoredEvent, _ s: AppSettings, _ p: Program?, _ subject: String, what: String, dated: String) {
        if !s.friendReferralsEnabled || p?.status != "active" {
            flag(e, subject + ".not_accepting", "\(what) while the program did not accept new referrals")
        } else if let first = p?.firstActivation, e.at < first {
            flag(e, subject + ".before_activation", "\(dated) before the program's first activation (\(first))")
        }
    }

    /// "1 qualified friend", "2 qualified friends".
    static func friends(_ n: Int) -> String { n == 1 ? "1 qualified friend" : "\(n) qualified friends" }

    /// A friend reward is earned by the trigger of the friend's enrolment version: SPEC §4 rule 2,
    /// "Enrolled friends keep their friend conditions", and §5:
    /// `invite_accepted` is the enrolment itself; any other trigger is a recorded event of the friend,
    /// of that name, at or after the enrolment. `trigger_position` names which.
    private mutating func checkFriendTrigger(_ e: StoredEvent, _ trigger: String?, _ en: Enrollment, _ friend: String) {
        guard let trigger else { return }  // no friend side in that version: reward.benefit said so
        let position = e.data["trigger_position"].intValue.map { UInt64(clamping: $0) }
        if trigger == "invite_accepted" {
            if position != en.position {
                flag(e, "reward.no_trigger", "the friend reward's trigger is the enrolment (position \(en.position)), not position \(position.map(String.init) ?? "null")")
            }
            return
        }
        guard let position, let fact = facts[position] else {
            flag(e, "reward.no_trigger", "the friend reward names no recorded \(trigger) of \(friend) as its trigger")
            return
        }
        if fact.user != friend || fact.name != trigger || fact.at < en.at {
            flag(e, "reward.no_trigger", "the friend reward's trigger (position \(position)) is a \(fact.name) of \(fact.user) at \(fact.at), not a \(trigger) of \(friend) at or after the enrolment")
        }
    }

    private mutating func checkQualification(_ e: StoredEvent, pk: String) {
        let d = e.data
        let ek = Self.k(pk, d["friend"].stringValue ?? "")
        guard let en = enrollments[ek], let p = programs[pk] else {
            flag(e, "qualification.not_enrolled", "a qualification of a friend who is not enrolled")
            return
        }
        if en.qualified { flag(e, "qualification.twice", "the friend was already qualified for this inviter") }
        if en.eligibility != "eligible" { flag(e, "qualification.ineligible", "the friend is \(en.eligibility), not eligible") }
        let name = p.current.inviter?.qualifyingEvent
        if d["event_name"].stringValue != name {
            flag(e, "qualification.wrong_event", "qualified by \(d["event_name"].stringValue ?? "?") while the qualifying event is \(name ?? "none")")
        }
        if name != "invite_accepted", let position = d["fact_position"].intValue {
            if let fact = facts[UInt64(clamping: position)] {
                if fact.user != d["friend"].stringValue {
                    flag(e, "qualification.no_fact", "the qualifying fact at position \(position) is an event of \(fact.user), not of the friend")
                }
                if fact.name != name { flag(e, "qualification.wrong_event", "the qualifying fact is a \(fact.name)") }
                if fact.at < en.at { flag(e, "qualification.before_enrollment", "the qualifying event happened before the enrolment") }
                if let first = p.firstActivation, fact.at < first {
                    flag(e, "qualification.before_activation", "the qualifying event happened before the program's first activation")
                }
            } else {
                flag(e, "qualification.no_fact", "the qualifying fact at position \(position) is not a recorded event")
            }
        }
        enrollments[ek]?.qualified = true
        inviters[Self.k(pk, en.inviter), default: Inviter()].qualified += 1
    }

    private mutating func checkEarned(_ e: StoredEvent, app: String, pk: String) {
        let d = e.data
        let id = d["reward_id"].stringValue ?? ""
        let rk = Self.k(app, id)
        if rewards[rk] != nil { flag(e, "reward.earned_twice", "reward \(id) was earned twice") }
        rewards[rk] = RewardModel(status: d["status"].stringValue ?? "", benefit: d["benefit"], simulated: d["simulated"].boolValue ?? false,
                                  recipient: d["recipient"].stringValue ?? "", earnedAt: e.at)
        if d["status"].stringValue == "fulfilled" {
            rewards[rk]?.fulfilledOnce = true
            // Points are fulfilled when earned (SPEC §13), on either side.
            if case .points(let amount) = (try? Benefit(json: d["benefit"], context: "benefit")), d["simulated"].boolValue != true {
                balances[Self.k(app, d["recipient"].stringValue ?? ""), default: 0] += amount
            }
        }
        guard let p = programs[pk] else { return }
        let version = Int(d["program_version"].intValue ?? 0)
        let recipient = d["recipient"].stringValue ?? ""
        // SPEC §4 rule 1, "Earned benefits keep their configuration": a friend reward carries the
        // friend's enrolment version and its benefit, an inviter reward the version in force then.
        if d["side"].stringValue == "friend" {
            let ek = Self.k(pk, recipient)
            guard let en = enrollments[ek] else {
                flag(e, "reward.not_enrolled", "a friend reward for \(recipient), who is not enrolled")
                return
            }
            if en.friendReward != nil { flag(e, "reward.earned_twice", "\(recipient) already has a friend reward in this program") }
            enrollments[ek]?.friendReward = id
            if version != en.version { flag(e, "reward.version", "a friend reward must carry the friend's enrolment version \(en.version), not \(version)") }
            let friendSide = p.versions[max(0, min(en.version, p.versions.count) - 1)].friend
            if friendSide?.benefit.json != d["benefit"] { flag(e, "reward.benefit", "the friend reward's benefit is not the one of version \(en.version)") }
            if en.eligibility != "eligible" {
                flag(e, "reward.ineligible", "a friend reward for \(recipient), whose enrolment is \(en.eligibility), not eligible")
            }
            checkFriendTrigger(e, friendSide?.trigger, en, recipient)
            return
        }
        let ik = Self.k(pk, recipient)
        let state = inviters[ik] ?? Inviter()
        if version != p.versions.count { flag(e, "reward.version", "an inviter reward must carry the version in force (\(p.versions.count)), not \(version)") }
        guard let config = p.current.inviter else {
            flag(e, "reward.no_inviter_side", "an inviter reward while the inviter side is off")
            return
        }
        let milestone = d["milestone_id"].stringValue
        switch config.reward {
        case .once(let friends, let benefit):
            if state.slots >= 1 { flag(e, "reward.once_twice", "a once-only reward was earned a second time") }
            if state.qualified < friends { flag(e, "reward.not_due", "earned at \(Self.friends(state.qualified)), \(friends) needed") }
            if benefit.json != d["benefit"] { flag(e, "reward.benefit", "the benefit is not the one of version \(p.versions.count)") }
            inviters[ik, default: Inviter()].slots += 1
        case .every(let friends, let max, let benefit):
            let n = state.slots + 1
            if let max, n > max { flag(e, "reward.cap_exceeded", "reward \(n) is over max_rewards \(max)") }
            if state.qualified < n * friends { flag(e, "reward.not_due", "reward \(n) earned at \(Self.friends(state.qualified)), \(n * friends) needed") }
            if benefit.json != d["benefit"] { flag(e, "reward.benefit", "the benefit is not the one of version \(p.versions.count)") }
            inviters[ik, default: Inviter()].slots += 1
        case .milestones(let list):
            guard let milestone, let m = list.first(where: { $0.id == milestone }) else {
                flag(e, "reward.unknown_milestone", "milestone \(milestone ?? "null") is not in version \(p.versions.count)")
                return
            }
            if state.milestones.contains(milestone) { flag(e, "reward.milestone_twice", "milestone \(milestone) was earned twice") }
            if state.qualified < m.friends { flag(e, "reward.not_due", "milestone \(milestone) earned at \(Self.friends(state.qualified)), \(m.friends) needed") }
            if m.benefit.json != d["benefit"] { flag(e, "reward.benefit", "the benefit is not milestone \(milestone)'s in version \(p.versions.count)") }
            inviters[ik, default: Inviter()].milestones.insert(milestone)
        }
    }

    private mutating func transition(_ e: StoredEvent, _ app: String, from allowed: Set<String>, to next: String) {
        let id = e.data["reward_id"].stringValue ?? ""
        let rk = Self.k(app, id)
        guard let r = rewards[rk] else {
            flag(e, "reward.unknown", "\(e.type) of reward \(id), which was never earned")
            return
        }
        if next == "fulfilled" && r.fulfilledOnce {
            flag(e, "reward.fulfilled_twice", "reward \(id) was fulfilled a second time")
        } else if !allowed.contains(r.status) {
            flag(e, "reward.transition", "\(e.type) is not allowed from status \(r.status)")
        }
        rewards[rk]?.status = next
        if next == "fulfilled" {
            rewards[rk]?.fulfilledOnce = true
            if case .points(let amount) = (try? Benefit(json: r.benefit, context: "benefit")), !r.simulated {
                balances[Self.k(app, r.recipient), default: 0] += amount
            }
        }
        if e.type == "reward.substituted" { rewards[rk]?.benefit = e.data["benefit"] }
    }
}
