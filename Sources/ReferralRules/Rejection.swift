import LedgerCodec

/// Every code a command can be refused with (SPEC §2, §5, §6, §12, §13).
public enum RejectionCode: String, Sendable, CaseIterable, Equatable {
    case invalidCommand = "invalid_command"
    case idempotencyConflict = "idempotency_conflict"
    case unknownProgram = "unknown_program"
    case programExists = "program_exists"
    case unknownReward = "unknown_reward"
    case invalidTransition = "invalid_transition"
    case notEnrolled = "not_enrolled"
    case notAccepting = "not_accepting"
    /// `invite.create` found no unused code in 64 draws: the program's code format has (nearly)
    /// run out of codes. The program still accepts referrals; its `config.invites` must change.
    case codeSpaceExhausted = "code_space_exhausted"
    // Enrolment checks, in the order they run (SPEC §5).
    case invalidCode = "invalid_code"
    case codeExpired = "code_expired"
    case selfReferral = "self_referral"
    case alreadyEnrolled = "already_enrolled"
    case allowanceExhausted = "allowance_exhausted"
    case codeExhausted = "code_exhausted"
    case rateLimited = "rate_limited"
    case duplicateDevice = "duplicate_device"
    case accountNotNew = "account_not_new"
    // Tracked events and points.
    case reservedEvent = "reserved_event"
    case insufficientPoints = "insufficient_points"
}

/// A refusal: a stable code and a message that says what was wrong and what to do.
public struct Rejection: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: RejectionCode
    public var message: String

    public init(_ code: RejectionCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public static func invalid(_ message: String) -> Rejection { Rejection(.invalidCommand, message) }

    public var description: String { "\(code.rawValue): \(message)" }

    public var json: JSONValue { ["code": .string(code.rawValue), "message": .string(message)] }
}
