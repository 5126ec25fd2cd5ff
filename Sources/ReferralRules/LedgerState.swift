import LedgerCodec

/// Everything the rules decide against, folded from the events (and only from them).
///
/// Collections that events are emitted from in a loop keep an explicit order, so that a
/// decision never depends on dictionary order and a replay emits the same bytes.
public struct LedgerState: Sendable {
    /// Position of the last event folded in.
    public internal(set) var head: UInt64 = 0
    public internal(set) var apps: [String: AppState] = [:]

    /// Rewards the delivery worker should call out for (`ready`, custom or RevenueCat), by "app␟reward".
    public internal(set) var deliveryQueue: [String: DeliveryRef] = [:]
    /// Owner notifications recorded but not yet reported sent or failed, by position.
    public internal(set) var pendingNotifications: [UInt64: PendingNotification] = [:]

    /// What the fold touched since the last `takeChanges()`: the projections to rewrite.
    public internal(set) var changes = Changes()
    /// Whether the fold notes what it touches in `changes`. A writer does (its projections follow
    /// each commit); a fold of the whole log, a replay or a `verify` need not (their records, when
    /// wanted, are made for everything), and saves the sets' hashing and memory.
    public var tracksChanges: Bool {
        get { changes.isTracking }
        set { changes.isTracking = newValue }
    }

    // Scratch of the decision in progress (see Decider).
    var outbox: [NewEventDraft] = []
    var now = Timestamp(milliseconds: 0)
    var currentApp = ""
    var currentCommand: JSONValue = .null
    /// Why the decision in progress cannot be trusted (see `Decision.inconsistency`).
    var inconsistency: String?

    public init() {}

    /// An empty state for a replay that needs no `changes` (`tracksChanges` off).
    public static func replaying() -> LedgerState {
        var state = LedgerState()
        state.tracksChanges = false
        return state
    }

    public struct Changes: Sendable {
        public init() {}

        public var apps: Set<String> = []
        public var programs: Set<ProgramKey> = []
        public var participants: Set<UserKey> = []
        public var rewards: Set<RewardKey> = []
        public var balances: Set<UserKey> = []
        /// Users the app came to know otherwise (account evidence alone); `program` is empty.
        public var users: Set<UserKey> = []
        public var isEmpty: Bool { apps.isEmpty && programs.isEmpty && participants.isEmpty && rewards.isEmpty && balances.isEmpty && users.isEmpty }
        /// Whether `note` records anything (see `LedgerState.tracksChanges`).
        var isTracking = true

        mutating func note(app: String) { if isTracking { apps.insert(app) } }
        mutating func note(program: ProgramKey) { if isTracking { programs.insert(program) } }
        mutating func note(participant: UserKey) { if isTracking { participants.insert(participant) } }
        mutating func note(reward: RewardKey) { if isTracking { rewards.insert(reward) } }
        mutating func note(balance: UserKey) { if isTracking { balances.insert(balance) } }
        mutating func note(user: UserKey) { if isTracking { users.insert(user) } }
    }

    public mutating func takeChanges() -> Changes {
        defer {
            let tracking = changes.isTracking
            changes = Changes()
            changes.isTracking = tracking
        }
        return changes
    }
}

public struct ProgramKey: Hashable, Sendable {
    public var app: String, program: String
    public init(app: String, program: String) { self.app = app; self.program = program }
}
public struct UserKey: Hashable, Sendable {
    public var app: String, program: String, user: String
    public init(app: String, program: String, user: String) { self.app = app; self.program = program; self.user = user }
}
public struct RewardKey: Hashable, Sendable {
    public var app: String, rewardID: String
    public init(app: String, rewardID: String) { self.app = app; self.rewardID = rewardID }
}

/// An event decided but not yet stored.
struct NewEventDraft: Sendable {
    var type: EventType
    var data: JSONValue
}

