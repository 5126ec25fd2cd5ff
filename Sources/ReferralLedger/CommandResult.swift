import LedgerCodec
import LedgerStore
import ReferralRules

/// The answer to one command (SPEC §2): `{"ok": true, "position": P, "events": [...]}`, or
/// `{"ok": false, "error": {"code", "message"}}` (with `position` and `events` when the
/// refusal was recorded), plus `duplicate` and command-specific fields.
public struct CommandResult: Sendable {
    /// The result as sent: compact JSON, keys sorted.
    public let bytes: [UInt8]
    /// Whether the command was applied (`"ok": true`), a duplicate included.
    public let ok: Bool
    /// The refusal's code (`invalid_command`, `already_enrolled`, …), nil when `ok`.
    public let errorCode: String?
    /// How many events the command appended (0 for a duplicate or an unrecorded refusal).
    public let appended: Int

    /// The result as a JSON value, to read its fields (`result.json["code"]`). Parsed from `bytes`
    /// at each call, as are the accessors below (`position`, `events`, …): a result is answered
    /// at the writer's pace and most callers only pass its bytes on. To read several fields, take
    /// `json` once.
    public var json: JSONValue { (try? JSONValue(parsing: bytes)) ?? .null }
    /// The result as text, as the CLI prints it.
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    /// The ledger position of the last event the command appended (or of the recorded refusal; or,
    /// for some duplicates, of the original event). A command accepted without appending anything
    /// (an event of a user who is not enrolled) answers the head it was decided at, so every `ok`
    /// result has SPEC §2's shape: look at `appended` to know whether it is its own.
    /// Nil for a refusal that recorded nothing (`invalid_command`, most business refusals).
    public var position: UInt64? { json["position"].intValue.map { UInt64(clamping: $0) } }
    /// Whether this answers a command already applied (a repeated `id`, an enrolment retry, a
    /// repeated `event_id`): it appended nothing.
    public var isDuplicate: Bool { json["duplicate"].boolValue == true }

    /// The refusal's code as the rules name it (`.selfReferral`, `.invalidCommand`, …), nil when `ok`.
    public var rejection: RejectionCode? { errorCode.flatMap(RejectionCode.init(rawValue:)) }
    /// The refusal's message (what is wrong and what to do), nil when `ok`.
    public var errorMessage: String? { json["error"]["message"].stringValue }
    /// The events the command appended, as stored (empty for a duplicate or an unrecorded refusal).
    public var events: [JSONValue] { json["events"].arrayValue ?? [] }
    /// The invite code an `invite.create` answered (the user's code for the program).
    public var inviteCode: String? { json["code"].stringValue }
    /// The share URL of `invite.create`'s answer (`https://{share_link_host}/r/{code}`; nil while
    /// the app has no `share_link_host`).
    public var inviteURL: String? { json["url"].stringValue }

    /// Whether the command was refused for a business reason (HTTP 409) rather than being malformed (400).
    public var isBusinessRejection: Bool { !ok && errorCode != RejectionCode.invalidCommand.rawValue && !isInternalError }
    /// Whether the ledger could not decide the command (`internal_error`, HTTP 500): nothing was
    /// recorded, and the fault is the ledger's (a bug, or a history altered outside it).
    public var isInternalError: Bool { errorCode == Self.internalErrorCode }
    static let internalErrorCode = "internal_error"

    init(bytes: [UInt8], ok: Bool, errorCode: String?, appended: Int) {
        self.bytes = bytes
        self.ok = ok
        self.errorCode = errorCode
        self.appended = appended
    }

    /// A command the ledger could not decide (`internal_error`): nothing recorded; not the
    /// client's fault (HTTP answers 500).
    static func internalError(_ message: String) -> CommandResult {
        let error: JSONValue = ["code": .string(internalErrorCode), "message": .string(message)]
        let json: JSONValue = ["ok": false, "error": error]
        return CommandResult(bytes: json.bytes, ok: false, errorCode: internalErrorCode, appended: 0)
    }

    package static func refused(_ rejection: Rejection) -> CommandResult {
        let value: JSONValue = ["ok": false, "error": rejection.json]
        return CommandResult(bytes: value.bytes, ok: false, errorCode: rejection.code.rawValue, appended: 0)
    }

    /// Builds a result; the stored events are spliced in as their exact bytes.
    /// `head`: the log's head once the command is decided. An accepted command that appended
    /// nothing (a fact about a user who is not enrolled, an activation of an active program)
    /// answers it as its `position`, so that every `ok` result has SPEC §2's shape; a duplicate
    /// answers its original event's position instead.
    static func decided(_ decision: Decision, stored: [StoredEvent], head: UInt64) -> CommandResult {
        var decision = decision
        if stored.isEmpty, decision.rejection == nil, decision.extra["position"] == nil { decision.extra["position"] = .int(Int64(head)) }
        return written(decision, stored: stored).result
    }

    /// A result, and its bytes with `"events":[]` (the form the idempotency index keeps), written once.
    static func decidedWithIndexForm(_ decision: Decision, stored: [StoredEvent]) -> (result: CommandResult, withoutEvents: [UInt8]) {
        let (result, events) = written(decision, stored: stored)
        var without = [UInt8]()
        without.reserveCapacity(result.bytes.count - events.count)
        without.append(contentsOf: result.bytes[..<events.lowerBound])
        without.append(contentsOf: result.bytes[events.upperBound...])
        return (result, without)
    }

    /// Writes a result; answers where the events array's contents are in its bytes.
    private static func written(_ decision: Decision, stored: [StoredEvent]) -> (result: CommandResult, events: Range<Int>) {
        var fields = decision.extra
        fields["ok"] = .bool(decision.rejection == nil)
        if let rejection = decision.rejection { fields["error"] = rejection.json }
        if decision.duplicate { fields["duplicate"] = true }
        if let last = stored.last?.position { fields["position"] = .int(Int64(last)) }
        var w = JSONWriter(capacity: 128 + stored.reduce(0) { $0 + $1.bytes.count })
        w.append("{")
        var keys = Array(fields.keys) + ["events"]
        keys.sort(by: JSONObject.precedes)
        var events = 0..<0
        for (n, key) in keys.enumerated() {
            if n > 0 { w.append(",") }
            w.writeString(key)
            w.append(":")
            if key == "events" {
                w.append("[")
                let start = w.bytes.count
                for (i, e) in stored.enumerated() {
                    if i > 0 { w.append(",") }
                    w.appendRaw(e.bytes)
                }
                events = start..<w.bytes.count
                w.append("]")
            } else {
                w.write(fields[key]!)
            }
        }
        w.append("}")
        let result = CommandResult(bytes: w.bytes, ok: decision.rejection == nil, errorCode: decision.rejection?.code.rawValue, appended: stored.count)
        return (result, events)
    }

    /// The first result of an `id` again, marked `duplicate`.
    static func repeated(_ first: JSONValue) -> CommandResult {
        var value = first
        value["duplicate"] = true
        let ok = value["ok"].boolValue ?? false
        return CommandResult(bytes: value.bytes, ok: ok, errorCode: value["error"]["code"].stringValue, appended: 0)
    }
}
