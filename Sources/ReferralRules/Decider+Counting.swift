import LedgerCodec

/// Qualification, friend triggers and inviter rewards (SPEC §4 counting, §5 triggers).
extension LedgerState {
    /// Re-evaluates every enrolment of `user` after their facts or eligibility changed.
    mutating func afterFactsChanged(_ user: String, disqualifiedBecause reason: String) {
        for key in apps[currentApp]?.friendPrograms[user] ?? [] {
            evaluateFriendTrigger(key, user)
            if updateQualification(key, user, disqualifiedBecause: reason),
               let inviter = ifProgram(key, { $0.enrollments[user]?.inviter }) {
                evaluateInviterRewards(key, inviter)
            }
        }
    }

    /// Whether a fact may count for a program: paid purchases only from the program's store environment.
    func factCounts(_ f: Fact, in p: ProgramState) -> Bool {
        guard !f.revoked else { return false }
        if f.name == "paid_purchase" { return f.environment == (p.isSandbox ? "SANDBOX" : "PRODUCTION") }
        return true
    }

    /// The position of the fact that qualifies `e` for its inviter under the current version, or nil.
    /// A friend qualifies when eligible, enrolled, and a fact named by the current qualifying event
    /// is recorded at or after both the enrolment and the program's first activation (SPEC §4
    /// counting; rule 4, "New programs count from activation"). A friend counts once.
    func qualifyingFact(_ e: Enrollment, in p: ProgramState) -> UInt64? {
        guard e.eligibility == .eligible, let inviter = p.current.inviter else { return nil }
        let name = inviter.qualifyingEvent
        if name == "invite_accepted" { return e.position }
        let since = max(e.at, p.firstActivatedAt ?? e.at)
        return app.facts[e.friend]?.named(name).first { $0.at >= since && factCounts($0, in: p) }?.position
    }

    /// Records a change of `friend`'s qualification; answers whether it changed.
    @discardableResult
    mutating func updateQualification(_ key: String, _ friend: String, disqualifiedBecause reason: String) -> Bool {
        guard let (e, fact, version, event) = ifProgram(key, { p -> (Enrollment, UInt64?, Int, String)? in
            guard let e = p.enrollments[friend] else { return nil }
            return (e, qualifyingFact(e, in: p), p.version, p.current.inviter?.qualifyingEvent ?? "")
        }) else { return false }
        if let fact, !e.qualified {
            emit(.referralQualified, ["event_name": .string(event), "fact_position": .int(Int64(fact)), "friend": .string(friend),
                                      "inviter": .string(e.inviter), "program": .string(key), "program_version": .int(version)])
            return true
        }
        if fact == nil, e.qualified {
            emit(.referralDisqualified, ["program": .string(key), "inviter": .string(e.inviter), "friend": .string(friend),
                                         "reason": .string(reason), "program_version": .int(version)])
            return true
        }
        return false
    }

    /// Whether `user` received a friend benefit in an app of workspace `name`: the apps whose
    /// `workspace` setting is `name` now, with every benefit they ever gave (an app's own benefits
    /// always count for it; an app that joins brings its own, one that leaves takes them along).
    func hasWelcome(_ user: String, inWorkspace name: String) -> Bool {
        apps.values.contains { $0.settings.workspace == name && $0.welcomed.contains(user) }
    }