public struct AppState: Sendable {
    public let name: String
    public internal(set) var settings: AppSettings
    public internal(set) var programs: [String: ProgramState] = [:]
    public internal(set) var programOrder: [String] = []
    /// Each user's trusted account-creation time and where it came from: `account_verify`, or
    /// `earlier_enrolment` (inline evidence of an enrolment in another program of the app).
    public internal(set) var accountCreated: [String: (at: Timestamp, evidence: String)] = [:]
    /// Invite codes by normalised (upper-case) text.
    public internal(set) var codes: [String: InviteCode] = [:]
    public internal(set) var enrollmentsByMonth: [String: Int] = [:]
    public internal(set) var devices: [String: String] = [:]
    /// Position of the `event.tracked` of each app `event_id`, and of each RevenueCat event id.
    /// RevenueCat's ids are kept as sent (not held to NFC like the app's), so they are keyed by
    /// their bytes: Swift's `==` would take two canonically equivalent spellings for one.
    public internal(set) var trackedEventIDs: [String: UInt64] = [:]
    public internal(set) var revenueCatEventIDs: [[UInt8]: UInt64] = [:]
    /// Programs each user is enrolled in as a friend, in enrolment order.
    public internal(set) var friendPrograms: [String: [String]] = [:]
    /// Recorded facts (tracked events, purchases) per user, by name, in log order: the rules ask
    /// for one name at a time, and a user may have a great many facts of other names.
    public internal(set) var facts: [String: UserFacts] = [:]
    public internal(set) var welcomed: Set<String> = []
    public internal(set) var points: [String: PointsBalance] = [:]
    public internal(set) var rewardPrograms: [String: String] = [:]
    /// Every offer code imported in the app, trimmed and upper-cased (codes redeem whatever their case).
    public internal(set) var offerCodesSeen: Set<String> = []
    /// Every user the app has seen (inviters, friends, spenders): queries answer 404 for others.
    public internal(set) var knownUsers: Set<String> = []

    init(name: String) {
        self.name = name
        settings = AppSettings(app: name)
    }

    public func program(_ key: String) -> ProgramState? { programs[key] }

    public func enrollmentsIn(month: String) -> Int { enrollmentsByMonth[month] ?? 0 }
}

public struct InviteCode: Sendable {
    public var code: String
    public var program: String
    public var inviter: String
    public var issuedAt: Timestamp
    public var position: UInt64
    public var enrollments = 0
}

public struct PointsBalance: Sendable, Equatable {
    public init() {}
    public var earned: Int64 = 0
    public var spent: Int64 = 0
    public var balance: Int64 { earned - spent }
}

/// A recorded fact about a user: a tracked event, an enrolment's signup, a paid purchase.
public struct Fact: Sendable {
    public var name: String
    public var at: Timestamp
    public var position: UInt64
    public var transactionID: String?
    public var originalTransactionID: String?
    public var environment: String?
    public var revoked = false
}

/// One user's facts, by name, each list in log order.
public struct UserFacts: Sendable {
    public private(set) var byName: [String: [Fact]] = [:]

    /// The facts of that name, in log order.
    public func named(_ name: String) -> [Fact] { byName[name] ?? [] }

    mutating func append(_ fact: Fact) { byName[fact.name, default: []].append(fact) }

    /// Facts read back from a snapshot (`LedgerState+Snapshot`).
    init(byName: [String: [Fact]]) { self.byName = byName }

    init() {}

    /// Marks the purchase at `position` refunded.
    mutating func revokePurchase(at position: UInt64) {
        if let i = byName["paid_purchase"]?.firstIndex(where: { $0.position == position }) { byName["paid_purchase"]![i].revoked = true }
    }
}

public struct ProgramState: Sendable {
    public enum Status: String, Sendable, CustomStringConvertible {
        case draft, active, paused
        /// The wire name, as queries and events spell it.
        public var description: String { rawValue }
    }

