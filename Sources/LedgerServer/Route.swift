/// The routes of the HTTP API (SPEC §10), matched on the raw path split by `/` with each
/// segment percent-decoded afterwards, so an encoded `/` (`%2F`) stays inside its segment.
enum Route: Equatable, Sendable {
    case health
    case commands
    case events
    case program(app: String, program: String)
    case programs(app: String)
    case progress(app: String, program: String, user: String)
    case participants(app: String, program: String)
    case rewards(app: String, user: String)
    case balance(app: String, user: String)
    case resolve(app: String)
    case deliveries(app: String)
    case audit(app: String)
    case revenueCat(app: String)

    /// The one method the route answers.
    var method: String {
        switch self {
        case .commands, .revenueCat: "POST"
        default: "GET"
        }
    }

    /// The route's template, e.g. `/v1/apps/{app}/users/{user}/rewards`.
    var template: String {
        switch self {
        case .health: "/healthz"
        case .commands: "/v1/commands"
        case .events: "/v1/events"
        case .program: "/v1/apps/{app}/programs/{program}"
        case .programs: "/v1/apps/{app}/programs"
        case .progress: "/v1/apps/{app}/programs/{program}/progress/{user}"
        case .participants: "/v1/apps/{app}/programs/{program}/participants"
        case .rewards: "/v1/apps/{app}/users/{user}/rewards"
        case .balance: "/v1/apps/{app}/users/{user}/balance"
        case .resolve: "/v1/apps/{app}/resolve"
        case .deliveries: "/v1/apps/{app}/deliveries"
        case .audit: "/v1/apps/{app}/audit"
        case .revenueCat: "/v1/apps/{app}/revenuecat"
        }
    }

    /// The route of `rawPath` (still percent-encoded, no query); nil when there is none.
    /// Throws `APIError` (400) when a segment is not valid percent-encoded UTF-8.
    static func match(rawPath: String) throws(APIError) -> Route? {
        guard rawPath.hasPrefix("/") else { return nil }
        let raw = rawPath.utf8.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        // Empty segments (`//`, a trailing `/`) name no route.
        guard raw.count <= 8, raw.allSatisfy({ !$0.isEmpty }) else { return nil }
        var s: [String] = []
        for segment in raw { s.append(try PercentDecoding.segment(segment)) }
        // Fixed words are compared decoded, so `/v1/%61pps/...` is `/v1/apps/...` as RFC 3986 says.
        switch s.count {
        case 1 where s[0] == "healthz": return .health
        case 2 where s[0] == "v1" && s[1] == "commands": return .commands
        case 2 where s[0] == "v1" && s[1] == "events": return .events
        default: break
        }
        guard s.count >= 4, s[0] == "v1", s[1] == "apps" else { return nil }
        let app = s[2]
        switch (s.count, s[3]) {
        case (4, "resolve"): return .resolve(app: app)
        case (4, "deliveries"): return .deliveries(app: app)
        case (4, "audit"): return .audit(app: app)
        case (4, "revenuecat"): return .revenueCat(app: app)
        case (4, "programs"): return .programs(app: app)
        case (5, "programs"): return .program(app: app, program: s[4])
        case (6, "programs") where s[5] == "participants": return .participants(app: app, program: s[4])
        case (7, "programs") where s[5] == "progress": return .progress(app: app, program: s[4], user: s[6])
        case (6, "users") where s[5] == "rewards": return .rewards(app: app, user: s[4])
        case (6, "users") where s[5] == "balance": return .balance(app: app, user: s[4])
        default: return nil
        }
    }
}
