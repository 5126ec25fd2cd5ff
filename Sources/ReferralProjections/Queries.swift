import LedgerCodec
import ReferralRules

/// Query answers computed from stored records (SPEC §8).
public enum Queries {
    /// An inviter's progress under the program's current configuration.
    public static func progress(program: JSONValue, participant: JSONValue?) -> JSONValue {
        let inviter = participant?["inviter"] ?? .null
        let qualified = Int(inviter["qualified_count"].intValue ?? 0)
        let enrolled = Int(inviter["enrolled_count"].intValue ?? 0)
        let slots = Int(inviter["slots_earned"].intValue ?? 0)
        let milestones = Set((inviter["milestones_earned"].arrayValue ?? []).compactMap(\.stringValue))
        let earned = Int(inviter["earned_rewards"].intValue ?? 0)
        let reward = program["config"]["inviter"]["reward"]

        var next: Int?
        var last = 0
        switch reward["mode"].stringValue {
        case "once":
            let friends = Int(reward["friends"].intValue ?? 0)
            last = friends
            next = slots == 0 ? friends : nil
        case "every":
            let friends = Int(reward["friends"].intValue ?? 0)
            if let cap = reward["max_rewards"].intValue {
                last = Int(cap) * friends
                next = slots < Int(cap) ? (slots + 1) * friends : nil
            } else {
                next = (slots + 1) * friends
                last = next!
            }
        case "milestones":
            let list = (reward["milestones"].arrayValue ?? []).map { (id: $0["id"].stringValue ?? "", friends: Int($0["friends"].intValue ?? 0)) }
            last = list.map(\.friends).max() ?? 0
            next = list.filter { !milestones.contains($0.id) }.map(\.friends).min()
        default:
            next = nil
        }
        let required = next ?? last
        return [
            "qualified_count": .int(qualified), "required_count": .int(required), "enrolled_count": .int(enrolled),
            "remaining_count": .int(next.map { max(0, $0 - qualified) } ?? 0), "earned_rewards": .int(earned),
            "next_threshold": .optional(next),
        ]
    }

    /// A program with whether it accepts new referrals at `now` (the allowance counts by UTC month).
    public static func program(app: JSONValue, program: JSONValue, now: Timestamp) -> JSONValue {
        var out = program
        // The rules' own predicate, read from the records (an invite or enrolment sent now would be
        // refused exactly when this says false).
        let refusal = AcceptingNewReferrals.refusal(
            referralsEnabled: app["settings"]["friend_referrals_enabled"].boolValue ?? false,
            status: program["status"].stringValue.flatMap(ProgramState.Status.init(rawValue:)) ?? .draft,
            firstActivatedAt: program["first_activated_at"].stringValue.flatMap { Timestamp(rfc3339: $0) },
            allowance: app["settings"]["monthly_enrollment_allowance"].intValue.map { Int(clamping: $0) },
            enrolmentsInMonth: { Int(clamping: app["enrollments_by_month"][$0].intValue ?? 0) }, at: now)
        out["accepting_new_referrals"] = .bool(refusal == nil)
        // `remaining`: codes not handed out and unexpired now (an expired one is passed over).
        if case .object(var inventory) = out["inventory"] {
            for (key, entry) in inventory {
                let expired = (entry["expiring"].objectValue ?? [:]).reduce(Int64(0)) { sum, pair in
                    Timestamp(rfc3339: pair.key).map { $0 <= now } == true ? sum + (pair.value.intValue ?? 0) : sum
                }
                var adjusted = entry
                adjusted["remaining"] = .int(max(0, (entry["remaining"].intValue ?? 0) - expired))
                inventory[key] = adjusted
            }
            out["inventory"] = .object(inventory)
        }
        return out
    }
}
