import Foundation
import LedgerCodec

/// Keeps an app's secrets out of what the ledger records and logs: a failed call's error text
/// quotes the receiver's answer, which may echo the request (its `Authorization` header, say).
enum Redaction {
    /// `text` with each secret of 6 characters or more replaced by `[secret]`: as sent, as a JSON
    /// string would escape it, and with its tabs and line breaks as spaces (as an error line shows
    /// them). Shorter secrets are left alone (they would match ordinary words).
    static func redact(_ text: String, secrets: [String]) -> String {
        var out = text
        for secret in secrets where secret.count >= 6 {
            let escaped = String(JSONValue.string(secret).text.dropFirst().dropLast())
            let oneLine = String(secret.map { $0.isNewline || $0 == "\t" ? " " : $0 })
            for form in Set([secret, escaped, oneLine]) { out = out.replacingOccurrences(of: form, with: "[secret]") }
        }
        return out
    }
}
