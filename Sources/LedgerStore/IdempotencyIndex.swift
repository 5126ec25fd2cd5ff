import LedgerCodec

/// Remembers, per app, each command `id` that appended events: the fingerprint of the
/// command (without `at`) and the result it answered. Written in the same transaction as
/// the events, so a remembered id always has its events.
public enum IdempotencyIndex {
    public static let database = "idempotency"

    public struct Entry: Sendable, Equatable {
        public var fingerprint: String
        public var result: JSONValue

        public init(fingerprint: String, result: JSONValue) {
            self.fingerprint = fingerprint
            self.result = result
        }
    }

    static func key(app: String, id: String) -> [UInt8] {
        Array(app.utf8) + [0] + Array(id.utf8)
    }

    public static func entry(app: String, id: String, _ txn: LMDBTransaction) throws -> Entry? {
        guard let bytes = try txn.get(database, key(app: app, id: id)),
              let value = try? JSONValue(parsing: bytes),
              let fingerprint = value["fingerprint"].stringValue else { return nil }
        return Entry(fingerprint: fingerprint, result: value["result"])
    }

    public static func remember(app: String, id: String, _ entry: Entry, _ txn: LMDBTransaction) throws {
        let value: JSONValue = ["fingerprint": .string(entry.fingerprint), "result": entry.result]
        try txn.put(database, key(app: app, id: id), value.bytes)
    }
}
