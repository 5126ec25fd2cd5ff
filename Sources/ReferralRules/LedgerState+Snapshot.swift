import LedgerCodec

/// The decision state as bytes, so that a writer opening a long ledger loads it instead of folding
/// the whole log again (the storage side is `StateSnapshot` in ReferralLedger). Every stored
/// field of the state is written, in a fixed order, with no field names; dictionaries and sets in
/// key order, so one state always gives the same bytes, whichever process wrote them; configurations and
/// benefits as their JSON (read back by the same code that reads them from events). The scratch of
/// a decision in progress is not written: it is reset by every decision. Tests compare a state
/// read back with the fold it was written from, field by field, for every fixture history.
extension LedgerState {
    /// Bumped with any change of what is written: a snapshot of another format is not read (the
    /// log is folded instead).
    public static let snapshotFormat: UInt64 = 3

    /// The state as snapshot bytes.
    public func snapshotBytes() -> [UInt8] {
        var w = BinaryWriter(capacity: 1 << 20)
        w.write(Self.snapshotFormat)
        w.write(head)
        w.write(inKeyOrder: apps) { w, e in e.value.write(to: &w) }
        w.write(inKeyOrder: deliveryQueue) { w, entry in
            w.write(entry.key)
            w.write(entry.value.app); w.write(entry.value.program); w.write(entry.value.rewardID)
        }
        w.write(inKeyOrder: pendingNotifications) { w, e in e.value.write(to: &w) }
        return w.bytes
    }

    /// A state read back from `snapshotBytes()`; throws on bytes of another format or cut short.
    public init(snapshot bytes: [UInt8]) throws {
        var r = BinaryReader(bytes)
        let format = try r.readUInt64()
        guard format == Self.snapshotFormat else { throw r.failure("snapshot format \(format), this version reads \(Self.snapshotFormat)") }
        self.init()
        head = try r.readUInt64()
        apps = try r.readKeyed(by: \.name) { try AppState(from: &$0) }
        let queued = try r.readCount()
        deliveryQueue.reserveCapacity(queued)
        for _ in 0..<queued {
            let key = try r.readString()
            deliveryQueue[key] = DeliveryRef(app: try r.readString(), program: try r.readString(), rewardID: try r.readString())
        }
        pendingNotifications = try r.readKeyed(by: \.position) { try PendingNotification(from: &$0) }
        guard r.isAtEnd else { throw r.failure("bytes are left after the state") }
    }
}

// MARK: - Field helpers

extension BinaryWriter {
    mutating func write(_ t: Timestamp) { write(t.milliseconds) }
    mutating func write(_ t: Timestamp?) { write(t) { $0.write($1) } }
    mutating func write(_ s: String?) { write(s) { $0.write($1) } }
    mutating func write(_ n: UInt64?) { write(n) { $0.write($1) } }
    mutating func write(_ n: Int?) { write(n) { $0.write($1) } }
    mutating func write(json: JSONValue) { write(bytes: json.bytes) }
    mutating func write(_ strings: [String]) { write(each: strings) { $0.write($1) } }
    mutating func write(_ strings: Set<String>) { write(each: strings.sorted()) { $0.write($1) } }
}

extension BinaryReader {
    mutating func readTimestamp() throws -> Timestamp { Timestamp(milliseconds: try readInt64()) }
    mutating func readOptionalTimestamp() throws -> Timestamp? { try readOptional { try $0.readTimestamp() } }
    mutating func readOptionalString() throws -> String? { try readOptional { try $0.readString() } }
    mutating func readOptionalUInt64() throws -> UInt64? { try readOptional { try $0.readUInt64() } }
    mutating func readOptionalInt() throws -> Int? { try readOptional { try $0.readInt() } }
    mutating func readStrings() throws -> [String] { try readArray { try $0.readString() } }
    mutating func readStringSet() throws -> Set<String> {
        let count = try readCount()
        var set = Set<String>(minimumCapacity: count)
        for _ in 0..<count { set.insert(try readString()) }
        return set
    }
    mutating func readJSON() throws -> JSONValue {
        let bytes = try readBytes()
        do { return try JSONParser.parse(bytes) } catch { throw failure("bad JSON in the snapshot: \(error)") }
    }
    /// A dictionary of values each read by `item` and keyed by what `key` says of it (written as
    /// `write(inKeyOrder:)` with each entry's value alone).
    mutating func readKeyed<K: Hashable, V>(by key: (V) -> K, _ item: (inout BinaryReader) throws -> V) throws -> [K: V] {
        try readDictionary { r in
            let value = try item(&r)
            return (key(value), value)
        }
    }