    /// Earns the friend benefit of the friend's enrolment version once its trigger is recorded
    /// (SPEC §4 rule 2, "Enrolled friends keep their friend conditions"; §5): trigger and benefit
    /// are read from `e.version`, never from the current one. `welcome_once_per` withholds it.
    mutating func evaluateFriendTrigger(_ key: String, _ friend: String) {
        guard let (e, fc, trigger) = ifProgram(key, { p -> (Enrollment, ProgramConfig.FriendConfig, UInt64?)? in
            guard let e = p.enrollments[friend], e.eligibility == .eligible, e.friendRewardID == nil, !e.friendWithheld,
                  let fc = p.config(version: e.version).friend else { return nil }
            if fc.trigger == "invite_accepted" { return (e, fc, e.position) }
            return (e, fc, app.facts[friend]?.named(fc.trigger).first { $0.at >= e.at && factCounts($0, in: p) }?.position)
        }), let trigger else { return }
        let settings = app.settings
        let withheld: String?
        switch settings.welcomeOncePer {
        case .none: withheld = nil
        case .app: withheld = app.welcomed.contains(friend) ? "welcome_once_per_app" : nil
        case .workspace: withheld = hasWelcome(friend, inWorkspace: settings.workspace) ? "welcome_once_per_workspace" : nil
        }
        if let withheld {
            emit(.rewardWithheld, ["program": .string(key), "friend": .string(friend), "inviter": .string(e.inviter),
                                   "program_version": .int(e.version), "benefit": fc.benefit.json, "reason": .string(withheld)])
            return
        }
        earn(key, side: .friend, recipient: friend, slot: "welcome", milestoneID: nil, threshold: nil,
             version: e.version, benefit: fc.benefit, inviter: e.inviter, trigger: trigger)
    }

    /// Earns every inviter reward now due under the current version: SPEC §4 rule 3,
    /// "Inviter progress follows the current configuration", and §4 counting (`once`, `every` up
    /// to `max_rewards`, each milestone once). Earned rewards are never taken back here.
    mutating func evaluateInviterRewards(_ key: String, _ inviter: String) {
        guard let (reward, version, qualified, slotsEarned, milestonesEarned) = ifProgram(key, { p -> (ProgramConfig.InviterReward, Int, Int, Int, Set<String>)? in
            guard let config = p.current.inviter, let state = p.inviters[inviter] else { return nil }
            return (config.reward, p.version, state.qualified.count, state.numericSlots, state.milestones)
        }) else { return }
        switch reward {
        case .once(let friends, let benefit):
            if slotsEarned == 0, qualified >= friends {
                earn(key, side: .inviter, recipient: inviter, slot: "n:1", milestoneID: nil, threshold: friends,
                     version: version, benefit: benefit, inviter: nil, trigger: nil)
            }
        case .every(let friends, let maxRewards, let benefit):
            var due = qualified / friends
            if let maxRewards { due = min(due, maxRewards) }
            var slots = slotsEarned
            while slots < due {
                slots += 1
                earn(key, side: .inviter, recipient: inviter, slot: "n:\(slots)", milestoneID: nil, threshold: slots * friends,
                     version: version, benefit: benefit, inviter: nil, trigger: nil)
            }
        case .milestones(let list):
            let ordered = list.enumerated().sorted { ($0.element.friends, $0.offset) < ($1.element.friends, $1.offset) }.map(\.element)
            for m in ordered where qualified >= m.friends && !milestonesEarned.contains(m.id) {
                earn(key, side: .inviter, recipient: inviter, slot: "m:\(m.id)", milestoneID: m.id, threshold: m.friends,
                     version: version, benefit: m.benefit, inviter: nil, trigger: nil)
            }
        }
    }

    /// The threshold a reward stands on now: the current version's, where its slot still exists.
    func currentThreshold(_ r: Reward, in p: ProgramState) -> Int? {
        guard r.side == .inviter, let config = p.current.inviter else { return r.threshold }
        switch config.reward {
        case .once(let friends, _) where r.slot == "n:1": return friends
        case .every(let friends, let maxRewards, _) where r.milestoneID == nil:
            // A slot past the current cap is not paid by the current rule: only its own threshold stands.
            if let n = Int(r.slot.dropFirst(2)), n <= maxRewards ?? n { return n * friends }
        case .milestones(let list):
            if let m = list.first(where: { $0.id == r.milestoneID }) { return m.friends }
        default: break
        }
        return r.threshold
    }
}
