import HTTPServer
import LedgerCodec
import ReferralLedger

/// `POST /v1/apps/{app}/revenuecat`: RevenueCat's own webhook (SPEC §6, §10). No API key: the
/// `Authorization` header must equal the app's `revenuecat_webhook_auth` setting exactly (its value
/// as RFC 9110 §5.5 defines it: without leading or trailing spaces and tabs).
extension LedgerAPI {
    func revenueCat(app: String, _ request: HTTPRequest) async throws -> HTTPResponse {
        let ledger = self.ledger
        // The setting is a secret, kept in the secrets store (read in a short read transaction).
        let expected = try? await BlockingWork.run { try ledger.appSettings(app).revenueCatWebhookAuth }
        guard let expected = expected ?? nil, !expected.isEmpty,
              let given = request.fieldValue("authorization"), Self.sameSecret(given, Array(expected.utf8)) else {
            throw APIError.webhookUnauthorized(app)
        }
        let body = try jsonBody(request, "the webhook body")
        guard case .object = body else {
            throw APIError.invalidCommand("the webhook body must be RevenueCat's JSON object {\"api_version\", \"event\"}, not a JSON \(body.typeName)")
        }
        guard case .object = body["event"] else {
            throw APIError.invalidCommand("the webhook body has no \"event\" object")
        }
        // `at` is the event's `event_timestamp_ms` (SPEC §10); without one, the time it arrived.
        // (A value that is no time is left to the command's reader, which refuses it.)
        var command: JSONValue = ["type": "revenuecat.event", "app": .string(app), "event": body["event"]]
        if case .int(let ms) = body["event"]["event_timestamp_ms"], ms >= 0, ms <= Timestamp.latest.milliseconds {
            command["at"] = .string(Timestamp(milliseconds: ms).description)
        }
        let result = try await submit([.value(command)])[0]
        // 200 on success, duplicates included, so RevenueCat stops retrying.
        return Self.answer(result)
    }

    /// Compares without stopping at the first differing byte (only the length shows).
    static func sameSecret(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in 0..<a.count { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}
