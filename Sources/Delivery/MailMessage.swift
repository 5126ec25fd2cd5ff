import Foundation
import LedgerCodec
import ReferralRules

/// The message a mail command gets on stdin for one owner notification: RFC 5322 headers
/// (`To:`, `Subject:`; sendmail `-t` reads the recipients from `To:`), then a short body
/// naming the app, the program, the kind and the reward.
enum MailMessage {
    static func compose(_ n: PendingNotification) -> [UInt8] {
        var lines: [String] = []
        // One address a line (folded), so no header line outgrows what mail servers take.
        lines.append("To: " + n.recipients.map(headerSafe).joined(separator: ",\n "))
        lines.append("Subject: " + encodedHeader("[referral-ledger] " + headerSafe(n.subject), after: "Subject: ".count))
        lines.append("MIME-Version: 1.0")
        lines.append("Content-Type: text/plain; charset=utf-8")
        lines.append("Content-Transfer-Encoding: 8bit")
        lines.append("Auto-Submitted: auto-generated")
        lines.append("")
        lines.append(n.subject)
        lines.append("")
        lines.append("App:          \(n.app)")
        lines.append("Program:      \(n.program)")
        lines.append("Kind:         \(n.kind) (\(explanation(n.kind)))")
        if let reward = n.rewardID { lines.append("Reward:       \(reward)") }
        lines.append("Recorded at:  \(n.at.description) (ledger position \(n.position))")
        lines.append("")
        lines.append(advice(n))
        lines.append("")
        lines.append("-- ")
        lines.append("Sent by the referral-ledger delivery worker.")
        return Array((lines.joined(separator: "\n") + "\n").utf8)
    }

    static func explanation(_ kind: String) -> String {
        switch kind {
        case "reward_review": return "a reward is waiting for your review"
        case "eligibility_review": return "an enrolment is waiting for an eligibility decision"
        case "delivery_failed": return "a delivery failed on every attempt of its round"
        case "inventory_empty": return "no offer codes are left"
        case "inventory_low": return "offer codes are running low"
        default: return "an owner notification"
        }
    }

    static func advice(_ n: PendingNotification) -> String {
        let reward = n.rewardID ?? "REWARD_ID"
        switch n.kind {
        case "reward_review":
            return """
            Approve it with reward.approve, reject it with reward.reject, or pick another benefit with
            reward.substitute. As commands (POST /v1/commands with an owner key, or `referral-ledger submit`):
              {"type":"reward.approve","app":\(json(n.app)),"reward_id":\(json(reward)),"by":"YOUR NAME"}
              {"type":"reward.reject","app":\(json(n.app)),"reward_id":\(json(reward)),"by":"YOUR NAME","reason":"WHY"}
            The reward, its benefit and review reason: `referral-ledger deliveries --app \(n.app) --program \(n.program)`
            (GET /v1/apps/\(n.app)/deliveries?program=\(n.program)), the evidence: `referral-ledger audit --app \(n.app) --program \(n.program)`.
            """
        case "delivery_failed":
            return """
            Fix the cause (see last_error with `referral-ledger deliveries --app \(n.app) --program \(n.program) --status failed`), then:
              {"type":"reward.retry","app":\(json(n.app)),"reward_id":\(json(reward)),"by":"YOUR NAME"}
            """
        case "eligibility_review":
            return """
            The friend named in the subject enrolled without account-creation evidence: they count as
            enrolled but neither qualify nor earn until you decide. As a command (owner key):
              {"type":"eligibility.verify","app":\(json(n.app)),"program":\(json(n.program)),"user":\(json(n.user ?? "FRIEND")),"by":"YOUR NAME","decision":"eligible"}
            ("ineligible" keeps them bound to their inviter, out of the counts). Pending enrolments:
            `referral-ledger participants --app \(n.app) --program \(n.program) --status pending_review`.
            """
        case "inventory_empty", "inventory_low":
            return "Import more codes with inventory.import for program \(n.program)."
        default:
            return "See `referral-ledger audit --app \(n.app) --program \(n.program)`."
        }
    }

    /// A JSON string literal, for the commands quoted in a message body.
    static func json(_ s: String) -> String { JSONValue.string(s).text }

    /// A header value on one line: CR, LF and other control characters become spaces, so
    /// nothing recorded in the ledger can add a header or a recipient.
    static func headerSafe(_ s: String) -> String {
        String(s.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
    }

    /// RFC 2047 `=?UTF-8?B?…?=` when the text is not plain ASCII.
    /// Long text becomes several encoded words of at most 75 characters each (RFC 2047 §2), split
    /// between characters, on folded lines of at most 76 characters: the first line also holds the
    /// header's name (`after` characters of it), each folded one a leading space.
    static func encodedHeader(_ s: String, after taken: Int = 0) -> String {
        guard s.unicodeScalars.contains(where: { !$0.isASCII }) else { return s }
        // The bytes one word may encode on a line with `used` characters before it: base64 gives 4
        // characters for 3 bytes, and "=?UTF-8?B?" with "?=" adds 12.
        func capacity(_ used: Int) -> Int { max(3, (min(75, 76 - used) - 12) / 4 * 3) }
        func word(_ bytes: [UInt8]) -> String { "=?UTF-8?B?" + Data(bytes).base64EncodedString() + "?=" }
        var words: [String] = []
        var chunk: [UInt8] = []
        for character in s {
            let bytes = Array(String(character).utf8)
            // 45 bytes on a folded line (a word of 72 characters), 39 after "Subject: ".
            if chunk.count + bytes.count > capacity(words.isEmpty ? taken : 1), !chunk.isEmpty {
                words.append(word(chunk))
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty { words.append(word(chunk)) }
        return words.joined(separator: "\n ")
    }
}
