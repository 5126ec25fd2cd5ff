import LedgerCodec

/// Whether a program is "accepting new referrals" (SPEC §3): the app has friend referrals
/// enabled, the program is active (and was first activated at or before the time asked about:
/// SPEC §4 rule 4, "New programs count from activation"), and the app's allowance for the time's
/// UTC month is not used up. Only new invite codes and new enrolments wait on it: enrolled friends
/// keep qualifying and earned rewards stay.
///
/// The one predicate behind `invite.create`, `referral.enroll` (which answers a used-up allowance
/// `allowance_exhausted`, the rest `not_accepting`) and the `program` query's
/// `accepting_new_referrals`. (`verify` checks the recorded decisions with its own, independent
/// reading of the rule.)
public enum AcceptingNewReferrals: Equatable, Sendable {
    case referralsOff
    case notActive(ProgramState.Status)
    /// Active, but first activated after the time asked about.
    case beforeFirstActivation(Timestamp)
    /// The app's enrolments of the month reached its `monthly_enrollment_allowance`.
    case allowanceUsed(allowance: Int, month: String)

    /// Whether the reason is the app's used-up monthly allowance (an enrolment answers it
    /// `allowance_exhausted`, after the code's own checks; the other reasons are `not_accepting`).
    public var isAllowanceUsed: Bool {
        if case .allowanceUsed = self { return true }
        return false
    }

    /// Why the program does not accept new referrals at `time`, or nil when it does. The reasons
    /// are looked at in this order.
    public static func refusal(referralsEnabled: Bool, status: ProgramState.Status, firstActivatedAt: Timestamp?,
                               allowance: Int?, enrolmentsInMonth: (String) -> Int, at time: Timestamp) -> AcceptingNewReferrals? {
        guard referralsEnabled else { return .referralsOff }
        guard status == .active, let first = firstActivatedAt else { return .notActive(status) }
        guard first <= time else { return .beforeFirstActivation(first) }
        if let allowance, enrolmentsInMonth(time.monthKey) >= allowance { return .allowanceUsed(allowance: allowance, month: time.monthKey) }
        return nil
    }

    /// The reason in words, for the refusal of a new invite code or enrolment (`what`) in `program` of `app`.
    public func message(app: String, program: String, what: String) -> String {
        switch self {
        case .referralsOff: "friend referrals are turned off for app \"\(app)\" (settings.friend_referrals_enabled)"
        case .notActive(let status): "program \"\(program)\" is \(status.rawValue), not active"
        case .beforeFirstActivation(let first): "program \"\(program)\" was first activated at \(first); \(what) dated before it does not count"
        case .allowanceUsed(let allowance, let month): "app \"\(app)\" reached its allowance of \(allowance) new enrolments for \(month)"
        }
    }
}

extension AppState {
    /// Why `program` of this app does not accept new referrals at `time` (`AcceptingNewReferrals`), or nil.
    public func acceptingRefusal(_ program: ProgramState, at time: Timestamp) -> AcceptingNewReferrals? {
        AcceptingNewReferrals.refusal(referralsEnabled: settings.friendReferralsEnabled, status: program.status,
                                      firstActivatedAt: program.firstActivatedAt,
                                      allowance: settings.monthlyEnrollmentAllowance, enrolmentsInMonth: enrollmentsIn(month:), at: time)
    }

    /// Whether `program` is accepting new referrals at `time` (SPEC §3; `AcceptingNewReferrals`).
    public func isAccepting(_ program: ProgramState, at time: Timestamp) -> Bool { acceptingRefusal(program, at: time) == nil }
}
