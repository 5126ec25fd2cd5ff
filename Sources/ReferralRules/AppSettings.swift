import LedgerCodec

/// An app's settings (SPEC §3, §11, §13). `app.configure` merges the given keys over these.
public struct AppSettings: Sendable, Equatable {
    public enum WelcomeScope: String, Sendable { case none, app, workspace }

    public var friendReferralsEnabled = false
    public var signupGraceDays: Int? = 7
    public var allowExistingInvitees = false
    public var welcomeOncePer: WelcomeScope = .none
    public var workspace: String
    public var monthlyEnrollmentAllowance: Int? = nil
    public var webhookURL: String? = nil
    public var webhookSecret: String? = nil
    public var revenueCatAPIBase = "https://api.revenuecat.com"
    public var revenueCatAPIKey: String? = nil
    public var revenueCatWebhookAuth: String? = nil
    public var shareLinkHost: String? = nil
    public var appURLScheme: String? = nil
    public var ownerEmail: String? = nil

    /// SHA-256 digests of secrets set through the log (the log records a digest, never the secret).
    public var secretDigests: [String: String] = [:]

    public init(app: String) { workspace = app }

    /// Settings that are secrets: the log records only their SHA-256 (`{"sha256": HEX}`); the
    /// values live in the ledger's `secrets` database, outside the chain.
    public static let secretKeys: Set<String> = ["webhook_secret", "revenuecat_api_key", "revenuecat_webhook_auth"]
    /// The secrets sent or compared as an HTTP header value.
    static let headerSecretKeys: Set<String> = ["revenuecat_api_key", "revenuecat_webhook_auth"]

    /// Replaces secret values by their digest marker; answers the redacted settings and the secrets
    /// (a nil value clears the secret).
    public static func redactSecrets(_ settings: JSONValue) -> (JSONValue, [String: String?]) {
        guard case .object(var o) = settings else { return (settings, [:]) }
        var secrets: [String: String?] = [:]
        for key in secretKeys {
            switch o[key] {
            case .string(let value)?:
                secrets[key] = .some(value)
                o[key] = ["sha256": .string(SHA256.hex(value))]
            case .null?:
                secrets[key] = .some(nil)
            default:
                break
            }
        }
        return (.object(o), secrets)
    }

    /// Sets a secret's value (from the ledger's secrets database).
    public mutating func setSecret(_ key: String, _ value: String?) {
        switch key {
        case "webhook_secret": webhookSecret = value
        case "revenuecat_api_key": revenueCatAPIKey = value
        case "revenuecat_webhook_auth": revenueCatWebhookAuth = value
        default: break
        }
    }

    /// The keys `app.configure` accepts.
    public static let keys: [String] = [
        "friend_referrals_enabled", "signup_grace_days", "allow_existing_invitees", "welcome_once_per", "workspace",
        "monthly_enrollment_allowance", "webhook_url", "webhook_secret", "revenuecat_api_base", "revenuecat_api_key",
        "revenuecat_webhook_auth", "share_link_host", "app_url_scheme", "owner_email",
    ]

