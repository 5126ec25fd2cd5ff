import LedgerCodec

/// Remembers, per app, each command `id` that appended events: the fingerprint of the
/// command (without `at`) and the result it answered. Written in the same transaction as the
/// events, so a remembered id always has its events.
///
/// The result is kept without its events (they are in the log, at known positions): a result
/// carries every event it appended, the command included, and kept whole it often passed LMDB's
/// half-page limit and took a 4 KiB overflow page of its own. The answer to a repeated `id` splices
/// the stored event bytes back in, so it is the first result byte for byte.
///
/// Key: app, 0x00, id. Value: the 64 hex characters of the fingerprint, then either `{` and the
/// whole result's JSON (older entries), or 0x01, the first event's position (8 bytes big-endian),
/// the number of events (4 bytes big-endian) and the result's JSON with `"events":[]`.
public enum IdempotencyIndex {
    public static let database = "idempotency"

    public struct Entry: Sendable, Equatable {
        public var fingerprint: String
        /// The result's JSON; without its events when `events` names them.
        public var result: [UInt8]
        /// Where the result's events are in the log: the first position and how many.
        public var events: (first: UInt64, count: Int)?

        public init(fingerprint: String, result: [UInt8], events: (first: UInt64, count: Int)? = nil) {
            self.fingerprint = fingerprint
            self.result = result
            self.events = events
        }

        public static func == (a: Entry, b: Entry) -> Bool {
            a.fingerprint == b.fingerprint && a.result == b.result && a.events?.first == b.events?.first && a.events?.count == b.events?.count
        }
    }

    /// The key of an app's command `id`.
    public static func key(app: String, id: String) -> [UInt8] {
        Array(app.utf8) + [0] + Array(id.utf8)
    }

    public static func entry(app: String, id: String, _ txn: LMDBTransaction) throws -> Entry? {
        guard let bytes = try txn.get(database, key(app: app, id: id)), bytes.count > 64 else { return nil }
        let fingerprint = String(decoding: bytes[0..<64], as: UTF8.self)
        guard bytes[64] == 0x01, bytes.count >= 77 else { return Entry(fingerprint: fingerprint, result: Array(bytes[64...])) }
        return Entry(fingerprint: fingerprint, result: Array(bytes[77...]), events: span(decoding: bytes[65..<77]))
    }

    /// Where a command's events are, as an entry stores it: the first position (8 bytes, as the
    /// log's keys) and the count (4 bytes), big-endian.
    public static func span(first: UInt64, count: Int) -> [UInt8] {
        EventLog.key(first) + (0..<4).reversed().map { UInt8(truncatingIfNeeded: count >> ($0 * 8)) }
    }

    /// The first position and count of a span as `span(first:count:)` writes it.
    static func span(decoding bytes: some Collection<UInt8>) -> (first: UInt64, count: Int) {
        let bytes = Array(bytes)
        // The first position is written as the log's own keys are (`EventLog.key`).
        let first = bytes[0..<8].withUnsafeBytes { EventLog.position(fromKey: $0) }!
        return (first, bytes[8..<12].reduce(0) { $0 << 8 | Int($1) })
    }

    /// The span of a stored entry's events (read from the whole result in an older entry); nil when
    /// the entry cannot be read.
    public static func span(ofStored bytes: some Collection<UInt8>) -> [UInt8]? {
        let bytes = Array(bytes)
        guard bytes.count > 64 else { return nil }
        if bytes[64] == 0x01 { return bytes.count >= 77 ? Array(bytes[65..<77]) : nil }
        guard let events = (try? JSONValue(parsing: bytes[64...]))?["events"].arrayValue, let first = events.first?["position"].intValue,
              first > 0 else { return nil }
        return span(first: UInt64(first), count: events.count)
    }

    public static func remember(app: String, id: String, _ entry: Entry, _ txn: LMDBTransaction) throws {
        var value = Array(entry.fingerprint.utf8)
        if let (first, count) = entry.events {
            value.append(0x01)
            value += span(first: first, count: count)
        }
        try txn.put(database, key(app: app, id: id), value + entry.result)
    }
}
