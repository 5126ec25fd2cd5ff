import LedgerCodec
import LedgerStore
import ReferralRules

/// A reward the delivery worker should deliver, with everything the call needs.
public struct DeliveryJob: Sendable, Equatable {
    public var app: String
    public var program: String
    public var programVersion: Int
    public var rewardID: String
    public var side: String
    public var user: String
    public var benefit: JSONValue
    /// The attempt this delivery will be (reported in delivery.started / succeeded / failed).
    public var attempt: Int
    public var simulated: Bool
    public var retryAt: Timestamp?
    public var status: String
    public var webhookURL: String?
    public var webhookSecret: String?
    public var revenueCatAPIBase: String
    public var revenueCatAPIKey: String?
    /// When the reward was earned: a first attempt is due from then, a retry from `retryAt`.
    public var earnedAt: Timestamp? = nil

    /// When this delivery became due: the order the worker takes them in.
    public var dueAt: Timestamp { retryAt ?? earnedAt ?? Timestamp(milliseconds: 0) }
}

/// Work for the delivery worker and the mail sender, read from the writer's state.
extension Ledger {
    /// The error a worker records for a delivery a stopped worker left `fulfilling` (`verify` knows it).
    public static let interruptedDeliveryError = "interrupted: the worker stopped before recording the outcome"

    private func job(_ ref: DeliveryRef, _ state: LedgerState, _ secrets: [String: [String: String]]) -> DeliveryJob? {
        guard let a = state.apps[ref.app], let r = state.reward(ref) else { return nil }
        let secret = secrets[ref.app] ?? [:]
        return DeliveryJob(app: ref.app, program: ref.program, programVersion: r.programVersion, rewardID: r.id, side: r.side.rawValue,
                           user: r.recipient, benefit: r.benefit.json, attempt: r.attempts + 1, simulated: r.simulated,
                           retryAt: r.retryAt, status: r.status.rawValue, webhookURL: a.settings.webhookURL,
                           webhookSecret: secret["webhook_secret"], revenueCatAPIBase: a.settings.revenueCatAPIBase,
                           revenueCatAPIKey: secret["revenuecat_api_key"], earnedAt: r.earnedAt)
    }

    /// The delivery of a `fulfilling` reward: the attempt started and not yet reported.
    private func startedJob(_ ref: DeliveryRef, _ state: LedgerState, _ secrets: [String: [String: String]]) -> DeliveryJob? {
        guard var j = job(ref, state, secrets), j.status == Reward.Status.fulfilling.rawValue else { return nil }
        j.attempt -= 1  // `job` names the next attempt; this one is the attempt just started
        return j
    }

    /// A started delivery as the ledger holds it now, to build the call from: the benefit, webhook
    /// and keys in force when `delivery.started` was recorded, not those of an earlier look at the
    /// queue (an owner may have substituted the benefit or changed a setting in between). Nil unless
    /// the reward is `fulfilling` (started, not yet reported).
    public func startedDelivery(app: String, program: String, rewardID: String) -> DeliveryJob? {
        withState { state, secrets in startedJob(DeliveryRef(app: app, program: program, rewardID: rewardID), state, secrets) }
    }