    /// A dictionary of `count` entries, each read by `entry`; a key given twice is refused (the
    /// snapshot is not one this build wrote from a consistent state).
    mutating func readDictionary<K: Hashable, V>(_ entry: (inout BinaryReader) throws -> (K, V)) throws -> [K: V] {
        let count = try readCount()
        var dictionary = [K: V](minimumCapacity: count)
        for _ in 0..<count {
            let (k, v) = try entry(&self)
            if dictionary.updateValue(v, forKey: k) != nil { throw failure("a key is written twice") }
        }
        return dictionary
    }
}

// MARK: - Apps

extension AppState {
    func write(to w: inout BinaryWriter) {
        w.write(name)
        settings.write(to: &w)
        w.write(inKeyOrder: programs) { w, e in e.value.write(to: &w) }
        w.write(programOrder)
        w.write(inKeyOrder: accountCreated) { w, e in w.write(e.key); w.write(e.value.at); w.write(e.value.evidence) }
        // Each code under its key, the normalised text the fold keyed it by.
        w.write(inKeyOrder: codes) { w, e in
            let c = e.value
            w.write(e.key)
            w.write(c.code); w.write(c.program); w.write(c.inviter); w.write(c.issuedAt); w.write(c.position); w.write(c.enrollments)
        }
        w.write(inKeyOrder: enrollmentsByMonth) { w, e in w.write(e.key); w.write(e.value) }
        w.write(inKeyOrder: devices) { w, e in w.write(e.key); w.write(e.value) }
        w.write(inKeyOrder: trackedEventIDs) { w, e in w.write(e.key); w.write(e.value) }
        w.write(each: revenueCatEventIDs.sorted { $0.key.lexicographicallyPrecedes($1.key) }) { w, e in w.write(bytes: e.key); w.write(e.value) }
        w.write(inKeyOrder: friendPrograms) { w, e in w.write(e.key); w.write(e.value) }
        w.write(inKeyOrder: facts) { w, e in
            w.write(e.key)
            w.write(inKeyOrder: e.value.byName) { w, named in
                w.write(named.key)
                w.write(each: named.value) { w, f in f.write(to: &w) }
            }
        }
        w.write(welcomed)
        w.write(inKeyOrder: points) { w, e in w.write(e.key); w.write(e.value.earned); w.write(e.value.spent) }
        w.write(inKeyOrder: rewardPrograms) { w, e in w.write(e.key); w.write(e.value) }
        w.write(offerCodesSeen)
        w.write(knownUsers)
    }

    init(from r: inout BinaryReader) throws {
        self.init(name: try r.readString())
        settings = try AppSettings(from: &r, app: name)
        programs = try r.readKeyed(by: \.key) { try ProgramState(from: &$0) }
        programOrder = try r.readStrings()
        accountCreated = try r.readDictionary { r in (try r.readString(), (at: try r.readTimestamp(), evidence: try r.readString())) }
        codes = try r.readDictionary { r in
            (try r.readString(), InviteCode(code: try r.readString(), program: try r.readString(), inviter: try r.readString(),
                                            issuedAt: try r.readTimestamp(), position: try r.readUInt64(), enrollments: try r.readInt()))
        }
        enrollmentsByMonth = try r.readDictionary { r in (try r.readString(), try r.readInt()) }
        devices = try r.readDictionary { r in (try r.readString(), try r.readString()) }
        trackedEventIDs = try r.readDictionary { r in (try r.readString(), try r.readUInt64()) }
        revenueCatEventIDs = try r.readDictionary { r in (try r.readBytes(), try r.readUInt64()) }
        friendPrograms = try r.readDictionary { r in (try r.readString(), try r.readStrings()) }
        facts = try r.readDictionary { r in
            let user = try r.readString()
            let byName: [String: [Fact]] = try r.readDictionary { r in (try r.readString(), try r.readArray { try Fact(from: &$0) }) }
            return (user, UserFacts(byName: byName))
        }
        welcomed = try r.readStringSet()
        points = try r.readDictionary { r in
            let user = try r.readString()
            var balance = PointsBalance()
            balance.earned = try r.readInt64()
            balance.spent = try r.readInt64()
            return (user, balance)
        }
        rewardPrograms = try r.readDictionary { r in (try r.readString(), try r.readString()) }
        offerCodesSeen = try r.readStringSet()
        knownUsers = try r.readStringSet()
    }
}

