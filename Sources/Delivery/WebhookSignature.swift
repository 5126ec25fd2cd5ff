import LedgerCodec

/// The `X-Referral-Signature` header of custom-benefit webhooks (SPEC §11):
/// `t=UNIX_SECONDS,v1=HEX`, HEX being the HMAC-SHA256 of `"{t}.{body}"` under the app's `webhook_secret`.
public enum WebhookSignature {
    /// The header value for `body` sent at `unixSeconds`.
    public static func header(secret: String, unixSeconds: Int64, body: [UInt8]) -> String {
        "t=\(unixSeconds),v1=\(hex(secret: secret, unixSeconds: unixSeconds, body: body))"
    }

    /// The lowercase hex HMAC of `"{t}.{body}"`.
    public static func hex(secret: String, unixSeconds: Int64, body: [UInt8]) -> String {
        SHA256.hmacHex(key: Array(secret.utf8), message: Array("\(unixSeconds).".utf8) + body)
    }

    /// What a receiver does: parses the header, recomputes the HMAC over `t.body`, compares in
    /// constant time, and refuses a `t` more than `tolerance` seconds from `now`.
    public static func verify(header: String, body: [UInt8], secret: String, now: Int64, tolerance: Int64 = 300) -> Bool {
        var t: Int64?
        var candidates: [String] = []
        for part in header.split(separator: ",") {
            let pieces = part.split(separator: "=", maxSplits: 1)
            guard pieces.count == 2 else { continue }
            let key = pieces[0].trimmingSpaces, value = pieces[1].trimmingSpaces
            if key == "t" { t = Int64(value) } else if key == "v1" { candidates.append(value) }
        }
        guard let t, abs(now - t) <= tolerance else { return false }
        let expected = Array(hex(secret: secret, unixSeconds: t, body: body).utf8)
        var matched = false
        for candidate in candidates where constantTimeEqual(expected, Array(candidate.lowercased().utf8)) { matched = true }
        return matched
    }

    /// Compares without stopping at the first difference (the length is not secret).
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var diff: UInt8 = 0
        for i in a.indices { diff |= a[i] ^ b[i] }
        return diff == 0
    }
}

extension Substring {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
