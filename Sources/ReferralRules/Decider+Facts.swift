import LedgerCodec

/// Events from the app and from the store (SPEC §6, §12).
extension LedgerState {
    mutating func track(_ user: String, _ name: String, _ eventID: String) -> Outcome {
        // A reserved name is refused (and recorded) every time it is sent: a retry must not be told
        // "ok", and the refusal does not spend its event_id.
        if ProgramConfig.reservedEvents.contains(name) {
            emit(.eventRejected, ["user": .string(user), "name": .string(name), "event_id": .string(eventID), "reason": "reserved_event"])
            let why = name == "paid_purchase" ? "paid_purchase comes only from RevenueCat (revenuecat.event)" : "invite_accepted is recorded by enrolment"
            return .refusedWithRecord(Rejection(.reservedEvent, "\"\(name)\" is reserved: \(why)"))
        }
        // A repeated event_id of a stored event changes nothing (SPEC §6).
        if let position = app.trackedEventIDs[eventID] {
            return .duplicate(["position": .int(Int64(position))])
        }
        guard app.friendPrograms[user] != nil else {
            return .accepted(["stored": false, "reason": "not_enrolled"])
        }
        emit(.eventTracked, ["event_id": .string(eventID), "name": .string(name), "source": "app", "user": .string(user)])
        afterFactsChanged(user, disqualifiedBecause: "facts_changed")
        return .accepted(["stored": true])
    }

    static let paidTypes: Set<String> = ["INITIAL_PURCHASE", "RENEWAL", "NON_RENEWING_PURCHASE"]

    /// The user of a RevenueCat event: `app_user_id` when enrolled, else the first enrolled of
    /// `aliases` then `original_app_user_id`.
    ///
    /// The answer is the enrolled user's ID as stored: RevenueCat's body is kept as sent, and a
    /// canonically equivalent spelling (which Swift's `==` matches) must not become a second user.
    func revenueCatUser(_ event: JSONValue) -> String? {
        let enrolled = app.friendPrograms
        func stored(_ id: String) -> String? { enrolled.index(forKey: id).map { enrolled[$0].key } }
        if let id = event["app_user_id"].stringValue, let user = stored(id) { return user }
        var candidates = (event["aliases"].arrayValue ?? []).compactMap(\.stringValue)
        if let original = event["original_app_user_id"].stringValue { candidates.append(original) }
        return candidates.lazy.compactMap(stored).first
    }

    mutating func revenueCat(_ event: JSONValue) -> Outcome {
        let rcID = event["id"].stringValue ?? ""
        if let position = app.revenueCatEventIDs[Array(rcID.utf8)] {
            return .duplicate(["position": .int(Int64(position))])
        }
        let type = event["type"].stringValue ?? ""
        guard let user = revenueCatUser(event) else {
            return .accepted(["stored": false, "reason": "not_enrolled"])
        }
        if Self.paidTypes.contains(type) {
            let price = event["price"].doubleValue ?? 0
            let environment = event["environment"].stringValue ?? ""
            var ignored: String?
            if !(price > 0) { ignored = "not_paid" }
            else if event["period_type"].stringValue == "TRIAL" { ignored = "trial" }
            else if event["store"].stringValue == "PROMOTIONAL" { ignored = "promotional" }
            else if environment != "PRODUCTION" && environment != "SANDBOX" { ignored = "unknown_environment" }
            if let ignored { return .accepted(["stored": false, "reason": .string(ignored)]) }
            emit(.eventTracked, ["user": .string(user), "name": "paid_purchase", "event_id": .string(rcID), "source": "revenuecat",
                                 "transaction_id": .optional(event["transaction_id"].stringValue),
                                 "original_transaction_id": .optional(event["original_transaction_id"].stringValue),
                                 "environment": .string(environment), "revenuecat_event": event])
            afterFactsChanged(user, disqualifiedBecause: "facts_changed")
            return .accepted(["stored": true])
        }
        if type == "CANCELLATION", event["cancel_reason"].stringValue == "CUSTOMER_SUPPORT" {
            // SPEC §12: a refund matches `transaction_id`, else `original_transaction_id`. A
            // transaction already recorded is the one refunded (every record of it, should two
            // RevenueCat ids have carried it), even when already refunded: then nothing changes,
            // rather than the refund falling through to another purchase of the subscription.
            // A refund from one store environment refunds that environment's purchases only (a
            // sandbox refund never touches a live purchase that happens to share its id).
            // (One without `environment` matches either; a null or non-text one matches none, as a
            // purchase with one is never recorded.)
            let given: JSONValue? = event.objectValue.flatMap { $0["environment"] }
            let purchases = (app.facts[user]?.named("paid_purchase") ?? []).filter { fact in
                guard let given else { return true }
                return given.stringValue != nil && fact.environment == given.stringValue
            }
            let tx = event["transaction_id"].stringValue
            let original = event["original_transaction_id"].stringValue
            let sameTransaction = tx.map { t in purchases.filter { $0.transactionID.isVerbatim(t) } } ?? []
            let ofSubscription = original.map { o in purchases.filter { $0.transactionID.isVerbatim(o) || $0.originalTransactionID.isVerbatim(o) } } ?? []
            let refunded: [Fact]
            if !sameTransaction.isEmpty {
                refunded = sameTransaction.filter { !$0.revoked }
                guard !refunded.isEmpty else { return .accepted(["stored": false, "reason": "already_refunded"]) }
            } else if let purchase = ofSubscription.first(where: { !$0.revoked }) {
                refunded = [purchase]
            } else if tx == nil, !ofSubscription.isEmpty {
                return .accepted(["stored": false, "reason": "already_refunded"])
            } else {
                return .accepted(["stored": false, "reason": "no_matching_purchase"])
            }
            for purchase in refunded {
                emit(.purchaseRefunded, ["user": .string(user), "transaction_id": .optional(purchase.transactionID),
                                         "refunded_position": .int(Int64(purchase.position)), "revenuecat_event_id": .string(rcID),
                                         "revenuecat_event": event])
            }
            for purchase in refunded { handleRefund(user, refunded: purchase.position) }
            return .accepted(["stored": true])
        }
        return .accepted(["stored": false, "reason": "not_a_purchase_or_refund"])
    }