    public let key: String
    public let environment: Command.Environment
    public internal(set) var status: Status = .draft
    public internal(set) var versions: [ProgramConfig]
    public internal(set) var firstActivatedAt: Timestamp?
    public internal(set) var createdAt: Timestamp
    /// The `at` of the program's latest creation, version or status change: its own timeline, which
    /// later changes may not be dated before.
    public internal(set) var changedAt: Timestamp
    /// Each user's current invite code.
    public internal(set) var invites: [String: String] = [:]
    public internal(set) var enrollments: [String: Enrollment] = [:]
    public internal(set) var enrollmentOrder: [String] = []
    public internal(set) var inviters: [String: InviterState] = [:]
    public internal(set) var inviterOrder: [String] = []
    public internal(set) var rewards: [String: Reward] = [:]
    public internal(set) var rewardOrder: [String] = []
    /// Each recipient's rewards counted by state (kept as rewards are earned and change), so a
    /// participant's record costs the same for a user with three rewards or a hundred thousand.
    public internal(set) var tallies: [String: RewardTally] = [:]
    public internal(set) var inventory: [String: OfferInventory] = [:]
    /// Rewards waiting for an offer code, in earning order: an import resumes them in that order
    /// (SPEC §7), whenever each started waiting.
    public internal(set) var awaitingInventory = WaitingList()
    public internal(set) var counts = ProgramCounts()

    public var version: Int { versions.count }
    public var current: ProgramConfig { versions[versions.count - 1] }
    public func config(version: Int) -> ProgramConfig { versions[max(0, min(version, versions.count) - 1)] }
    public var isSandbox: Bool { environment == .sandbox }

    static func inventoryKey(side: Command.Side, offerID: String) -> String { side.rawValue + "\u{1F}" + offerID }

    /// Takes a reward off the waiting list.
    mutating func stopAwaitingInventory(_ id: String) {
        awaitingInventory.remove(id)
    }

    /// Puts a reward in the inventory queue at its earning position (a reward approved late
    /// still goes before those earned after it).
    mutating func awaitInventory(_ reward: Reward) {
        awaitingInventory.insert(reward.id) { rewards[$0]?.position ?? 0 > reward.position }
    }
}

/// Reward IDs in a queue order, each at most once. Taking one off costs the same wherever it
/// stands (an import resuming tens of thousands of waiting rewards, in an order of its own, must
/// not search or shift the whole queue for each): it is marked gone, and the queue is compacted
/// once half of it is.
public struct WaitingList: Sendable {
    /// The queue, with the IDs taken off but not compacted away yet (`gone`).
    private var order: [String] = []
    private var present: Set<String> = []
    private var gone: Set<String> = []

    /// The IDs waiting, in queue order.
    public var ids: [String] { order.count == present.count ? order : order.filter(present.contains) }
    public var count: Int { present.count }
    public var isEmpty: Bool { present.isEmpty }
    public func contains(_ id: String) -> Bool { present.contains(id) }

    /// Whether a waiting ID satisfies `predicate`, looking from the front of the queue and
    /// stopping at the first (no copy of the queue is made).
    public func contains(where predicate: (String) -> Bool) -> Bool {
        for id in order where present.contains(id) && predicate(id) { return true }
        return false
    }

    /// Adds `id` before the first ID that `goesAfter` (at the end when none does, as is usual:
    /// rewards mostly start waiting in earning order).
    mutating func insert(_ id: String, before goesAfter: (String) -> Bool) {
        guard present.insert(id).inserted else { return }
        // Waiting again (approved after a review, say): its old place goes first.
        if gone.remove(id) != nil, let old = order.firstIndex(of: id) { order.remove(at: old) }
        if let last = order.last, goesAfter(last), let at = order.firstIndex(where: { present.contains($0) && goesAfter($0) }) {
            order.insert(id, at: at)
        } else {
            order.append(id)
        }
    }

    /// The queue as a snapshot holds it (`LedgerState+Snapshot`), taken-off IDs included, so that
    /// it compacts when the fold's would.
    func write(to w: inout BinaryWriter) {
        w.write(order)
        w.write(present)
        w.write(gone)
    }

    init() {}

    init(from r: inout BinaryReader) throws {
        order = try r.readStrings()
        present = try r.readStringSet()
        gone = try r.readStringSet()
    }

    mutating func remove(_ id: String) {
        guard present.remove(id) != nil else { return }
        gone.insert(id)
        if present.count * 2 < order.count {
            order = order.filter(present.contains)
            gone = []
        }
    }
}