    /// Validates a settings object; answers it normalised (what the event records).
    public static func validate(_ value: JSONValue) throws -> JSONValue {
        var r = try FieldReader(value, context: "settings")
        var out: [String: JSONValue] = [:]
        for key in r.object.keys.sorted() {
            guard keys.contains(key) else { continue }
            let v = r.value(key)!
            switch key {
            case "friend_referrals_enabled", "allow_existing_invitees":
                guard case .bool = v else { throw Rejection.invalid("settings.\(key) must be true or false") }
                out[key] = v
            case "signup_grace_days", "monthly_enrollment_allowance":
                if v.isNull { out[key] = .null; continue }
                out[key] = .int(try FieldReader.integer(v, "settings.\(key)", min: 0, max: key == "signup_grace_days" ? 36_500 : FieldReader.maximum))
            case "welcome_once_per":
                guard case .string(let s) = v, WelcomeScope(rawValue: s) != nil else {
                    throw Rejection.invalid("settings.welcome_once_per must be \"none\", \"app\" or \"workspace\"")
                }
                out[key] = v
            case "workspace":
                guard case .string(let s) = v, !s.isEmpty else { throw Rejection.invalid("settings.workspace must be a non-empty string") }
                try FieldReader.checkIdentifier(s, "settings.workspace")
                try FieldReader.checkNotBlank(s, "settings.workspace")
                out[key] = v
            case "webhook_url", "revenuecat_api_base":
                if v.isNull, key == "webhook_url" { out[key] = .null; continue }
                guard case .string(let s) = v, s.hasPrefix("http://") || s.hasPrefix("https://") else {
                    throw Rejection.invalid("settings.\(key) must be an http:// or https:// URL")
                }
                out[key] = v
            case "share_link_host":
                if v.isNull { out[key] = .null; continue }
                guard case .string(let s) = v, Self.isHost(s) else {
                    throw Rejection.invalid("settings.share_link_host must be a host name such as example.com (optionally with :port)")
                }
                out[key] = .string(s.lowercased())
            case "owner_email":
                if v.isNull { out[key] = .null; continue }
                guard case .string(let s) = v, ProgramConfig.isMailAddress(s) else {
                    throw Rejection.invalid("settings.owner_email must be one e-mail address such as owner@example.com")
                }
                out[key] = v
            case "app_url_scheme":
                if v.isNull { out[key] = .null; continue }
                guard case .string(let s) = v, let first = s.first, first.isLetter,
                      s.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "." || $0 == "-") }) else {
                    throw Rejection.invalid("settings.app_url_scheme must be a URL scheme such as myapp")
                }
                // The app's own scheme: web links go through share_link_host, and a scheme that
                // runs or reads something is no deep link.
                guard !["http", "https", "javascript", "vbscript", "data", "file", "filesystem", "about", "blob", "ftp", "mailto", "view-source", "jar", "intent"].contains(s.lowercased()) else {
                    throw Rejection.invalid("settings.app_url_scheme must be the app's own scheme such as myapp, not \(s.lowercased()): (web links use share_link_host)")
                }
                out[key] = .string(s.lowercased())
            default:
                if v.isNull { out[key] = .null; continue }
                if secretKeys.contains(key), case .object(let marker) = v, marker.count == 1,
                   let digest = marker["sha256"]?.stringValue, digest.utf8.count == 64 {
                    out[key] = v  // a secret recorded as its digest (replays of the log)
                    continue
                }
                guard case .string(let text) = v else { throw Rejection.invalid("settings.\(key) must be a string or null") }
                // An empty secret would be recorded, then read as no secret at all: null unsets one.
                if secretKeys.contains(key), text.isEmpty {
                    throw Rejection.invalid("settings.\(key) must not be empty (null removes it)")
                }
                // These two travel in an HTTP Authorization header (RevenueCat's webhooks send one,
                // our calls to its API send the other): a value with surrounding white space or a
                // control character could never be matched, or would break the header it is sent in.
                if Self.headerSecretKeys.contains(key),
                   text.first!.isWhitespace || text.last!.isWhitespace || text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                    throw Rejection.invalid("settings.\(key) goes in an HTTP Authorization header: it must not start or end with white space nor hold control characters (line breaks included); paste it again without them")
                }
                out[key] = v
            }
        }
        try r.finish()
        return .object(out)
    }

    /// Merges validated settings over these.
    public mutating func merge(_ settings: JSONValue) {
        guard case .object(let o) = settings else { return }
        for (key, v) in o {
            if Self.secretKeys.contains(key) {
                // A digest marker records that the secret was set; the value comes from the secrets
                // store (`setSecret`). A secret written in the clear (only a log altered outside the
                // ledger, or one older than its redaction, holds one) is taken as its digest too:
                // the decision state, and the snapshot written from it, never hold a secret.
                secretDigests[key] = v["sha256"].stringValue ?? v.stringValue.map { SHA256.hex($0) }
                continue
            }
            switch key {
            case "friend_referrals_enabled": friendReferralsEnabled = v.boolValue ?? false
            case "allow_existing_invitees": allowExistingInvitees = v.boolValue ?? false
            case "signup_grace_days": signupGraceDays = v.intValue.map(Int.init)
            case "monthly_enrollment_allowance": monthlyEnrollmentAllowance = v.intValue.map(Int.init)
            case "welcome_once_per": welcomeOncePer = WelcomeScope(rawValue: v.stringValue ?? "none") ?? .none
            case "workspace": workspace = v.stringValue ?? workspace
            case "webhook_url": webhookURL = v.stringValue
            case "revenuecat_api_base": revenueCatAPIBase = v.stringValue ?? revenueCatAPIBase
            case "share_link_host": shareLinkHost = v.stringValue
            case "app_url_scheme": appURLScheme = v.stringValue
            case "owner_email": ownerEmail = v.stringValue
            default: break
            }
        }
    }

    /// The settings as JSON, secrets replaced by `"set"` (for queries and the dashboard).
    public var publicJSON: JSONValue {
        func secret(_ s: String?, _ key: String) -> JSONValue { s == nil && secretDigests[key] == nil ? .null : "set" }
        return [
            "friend_referrals_enabled": .bool(friendReferralsEnabled), "signup_grace_days": .optional(signupGraceDays),
            "allow_existing_invitees": .bool(allowExistingInvitees), "welcome_once_per": .string(welcomeOncePer.rawValue),
            "workspace": .string(workspace), "monthly_enrollment_allowance": .optional(monthlyEnrollmentAllowance),
            "webhook_url": .optional(webhookURL), "webhook_secret": secret(webhookSecret, "webhook_secret"),
            "revenuecat_api_base": .string(revenueCatAPIBase), "revenuecat_api_key": secret(revenueCatAPIKey, "revenuecat_api_key"),
            "revenuecat_webhook_auth": secret(revenueCatWebhookAuth, "revenuecat_webhook_auth"), "share_link_host": .optional(shareLinkHost),
            "app_url_scheme": .optional(appURLScheme), "owner_email": .optional(ownerEmail),
        ]
    }
}

extension AppSettings {
    /// A DNS host name (labels of ASCII letters, digits and inner hyphens, 1–63 each, 253 in all),
    /// optionally followed by `:port`.
    static func isHost(_ text: String) -> Bool {
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let host = parts[0]
        if parts.count == 2 {
            guard parts[1].allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(parts[1]), (1...65535).contains(port) else { return false }
        }
        guard !host.isEmpty, host.utf8.count <= 253 else { return false }
        return host.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            (1...63).contains(label.utf8.count) && label.first != "-" && label.last != "-"
                && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        }
    }
}