extension AppSettings {
    func write(to w: inout BinaryWriter) {
        w.write(friendReferralsEnabled)
        w.write(signupGraceDays)
        w.write(allowExistingInvitees)
        w.write(welcomeOncePer.rawValue)
        w.write(workspace)
        w.write(monthlyEnrollmentAllowance)
        w.write(webhookURL)
        w.write(webhookSecret)
        w.write(revenueCatAPIBase)
        w.write(revenueCatAPIKey)
        w.write(revenueCatWebhookAuth)
        w.write(shareLinkHost)
        w.write(appURLScheme)
        w.write(ownerEmail)
        w.write(inKeyOrder: secretDigests) { w, e in w.write(e.key); w.write(e.value) }
    }

    init(from r: inout BinaryReader, app: String) throws {
        self.init(app: app)
        friendReferralsEnabled = try r.readBool()
        signupGraceDays = try r.readOptionalInt()
        allowExistingInvitees = try r.readBool()
        welcomeOncePer = try r.readCase(WelcomeScope.self)
        workspace = try r.readString()
        monthlyEnrollmentAllowance = try r.readOptionalInt()
        webhookURL = try r.readOptionalString()
        webhookSecret = try r.readOptionalString()
        revenueCatAPIBase = try r.readString()
        revenueCatAPIKey = try r.readOptionalString()
        revenueCatWebhookAuth = try r.readOptionalString()
        shareLinkHost = try r.readOptionalString()
        appURLScheme = try r.readOptionalString()
        ownerEmail = try r.readOptionalString()
        secretDigests = try r.readDictionary { r in (try r.readString(), try r.readString()) }
    }
}

extension Fact {
    func write(to w: inout BinaryWriter) {
        w.write(name); w.write(at); w.write(position)
        w.write(transactionID); w.write(originalTransactionID); w.write(environment); w.write(revoked)
    }

    init(from r: inout BinaryReader) throws {
        self.init(name: try r.readString(), at: try r.readTimestamp(), position: try r.readUInt64(), transactionID: try r.readOptionalString(),
                  originalTransactionID: try r.readOptionalString(), environment: try r.readOptionalString(), revoked: try r.readBool())
    }
}

// MARK: - Programs

extension ProgramState {
    func write(to w: inout BinaryWriter) {
        w.write(key)
        w.write(environment.rawValue)
        w.write(status.rawValue)
        w.write(each: versions) { w, config in w.write(json: config.json) }
        w.write(firstActivatedAt)
        w.write(createdAt)
        w.write(changedAt)
        w.write(inKeyOrder: invites) { w, e in w.write(e.key); w.write(e.value) }
        // The three largest, in the order the fold kept them in (no sort).
        w.write(enrollments, inOrderOf: enrollmentOrder) { w, e in e.value.write(to: &w) }
        w.write(enrollmentOrder)
        w.write(inviters, inOrderOf: inviterOrder) { w, e in w.write(e.key); e.value.write(to: &w) }
        w.write(inviterOrder)
        w.write(rewards, inOrderOf: rewardOrder) { w, e in e.value.write(to: &w) }
        w.write(rewardOrder)
        w.write(inKeyOrder: tallies) { w, e in
            w.write(e.key)
            let t = e.value
            w.write(t.inviterEarned); w.write(t.fulfilled); w.write(t.usable); w.write(t.pendingApproval); w.write(t.pendingDelivery)
        }
        w.write(inKeyOrder: inventory) { w, e in w.write(e.key); e.value.write(to: &w) }
        awaitingInventory.write(to: &w)
        w.write(counts.invites); w.write(counts.enrolled); w.write(counts.pendingReview)
        w.write(counts.ineligible); w.write(counts.qualified); w.write(counts.withheld)
        w.write(inKeyOrder: counts.rewardsByStatus) { w, e in w.write(e.key); w.write(e.value) }
    }