    /// Rewards `ready` for an outside call whose retry (if any) is due at `now`, longest due first:
    /// a retry from its `retry_at`, a first attempt from its earning, so a failed delivery is not
    /// kept waiting behind rewards earned after it (SPEC §11: "due then").
    /// `skipping(app, rewardID)` leaves out rewards the caller is delivering or has tried.
    ///
    /// The queue may hold tens of thousands of rewards (a receiver down for a day): under the
    /// writer's lock each is looked at by its times and ID only; `skipping` is asked outside it (it
    /// may call back into the ledger, and a slow one holds up no commit); jobs are then made, under
    /// the lock again, for the page taken, of those still due.
    public func dueDeliveries(now: Timestamp = .now(), limit: Int = 100,
                              skipping: (_ app: String, _ rewardID: String) -> Bool = { _, _ in false }) -> [DeliveryJob] {
        func isDue(_ r: Reward) -> Bool { r.retryAt.map { $0 <= now } ?? true }
        let due: [(at: Int64, id: String, ref: DeliveryRef)] = withState { state, _ in
            state.deliveryQueue.values.compactMap { ref in
                guard let r = state.reward(ref), isDue(r) else { return nil }
                return ((r.retryAt ?? r.earnedAt).milliseconds, r.id, ref)
            }
        }
        let kept = due.filter { !skipping($0.ref.app, $0.ref.rewardID) }
        let first = Self.smallest(limit, of: kept) { ($0.at, $0.id) < ($1.at, $1.id) }
        guard !first.isEmpty else { return [] }
        return withState { state, secrets in
            first.compactMap { candidate in
                // Committed meanwhile: a reward started, reported or decided is no longer due.
                guard let r = state.reward(candidate.ref), r.status == .ready, isDue(r) else { return nil }
                return job(candidate.ref, state, secrets)
            }
        }
    }

    /// The `k` smallest elements in order: a sort of the whole when `k` is most of it, else one
    /// pass keeping a sorted window of `k` (a page of 100 from 30,000 compares a few each).
    static func smallest<T>(_ k: Int, of items: [T], by less: (T, T) -> Bool) -> [T] {
        guard k > 0 else { return [] }
        if items.count / 4 <= k { return Array(items.sorted(by: less).prefix(k)) }
        var window: [T] = []
        window.reserveCapacity(k + 1)
        for item in items {
            if window.count == k, let last = window.last, !less(item, last) { continue }
            var low = 0, high = window.count
            while low < high {
                let mid = (low + high) / 2
                if less(item, window[mid]) { high = mid } else { low = mid + 1 }
            }
            window.insert(item, at: low)
            if window.count > k { window.removeLast() }
        }
        return window
    }

    /// The earliest retry time among rewards waiting for one (the worker sleeps until then).
    public func nextRetry() -> Timestamp? {
        withState { state, _ in state.deliveryQueue.values.compactMap { state.reward($0)?.retryAt }.min() }
    }

    /// Rewards left `fulfilling` by a worker that stopped before recording the outcome.
    public func interruptedDeliveries() -> [DeliveryJob] {
        withState { state, secrets in
            var jobs: [DeliveryJob] = []
            for (name, a) in state.apps {
                for p in a.programs.values {
                    for r in p.rewards.values where r.status == .fulfilling {
                        if let j = startedJob(DeliveryRef(app: name, program: p.key, rewardID: r.id), state, secrets) { jobs.append(j) }
                    }
                }
            }
            return jobs.sorted { $0.rewardID < $1.rewardID }
        }
    }

    /// Notifications waiting to be sent and due at `now` (a failed one waits for its retry), oldest
    /// first; one requested before anyone was set to receive it goes to whoever is set now.
    public func pendingNotifications(dueAt now: Timestamp = .now()) -> [PendingNotification] {
        withState { state, _ in
            state.pendingNotifications.values.filter { ($0.retryAt ?? now) <= now }.sorted { $0.position < $1.position }.map {
                Self.readyToSend($0, state)
            }
        }
    }

    /// The notification at `position` as it stands now, if it is still pending: a worker asks again
    /// right before mailing it, so a review decided while earlier notices were being mailed is
    /// withdrawn, not mailed.
    public func pendingNotification(at position: UInt64) -> PendingNotification? {
        withState { state, _ in state.pendingNotifications[position].map { Self.readyToSend($0, state) } }
    }

    /// A pending notification with what the state says of it now: its recipients (if it had none),
    /// whether it is a sandbox program's, whether its review was decided.
    private static func readyToSend(_ pending: PendingNotification, _ state: LedgerState) -> PendingNotification {
        var n = pending
        if n.recipients.isEmpty { n.recipients = state.notificationRecipients(app: n.app, program: n.program) }
        n.simulated = state.apps[n.app]?.programs[n.program]?.isSandbox ?? false
        n.isDecided = state.isDecided(n)
        return n
    }
}
