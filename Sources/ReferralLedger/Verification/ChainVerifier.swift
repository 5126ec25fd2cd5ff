import LedgerCodec
import LedgerStore
import ReferralRules

/// One broken rule found by `verify`: where, which rule (a stable identifier), and what to do.
public struct Violation: Sendable, Equatable {
    public var position: UInt64
    public var rule: String
    public var message: String

    public init(position: UInt64, rule: String, message: String) {
        self.position = position
        self.rule = rule
        self.message = message
    }

    public var json: JSONValue { ["position": .int(Int64(position)), "rule": .string(rule), "message": .string(message)] }
}

/// Checks the hash chain value by value: positions 1, 2, … with no gap, each value a JSON
/// event, each `prev_hash` the SHA-256 of the previous value's exact bytes (SPEC §9).
public struct ChainVerifier {
    public private(set) var violations: [Violation] = []
    public private(set) var count: UInt64 = 0
    public private(set) var lastHash = SHA256.zeroHex
    private var expected: UInt64 = 1
    /// Whether every value so far came at its position and could be read as an event: then a
    /// fold of the events read is a fold of the whole log.
    public private(set) var readEveryValue = true
    /// Stop collecting after this many (the report says so).
    public var limit = 1000

    public init() {}

    mutating func report(_ position: UInt64, _ rule: String, _ message: String) {
        if violations.count < limit { violations.append(Violation(position: position, rule: rule, message: message)) }
    }

    /// Checks the next value; answers the parsed event when it could be read.
    @discardableResult
    public mutating func check(key: UInt64?, value: [UInt8]) -> StoredEvent? {
        check(ExaminedValue(key: key, value: value))
    }

    /// Checks the next value, already examined on its own (see `ExaminedValue`), against the
    /// values before it; answers the parsed event when it could be read.
    @discardableResult
    public mutating func check(_ examined: ExaminedValue) -> StoredEvent? {
        // An export line has no key: its value's own position stands for it, so a missing line is
        // one gap, not every later line out of place.
        let position = examined.key ?? examined.event?.position ?? expected
        defer {
            lastHash = examined.hash
            expected = position == .max ? .max : position + 1
            count += 1
        }
        if position != expected {
            readEveryValue = false
            report(position, "chain.gap", "expected position \(expected) but found \(position): events are missing or out of order")
        }
        guard let event = examined.event else {
            readEveryValue = false
            report(position, "chain.format", "the value is not a ledger event: \(examined.formatError ?? "unreadable")")
            return nil
        }
        if event.position != position {
            report(position, "chain.position", "the value says position \(event.position) but is stored at \(position)")
        }
        if event.prevHash != lastHash {
            report(position, "chain.prev_hash", "prev_hash does not match the SHA-256 of the event before it: the history was altered")
        }
        if !examined.isCanonical {
            report(position, "chain.canonical", "the value is not in canonical form (compact JSON, sorted keys)")
        }
        return event
    }

    /// Checks the recorded head against the last value.
    public mutating func checkHead(_ head: ChainHead) {
        if head.position != count {
            report(head.position, "chain.head_position", "meta says head_position \(head.position) but the log holds \(count) events")
        } else if head.hash != (count == 0 ? SHA256.zeroHex : lastHash) {
            report(head.position, "chain.head_hash", "meta head_hash does not match the SHA-256 of the last event")
        }
    }
}

/// What the chain check learns of one stored value on its own: its event, whether its bytes are
/// canonical, and its SHA-256. Independent of every other value, so a long verify examines the
/// next page on a second core while the rules run on this one.
public struct ExaminedValue: Sendable {
    public let key: UInt64?
    let event: StoredEvent?
    let formatError: String?
    let isCanonical: Bool
    let hash: String
    /// The command the event carries (the first event of each command does), read ahead for the
    /// replay; nil when there is none or it cannot be read (the replay then reports why).
    let command: Command?
    /// An identifier of the event not in Unicode NFC (the ledger never records one: it would
    /// compare equal to the NFC spelling in the rules and differ in every byte-keyed index).
    let unnormalized: String?

    public init(key: UInt64?, value: [UInt8]) {
        self.key = key
        hash = SHA256.hex(value)
        do {
            (event, isCanonical) = try StoredEvent.parsingCheckingForm(value)
            formatError = nil
        } catch {
            event = nil
            isCanonical = false
            formatError = error.message
        }
        if let event, !event.data["command"].isNull {
            command = try? Ledger.recordedCommand(event.data["command"], at: event.at)
        } else {
            command = nil
        }
        unnormalized = event.flatMap { e in
            // A RevenueCat event's id is RevenueCat's, kept as sent (like its whole body).
            var data = e.data
            if data["source"] == "revenuecat" { data["event_id"] = .null }
            return Command.unnormalizedIdentifier(data, root: "data")?.message
        }
    }
}