/// One recipient's rewards in a program, counted by what the dashboard shows of them.
public struct RewardTally: Sendable, Equatable {
    /// Inviter rewards not rejected (progress's `earned_rewards`).
    public internal(set) var inviterEarned = 0
    public internal(set) var fulfilled = 0
    /// Usable: fulfilled, or an Apple code handed out.
    public internal(set) var usable = 0
    /// Waiting for the owner's approval.
    public internal(set) var pendingApproval = 0
    /// Waiting for delivery: not usable yet, and no code, queued, in flight or failed.
    public internal(set) var pendingDelivery = 0

    public init() {}

    /// Adds (`sign` 1) or takes away (-1) a reward as it stands.
    mutating func count(_ r: Reward, _ sign: Int) {
        if r.side == .inviter && r.status != .rejected { inviterEarned += sign }
        if r.status == .fulfilled { fulfilled += sign }
        if r.isUsable { usable += sign }
        if r.status == .pendingReview { pendingApproval += sign }
        if !r.isUsable && [.awaitingInventory, .ready, .fulfilling, .failed].contains(r.status) { pendingDelivery += sign }
    }
}

/// Running totals for the owner's dashboard, kept by the fold.
public struct ProgramCounts: Sendable, Equatable {
    public var invites = 0
    public var enrolled = 0
    public var pendingReview = 0
    public var ineligible = 0
    public var qualified = 0
    public var withheld = 0
    public var rewardsByStatus: [String: Int] = [:]
}

public struct OfferInventory: Sendable {
    public internal(set) var codes: [Command.OfferCode] = []
    /// Index of the next code not yet handed out (codes before it were assigned or skipped as expired).
    public internal(set) var next = 0
    /// Codes at or after `next` already handed out: codes passed over between them (dead by one
    /// reward's earning, a command dated out of order) stay for the others.
    public internal(set) var handedOutAhead: Set<Int> = []
    public var remaining: Int { codes.count - next - handedOutAhead.count }
    /// The indices of the codes not handed out yet, in import order. Walks every code from `next`:
    /// for checks and tools (the tests compare `expiringAvailable` with it), not for a write.
    public var available: [Int] { (next..<codes.count).filter { !handedOutAhead.contains($0) } }
    /// Codes before `next` that were dropped as dead at a command's time, never handed out, in
    /// import order. A command dated before one expired (out of order) may still hand it out, and
    /// takes it first: each precedes every code from `next` in import order.
    public internal(set) var passed: [Int] = []
    /// The latest expiry among `passed` (once some are handed out, a bound): an assignment at or
    /// after it has none to look at.
    public internal(set) var passedUntil: Timestamp?
    /// An assignment left few codes (the owner was warned); cleared when an import refills it.
    public internal(set) var lowWarned = false
    /// How many of the codes in `available` expire at each time (codes without an expiry are not
    /// counted), kept as codes are imported, handed out and dropped: the program's record shows it
    /// without looking at every code of a large import at every write.
    public internal(set) var expiringAvailable: [Timestamp: Int] = [:]

    /// Codes appended by an import.
    mutating func add(_ imported: [Command.OfferCode]) {
        for code in imported {
            // (A code handed out before it was imported, which only a forged log holds, is not available.)
            if let e = code.expiresAt, codes.count >= next, !handedOutAhead.contains(codes.count) { expiringAvailable[e, default: 0] += 1 }
            codes.append(code)
        }
    }

    /// Whether the code at `index` is unexpired at `time` (a code without an expiry always is).
    public func isUnexpired(_ index: Int, at time: Timestamp) -> Bool {
        codes[index].expiresAt.map { $0 > time } ?? true
    }

    /// The first passed code unexpired at `time`, in import order.
    public func firstPassed(unexpiredAt time: Timestamp) -> Int? {
        guard let until = passedUntil, until > time else { return nil }
        return passed.first { isUnexpired($0, at: time) }
    }