    /// A refund revokes the qualification it carried (when nothing else qualifies the friend);
    /// rewards that depended on it go to review, or are flagged once fulfilled (SPEC §6, §12).
    mutating func handleRefund(_ user: String, refunded: UInt64) {
        for key in apps[currentApp]?.friendPrograms[user] ?? [] {
            guard let e = ifProgram(key, { $0.enrollments[user] }) else { continue }
            let revoked = e.qualified && updateQualification(key, user, disqualifiedBecause: "qualification_refunded")
            reviewFriendReward(key, e, afterRefundOf: refunded)
            if revoked {
                let affected = ifProgram(key) { p -> [String]? in
                    guard let state = p.inviters[e.inviter] else { return nil }
                    let count = state.qualified.count
                    // A reward depended on the revoked qualification when neither the threshold it was
                    // earned at nor its threshold under the current version is met any more: a later
                    // raise of the threshold alone never puts a reward under review.
                    return state.rewardIDs.filter { rid in
                        guard let r = p.rewards[rid] else { return false }
                        let thresholds = [r.threshold, currentThreshold(r, in: p)].compactMap { $0 }
                        guard let lowest = thresholds.min() else { return false }
                        return lowest > count
                    }
                } ?? []
                for rid in affected { reviewOrFlag(key, rid) }
            }
        }
    }

    /// The friend's own reward after a refund (SPEC §12: "the friend's own reward if paid_purchase
    /// triggered it"), judged by its own trigger — the enrolment version's (§4 rule 2), not the
    /// inviter's qualification, which follows the current version: back to review when the refunded
    /// purchase was one that could trigger it and none is left that still can, whichever purchase
    /// triggered it (two refunds end the same in either order). A refund of its trigger that leaves
    /// another purchase flags it if it is already usable (§7).
    mutating func reviewFriendReward(_ key: String, _ e: Enrollment, afterRefundOf refunded: UInt64) {
        guard let rid = e.friendRewardID, let (trigger, refundedCounted, stillTriggered) = ifProgram(key, { p -> (UInt64, Bool, Bool)? in
            guard let trigger = p.rewards[rid]?.triggerPosition, p.config(version: e.version).friend?.trigger == "paid_purchase" else { return nil }
            let purchases = app.facts[e.friend]?.named("paid_purchase") ?? []
            func canTrigger(_ f: Fact) -> Bool { f.at >= e.at && factCounts(f, in: p) }
            let refundedCounted = purchases.contains { f in
                var unrevoked = f
                unrevoked.revoked = false
                return f.position == refunded && canTrigger(unrevoked)
            }
            return (trigger, refundedCounted, purchases.contains(where: canTrigger))
        }) else { return }
        if refundedCounted && !stillTriggered { reviewOrFlag(key, rid) } else if trigger == refunded { flagIfUsable(key, rid) }
    }

    /// Flags a usable reward (fulfilled, or an Apple code handed out) whose purchase was refunded:
    /// evidence, nothing revoked.
    mutating func flagIfUsable(_ key: String, _ rid: String) {
        guard let r = ifProgram(key, { $0.rewards[rid] }), r.isUsable, !r.refundFlagged else { return }
        emit(.rewardRefundFlagged, ["program": .string(key), "reward_id": .string(rid), "recipient": .string(r.recipient)])
    }

    /// Sends an unfulfilled reward back to review (`qualification_refunded`), or flags one that is
    /// delivered or on its way: fulfilled, being delivered, or an Apple code already handed out
    /// (it stays `ready` and usable once its code is set, SPEC §12).
    mutating func reviewOrFlag(_ key: String, _ rid: String) {
        guard let r = ifProgram(key, { $0.rewards[rid] }) else { return }
        if r.isUsable || r.status == .fulfilling {
            if !r.refundFlagged { emit(.rewardRefundFlagged, ["program": .string(key), "reward_id": .string(rid), "recipient": .string(r.recipient)]) }
            return
        }
        switch r.status {
        case .rejected, .fulfilled, .fulfilling:
            return
        case .pendingReview where r.reviewReason == "qualification_refunded":
            return
        default:
            emit(.rewardReviewRequested, ["program": .string(key), "reward_id": .string(rid), "recipient": .string(r.recipient), "review_reason": "qualification_refunded",
                                          "previous_status": .string(r.status.rawValue)])
            notify(key, kind: "reward_review", rewardID: rid, subject: "Reward \(rid) needs review: its qualifying purchase was refunded")
        }
    }
}