    init(from r: inout BinaryReader) throws {
        let key = try r.readString()
        let environment = try r.readCase(Command.Environment.self)
        let status = try r.readCase(Status.self)
        let versions = try r.readArray { r in
            let json = try r.readJSON()
            do { return try ProgramConfig(json: json) } catch { throw r.failure("bad program config in the snapshot: \(error)") }
        }
        guard !versions.isEmpty else { throw r.failure("program \(key) has no version") }
        let firstActivatedAt = try r.readOptionalTimestamp()
        self.init(key: key, environment: environment, status: status, versions: versions, firstActivatedAt: firstActivatedAt,
                  createdAt: try r.readTimestamp(), changedAt: try r.readTimestamp())
        invites = try r.readDictionary { r in (try r.readString(), try r.readString()) }
        enrollments = try r.readKeyed(by: \.friend) { try Enrollment(from: &$0) }
        enrollmentOrder = try r.readStrings()
        inviters = try r.readDictionary { r in (try r.readString(), try InviterState(from: &r)) }
        inviterOrder = try r.readStrings()
        rewards = try r.readKeyed(by: \.id) { try Reward(from: &$0) }
        rewardOrder = try r.readStrings()
        tallies = try r.readDictionary { r in
            let recipient = try r.readString()
            var t = RewardTally()
            t.inviterEarned = try r.readInt(); t.fulfilled = try r.readInt(); t.usable = try r.readInt()
            t.pendingApproval = try r.readInt(); t.pendingDelivery = try r.readInt()
            return (recipient, t)
        }
        inventory = try r.readDictionary { r in (try r.readString(), try OfferInventory(from: &r)) }
        awaitingInventory = try WaitingList(from: &r)
        counts.invites = try r.readInt(); counts.enrolled = try r.readInt(); counts.pendingReview = try r.readInt()
        counts.ineligible = try r.readInt(); counts.qualified = try r.readInt(); counts.withheld = try r.readInt()
        counts.rewardsByStatus = try r.readDictionary { r in (try r.readString(), try r.readInt()) }
    }
}

extension Enrollment {
    func write(to w: inout BinaryWriter) {
        w.write(friend); w.write(inviter); w.write(code); w.write(version); w.write(at); w.write(position)
        w.write(eligibility.rawValue); w.write(qualified); w.write(qualifiedBy); w.write(friendRewardID); w.write(friendWithheld)
    }

    init(from r: inout BinaryReader) throws {
        self.init(friend: try r.readString(), inviter: try r.readString(), code: try r.readString(), version: try r.readInt(),
                  at: try r.readTimestamp(), position: try r.readUInt64(), eligibility: try r.readCase(Eligibility.self),
                  qualified: try r.readBool(), qualifiedBy: try r.readOptionalUInt64(), friendRewardID: try r.readOptionalString(),
                  friendWithheld: try r.readBool())
    }
}

extension InviterState {
    func write(to w: inout BinaryWriter) {
        w.write(friends); w.write(qualified); w.write(enrolledCount)
        w.write(each: enrollmentTimes) { w, t in w.write(t) }
        w.write(numericSlots); w.write(milestones); w.write(rewardIDs)
    }

    init(from r: inout BinaryReader) throws {
        self.init()
        friends = try r.readStrings()
        qualified = try r.readStringSet()
        enrolledCount = try r.readInt()
        enrollmentTimes = try r.readArray { try $0.readTimestamp() }
        numericSlots = try r.readInt()
        milestones = try r.readStringSet()
        rewardIDs = try r.readStrings()
    }
}

extension OfferInventory {
    func write(to w: inout BinaryWriter) {
        w.write(each: codes) { w, c in w.write(c.code); w.write(c.expiresAt) }
        w.write(next)
        w.write(each: handedOutAhead.sorted()) { w, i in w.write(i) }
        w.write(each: passed) { w, i in w.write(i) }
        w.write(passedUntil)
        w.write(lowWarned)
        w.write(inKeyOrder: expiringAvailable) { w, e in w.write(e.key); w.write(e.value) }
    }

    init(from r: inout BinaryReader) throws {
        self.init()
        codes = try r.readArray { r in Command.OfferCode(code: try r.readString(), expiresAt: try r.readOptionalTimestamp()) }
        next = try r.readInt()
        handedOutAhead = Set(try r.readArray { try $0.readInt() })
        passed = try r.readArray { try $0.readInt() }
        passedUntil = try r.readOptionalTimestamp()
        lowWarned = try r.readBool()
        expiringAvailable = try r.readDictionary { r in (try r.readTimestamp(), try r.readInt()) }
    }
}

