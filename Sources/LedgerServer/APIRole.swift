/// What an API key may do (SPEC §10): `read` queries only; `append` (backend services) every
/// command but the owner's; `owner` everything.
public enum APIRole: String, Sendable, CaseIterable {
    case read
    case append
    case owner

    /// Whether this role may post a command of `type` (`ReferralRules.Command.isOwnerOnly`).
    /// Any role may query.
    public func maySubmit(type: String, isOwnerOnly: (String) -> Bool) -> Bool {
        switch self {
        case .read: return false
        case .append: return !isOwnerOnly(type)
        case .owner: return true
        }
    }
}
