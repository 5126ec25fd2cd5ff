import LedgerCodec
import LedgerStore

/// Secret app settings (webhook secret, RevenueCat API key and webhook auth), kept in the
/// `secrets` database outside the hash chain: the log records only their SHA-256, so exports
/// and the event API never reveal them. Written in the same transaction as the
/// `app.configured` event that records their digest. Not a projection: `rebuild` keeps it.
enum SecretStore {
    static let database = "secrets"

    static func save(app: String, _ values: [String: String?], _ txn: LMDBTransaction) throws {
        for (key, value) in values {
            let k = Array(app.utf8) + [0] + Array(key.utf8)
            if let value { try txn.put(database, k, Array(value.utf8)) } else { try txn.delete(database, k) }
        }
    }

    /// Every app's secrets.
    static func all(_ txn: LMDBTransaction) throws -> [String: [String: String]] {
        var out: [String: [String: String]] = [:]
        try txn.scan(database) { k, v in
            guard let zero = k.firstIndex(of: 0) else { return true }
            let app = String(decoding: UnsafeRawBufferPointer(rebasing: k[..<zero]), as: UTF8.self)
            let key = String(decoding: UnsafeRawBufferPointer(rebasing: k[(zero + 1)...]), as: UTF8.self)
            out[app, default: [:]][key] = String(decoding: v, as: UTF8.self)
            return true
        }
        return out
    }

    static func of(app: String, _ txn: LMDBTransaction) throws -> [String: String] {
        var out: [String: String] = [:]
        let prefix = Array(app.utf8) + [0]
        try txn.scan(database, from: prefix) { k, v in
            guard k.starts(with: prefix) else { return false }
            out[String(decoding: UnsafeRawBufferPointer(rebasing: k[prefix.count...]), as: UTF8.self)] = String(decoding: v, as: UTF8.self)
            return true
        }
        return out
    }
}
