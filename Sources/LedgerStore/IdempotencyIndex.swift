import LedgerCodec

/// Remembers, per app, each command `id` that appended events: the fingerprint of the
/// command (without `at`) and the exact result it answered. Written in the same transaction
/// as the events, so a remembered id always has its events.
///
/// Key: app, 0x00, id. Value: the 64 hex characters of the fingerprint, then the result's JSON bytes.
public enum IdempotencyIndex {
    public static let database = "idempotency"

    public struct Entry: Sendable, Equatable {
        public var fingerprint: String
        public var result: [UInt8]

        public init(fingerprint: String, result: [UInt8]) {
            self.fingerprint = fingerprint
            self.result = result
        }
    }

    static func key(app: String, id: String) -> [UInt8] {
        Array(app.utf8) + [0] + Array(id.utf8)
    }

    public static func entry(app: String, id: String, _ txn: LMDBTransaction) throws -> Entry? {
        guard let bytes = try txn.get(database, key(app: app, id: id)), bytes.count >= 64 else { return nil }
        return Entry(fingerprint: String(decoding: bytes[0..<64], as: UTF8.self), result: Array(bytes[64...]))
    }

    public static func remember(app: String, id: String, _ entry: Entry, _ txn: LMDBTransaction) throws {
        try txn.put(database, key(app: app, id: id), Array(entry.fingerprint.utf8) + entry.result)
    }
}
