import Foundation
import LedgerCodec
import ReferralLedger
import ReferralRules

/// Builds the outside call of a delivery job from its benefit and the app's settings, or
/// says, in words an owner can act on, why it cannot be made.
enum CallBuilder {
    static func call(for job: DeliveryJob, at now: Timestamp, userAgent: String) -> Result<OutgoingCall, CallError> {
        switch job.benefit["type"].stringValue {
        case "custom": return webhook(job, now, userAgent)
        case "revenuecat_entitlement": return revenueCat(job, now, userAgent)
        case let other:
            return .failure(CallError("reward \(job.rewardID) has a \(other ?? "unknown") benefit; the delivery worker only delivers custom and revenuecat_entitlement benefits"))
        }
    }

    struct CallError: Error, Equatable {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// The body a webhook receiver gets: compact JSON, keys sorted.
    static func webhookBody(_ job: DeliveryJob) -> [UInt8] {
        let body: JSONValue = [
            "reward_id": .string(job.rewardID), "app": .string(job.app), "program": .string(job.program),
            "program_version": .int(job.programVersion), "side": .string(job.side), "user": .string(job.user),
            "benefit": job.benefit, "attempt": .int(job.attempt),
        ]
        return body.bytes
    }

    static func webhook(_ job: DeliveryJob, _ now: Timestamp, _ userAgent: String) -> Result<OutgoingCall, CallError> {
        guard let text = job.webhookURL, !text.isEmpty else {
            return .failure(CallError("app \(job.app) has no webhook_url setting: set it with app.configure"))
        }
        guard let secret = job.webhookSecret, !secret.isEmpty else {
            return .failure(CallError("app \(job.app) has no webhook_secret setting: set it with app.configure"))
        }
        guard let url = httpURL(text) else {
            return .failure(CallError("app \(job.app) has a webhook_url that is not a valid http(s) URL: set it with app.configure"))
        }
        let body = webhookBody(job)
        return .success(OutgoingCall(url: url, headers: [
            ("Content-Type", "application/json"),
            ("User-Agent", userAgent),
            ("X-Referral-Signature", WebhookSignature.header(secret: secret, unixSeconds: now.unixSeconds, body: body)),
        ], body: body))
    }

    static func revenueCat(_ job: DeliveryJob, _ now: Timestamp, _ userAgent: String) -> Result<OutgoingCall, CallError> {
        guard let key = job.revenueCatAPIKey, !key.isEmpty else {
            return .failure(CallError("app \(job.app) has no revenuecat_api_key setting: set it with app.configure"))
        }
        guard let entitlement = job.benefit["entitlement"].stringValue, !entitlement.isEmpty else {
            return .failure(CallError("reward \(job.rewardID) has a revenuecat_entitlement benefit without an entitlement"))
        }
        let durationText = job.benefit["duration"].stringValue ?? ""
        guard let duration = ISODuration(durationText) else {
            return .failure(CallError("reward \(job.rewardID) has a revenuecat_entitlement duration \"\(durationText)\" that is not an ISO 8601 duration"))
        }
        var base = job.revenueCatAPIBase
        while base.hasSuffix("/") { base.removeLast() }
        let text = base + "/v1/subscribers/" + percentEncoded(job.user) + "/entitlements/" + percentEncoded(entitlement) + "/promotional"
        guard let url = httpURL(text) else {
            return .failure(CallError("app \(job.app) has a revenuecat_api_base that is not a valid http(s) URL: set it with app.configure"))
        }
        let body: JSONValue = ["end_time_ms": .int(duration.end(from: now).milliseconds)]
        return .success(OutgoingCall(url: url, headers: [
            ("Authorization", "Bearer " + key),
            ("Content-Type", "application/json"),
            ("User-Agent", userAgent),
        ], body: body.bytes))
    }

    static func httpURL(_ text: String) -> URL? {
        guard text.hasPrefix("http://") || text.hasPrefix("https://"), let url = URL(string: text), url.host != nil else { return nil }
        return url
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters (so `/`, `?`, `#`, spaces
    /// and non-ASCII in a user ID stay inside one path segment).
    /// A segment of only dots (`.`, `..`) is encoded whole, so it cannot climb the path.
    static func percentEncoded(_ s: String) -> String {
        if !s.isEmpty, s.allSatisfy({ $0 == "." }) { return String(repeating: "%2E", count: s.count) }
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            default:
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