    /// Drops the code at `next`, dead at this command's time, to `passed`, and moves on.
    mutating func passNext() {
        noteGone(next)
        passed.append(next)
        if let e = codes[next].expiresAt, passedUntil.map({ e > $0 }) ?? true { passedUntil = e }
        next += 1
    }

    /// A passed code was handed out (by a command dated before it expired).
    mutating func takePassed(_ index: Int) {
        let low = passed.partitionPoint { $0 < index }
        if low < passed.count, passed[low] == index { passed.remove(at: low) }
        if passed.isEmpty { passedUntil = nil }
    }

    /// The code at `index` left `available` (handed out, or dropped as dead).
    mutating func noteGone(_ index: Int) {
        guard codes.indices.contains(index), let e = codes[index].expiresAt, let n = expiringAvailable[e] else { return }
        expiringAvailable[e] = n > 1 ? n - 1 : nil
    }
}

public struct Enrollment: Sendable {
    public enum Eligibility: String, Sendable { case eligible, pendingReview = "pending_review", ineligible }

    public var friend: String
    public var inviter: String
    public var code: String
    public var version: Int
    public var at: Timestamp
    public var position: UInt64
    public var eligibility: Eligibility
    public var qualified = false
    public var qualifiedBy: UInt64?
    public var friendRewardID: String?
    public var friendWithheld = false
}

public struct InviterState: Sendable {
    public var friends: [String] = []
    public var qualified: Set<String> = []
    public var enrolledCount = 0
    /// The times of the inviter's enrolments, in time order (commands dated out of order are
    /// placed where they fall), for the velocity cap's window.
    public internal(set) var enrollmentTimes: [Timestamp] = []

    /// Records an enrolment's time in order (nearly always at the end).
    mutating func noteEnrollment(at time: Timestamp) {
        var i = enrollmentTimes.endIndex
        while i > 0, enrollmentTimes[i - 1] > time { i -= 1 }
        enrollmentTimes.insert(time, at: i)
    }

    /// Enrolments in the `days` days ending at `end`, that is in (end − days, end].
    public func enrollments(inDays days: Int, endingAt end: Timestamp) -> Int {
        let start = Timestamp(milliseconds: end.milliseconds - Int64(days) * 86_400_000)
        return firstIndex(after: end) - firstIndex(after: start)
    }

    /// The index of the first time after `t` (binary search over the ordered times).
    private func firstIndex(after t: Timestamp) -> Int {
        enrollmentTimes.partitionPoint { $0 <= t }
    }
    /// Once/every rewards earned (rejected ones keep their slot).
    public var numericSlots = 0
    public var milestones: Set<String> = []
    public var rewardIDs: [String] = []
}

public struct Reward: Sendable {
    public enum Status: String, Sendable, CustomStringConvertible {
        case pendingReview = "pending_review", awaitingInventory = "awaiting_inventory", ready, fulfilling, fulfilled, failed, rejected
        /// The wire name (`pending_review`, …), as queries and events spell it.
        public var description: String { rawValue }
    }

    public var id: String
    public var program: String
    public var programVersion: Int
    public var side: Command.Side
    public var recipient: String
    public var milestoneID: String?
    public var slot: String
    public var threshold: Int?
    public var benefit: Benefit
    public var status: Status
    public var reviewReason: String?
    public var code: String?
    public var codeExpiresAt: Timestamp?
    public var simulated: Bool
    public var refundFlagged = false
    /// Flagged by a refund that revoked its qualification while a delivery call was in flight: if
    /// that call fails, nothing was delivered and the reward goes to review instead of a retry.
    public var refundedInFlight = false
    public var earnedAt: Timestamp
    /// When a refund last sent it back to review (an approval cannot come before), and at which
    /// position (a review notice from before it asked about an earlier review).
    public var reviewRequestedAt: Timestamp?
    public var reviewRequestedPosition: UInt64?
    public var fulfilledAt: Timestamp?
    public var position: UInt64
    /// The inviter of a friend reward, the friend list is not kept per inviter reward.
    public var inviter: String?
    /// Position of the fact that triggered a friend reward (refunds look it up).
    public var triggerPosition: UInt64?
    public var attempts = 0
    public var roundAttempts = 0
    public var retryAt: Timestamp?
    public var lastError: String?
    public var rejectionReason: String?
    public var deliveredOutside = false
    /// Every delivery attempt, in order (the delivery history).
    public var deliveries: [DeliveryAttempt] = []