// MARK: - Rewards and notifications

extension Reward {
    func write(to w: inout BinaryWriter) {
        w.write(id); w.write(program); w.write(programVersion); w.write(side.rawValue); w.write(recipient)
        w.write(milestoneID); w.write(slot); w.write(threshold); w.write(json: benefit.json); w.write(status.rawValue)
        w.write(reviewReason); w.write(code); w.write(codeExpiresAt); w.write(simulated); w.write(refundFlagged)
        w.write(refundedInFlight); w.write(earnedAt); w.write(reviewRequestedAt); w.write(reviewRequestedPosition)
        w.write(fulfilledAt); w.write(position); w.write(inviter); w.write(triggerPosition); w.write(attempts)
        w.write(roundAttempts); w.write(retryAt); w.write(lastError); w.write(rejectionReason); w.write(deliveredOutside)
        w.write(each: deliveries) { w, d in
            w.write(d.attempt); w.write(d.startedAt); w.write(d.finishedAt); w.write(d.outcome.rawValue)
            w.write(d.error); w.write(d.retryAt); w.write(d.by); w.write(d.note)
        }
    }

    init(from r: inout BinaryReader) throws {
        let id = try r.readString(), program = try r.readString(), programVersion = try r.readInt()
        let side = try r.readCase(Command.Side.self), recipient = try r.readString()
        let milestoneID = try r.readOptionalString(), slot = try r.readString(), threshold = try r.readOptionalInt()
        let benefitJSON = try r.readJSON()
        let benefit: Benefit
        do { benefit = try Benefit(json: benefitJSON, context: "snapshot") } catch { throw r.failure("bad benefit in the snapshot: \(error)") }
        self.init(id: id, program: program, programVersion: programVersion, side: side, recipient: recipient, milestoneID: milestoneID,
                  slot: slot, threshold: threshold, benefit: benefit, status: try r.readCase(Status.self), reviewReason: try r.readOptionalString(),
                  code: try r.readOptionalString(), codeExpiresAt: try r.readOptionalTimestamp(), simulated: try r.readBool(),
                  refundFlagged: try r.readBool(), refundedInFlight: try r.readBool(), earnedAt: try r.readTimestamp(),
                  reviewRequestedAt: try r.readOptionalTimestamp(), reviewRequestedPosition: try r.readOptionalUInt64(),
                  fulfilledAt: try r.readOptionalTimestamp(), position: try r.readUInt64(), inviter: try r.readOptionalString(),
                  triggerPosition: try r.readOptionalUInt64(), attempts: try r.readInt(), roundAttempts: try r.readInt(),
                  retryAt: try r.readOptionalTimestamp(), lastError: try r.readOptionalString(), rejectionReason: try r.readOptionalString(),
                  deliveredOutside: try r.readBool())
        deliveries = try r.readArray { r in
            DeliveryAttempt(attempt: try r.readInt(), startedAt: try r.readTimestamp(), finishedAt: try r.readOptionalTimestamp(),
                            outcome: try r.readCase(DeliveryAttempt.Outcome.self), error: try r.readOptionalString(),
                            retryAt: try r.readOptionalTimestamp(), by: try r.readOptionalString(), note: try r.readOptionalString())
        }
    }
}

extension PendingNotification {
    func write(to w: inout BinaryWriter) {
        w.write(position); w.write(app); w.write(program); w.write(kind); w.write(rewardID); w.write(recipients)
        w.write(subject); w.write(at); w.write(simulated); w.write(attempts); w.write(retryAt); w.write(user); w.write(isDecided)
    }

    init(from r: inout BinaryReader) throws {
        self.init(position: try r.readUInt64(), app: try r.readString(), program: try r.readString(), kind: try r.readString(),
                  rewardID: try r.readOptionalString(), recipients: try r.readStrings(), subject: try r.readString(), at: try r.readTimestamp(),
                  simulated: try r.readBool(), attempts: try r.readInt(), retryAt: try r.readOptionalTimestamp(), user: try r.readOptionalString(),
                  isDecided: try r.readBool())
    }
}