    public var isUsable: Bool {
        (status == .ready && code != nil) || status == .fulfilled
    }
}

/// One try at delivering a reward, or a delivery the owner recorded.
public struct DeliveryAttempt: Sendable {
    public enum Outcome: String, Sendable { case inFlight = "in_flight", succeeded, failed, recordedOutside = "recorded_outside" }
    public var attempt: Int
    public var startedAt: Timestamp
    public var finishedAt: Timestamp?
    public var outcome: Outcome
    public var error: String?
    public var retryAt: Timestamp?
    public var by: String?
    public var note: String?
}

public struct DeliveryRef: Sendable, Equatable {
    public var app: String
    public var program: String
    public var rewardID: String
    public init(app: String, program: String, rewardID: String) { self.app = app; self.program = program; self.rewardID = rewardID }
}

extension LedgerState {
    /// The reward a delivery reference names, as it stands.
    public func reward(_ ref: DeliveryRef) -> Reward? { apps[ref.app]?.programs[ref.program]?.rewards[ref.rewardID] }
}

public struct PendingNotification: Sendable, Equatable {
    public var position: UInt64
    public var app: String
    public var program: String
    public var kind: String
    public var rewardID: String?
    public var recipients: [String]
    public var subject: String
    public var at: Timestamp
    /// Of a sandbox program: recorded as simulated, never mailed.
    public var simulated = false
    /// Failed sends so far, and when the next try is due (nil: now).
    public var attempts = 0
    public var retryAt: Timestamp?
    /// The friend an `eligibility_review` is about.
    public var user: String?
    /// Filled in when read for sending: whether the review it asks for was decided since (then it
    /// is withdrawn, not mailed).
    public var isDecided = false
}

extension LedgerState {
    /// The enrolment an `eligibility_review` notification is about.
    public func enrollment(reviewedBy n: PendingNotification) -> Enrollment? {
        guard n.kind == "eligibility_review", let user = n.user else { return nil }
        return apps[n.app]?.programs[n.program]?.enrollments[user]
    }

    /// Whether the review a notification asks for was decided since it was requested: its reward
    /// is no longer `pending_review`, or went back to review after it (a refund: that review has a
    /// notice of its own), or its friend's eligibility is no longer `pending_review`. Other notices
    /// (a failed delivery, inventory running out) are never decided this way.
    public func isDecided(_ n: PendingNotification) -> Bool { withdrawalReason(n) != nil }

    /// Why a notification would be withdrawn now: `already_decided` (its review was decided),
    /// `superseded` (a refund sent its reward back to review after it: that review has a notice of
    /// its own), or nil (it is to be sent).
    public func withdrawalReason(_ n: PendingNotification) -> String? {
        switch n.kind {
        case "reward_review":
            guard let id = n.rewardID, let r = apps[n.app]?.programs[n.program]?.rewards[id] else { return nil }
            if r.status != .pendingReview { return "already_decided" }
            return (r.reviewRequestedPosition ?? 0) > n.position ? "superseded" : nil
        case "eligibility_review":
            guard let e = enrollment(reviewedBy: n) else { return nil }
            return e.eligibility != .pendingReview ? "already_decided" : nil
        default:
            return nil
        }
    }
}

extension Optional<String> {
    /// Equal byte for byte to `text` (store-given ids are compared as sent, not by canonical equivalence).
    func isVerbatim(_ text: String) -> Bool { self?.utf8.elementsEqual(text.utf8) ?? false }
}

extension Array {
    /// The first index whose element is not `before` (binary search: the elements that are
    /// `before` all come first, as in an ordered array).
    func partitionPoint(_ before: (Element) -> Bool) -> Int {
        var low = 0, high = count
        while low < high {
            let mid = (low + high) / 2
            if before(self[mid]) { low = mid + 1 } else { high = mid }
        }
        return low
    }
}
