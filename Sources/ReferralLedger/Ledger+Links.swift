import Foundation
import LedgerCodec
import ReferralRules

/// Turning what a friend typed or tapped into an invite code (SPEC §13 links).
extension Ledger {
    /// Accepts a typed code, a share URL `https://{share_link_host}/r/{code}`, a URL on that host
    /// with a `code` query parameter, or `{app_url_scheme}://referral?code=…`. Anything that is not
    /// 4–30 letters, digits or hyphens is refused before any lookup. Answers `{"code", "program"}`
    /// (the code normalised) and never the inviter.
    public func resolve(app: String, input: String, asOf: UInt64? = nil) throws -> JSONValue {
        // Input that yields no plausible code (junk, a link to another host or scheme) is malformed (400);
        // a plausible code that is not one of the app's is unknown (404). Both are `invalid_code`.
        let junk = QueryError(code: "invalid_code", message: "that is not an invite code or a referral link: a code is 4–30 letters, digits or hyphens", status: 400)
        let invalid = QueryError(code: "invalid_code", message: "that is not an invite code or referral link of app \(QueryError.quoted(app))", status: 404)
        guard input.utf8.count <= 2048 else { throw junk }
        try Self.requireNFC([("app", app)])
        // As of a past position: the settings and codes of the log folded up to it.
        let past = try asOf.map { try Self.fold(environment, until: $0).0.apps[app] ?? { throw QueryError.unknownApp(app) }() }
        let settings = try past?.settings ?? appSettings(app)
        guard let candidate = Self.extractCode(input.trimmingCharacters(in: .whitespacesAndNewlines), host: settings.shareLinkHost,
                                               scheme: settings.appURLScheme),
              Self.isPlausible(candidate) else { throw junk }
        if let past {
            guard let code = past.codes[InviteCodes.normalize(candidate)] else { throw invalid }
            return ["code": .string(code.code), "program": .string(code.program)]
        }
        guard let record = try environment.read({ txn in
            try txn.get(ProjectionStore.codes, ProjectionStore.key(app, InviteCodes.normalize(candidate)))
        }) else { throw invalid }
        // The code as it was issued (a username code keeps its lower-case user part).
        let parts = record.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
        let program = String(decoding: parts[0], as: UTF8.self)
        let code = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : InviteCodes.normalize(candidate)
        return ["code": .string(code), "program": .string(program)]
    }

    /// 4–30 ASCII letters, digits or hyphens.
    static func isPlausible(_ code: String) -> Bool {
        (4...30).contains(code.utf8.count) && code.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 }
    }

    static func extractCode(_ input: String, host: String?, scheme: String?) -> String? {
        guard input.contains(":") || input.contains("/") else { return input }
        guard let url = URLComponents(string: input), let urlScheme = url.scheme?.lowercased() else { return nil }
        let queryCode = url.queryItems?.first { $0.name == "code" }?.value
        if urlScheme == "https" || urlScheme == "http" {
            guard let host, url.host?.lowercased() == host.split(separator: ":").first.map(String.init) else { return nil }
            let parts = url.path.split(separator: "/")
            let pathCode = parts.count == 2 && parts[0] == "r" ? String(parts[1]) : nil
            // A share path with a plausible code wins; else any `code` parameter on the host.
            if let pathCode, isPlausible(pathCode) { return pathCode }
            return queryCode ?? pathCode
        }
        if let scheme, urlScheme == scheme, url.host?.lowercased() == "referral" { return queryCode }
        return nil
    }

    /// The app's settings, secrets included (for the server's RevenueCat webhook check), read in
    /// a short read transaction: it never waits for the writer.
    public func appSettings(_ app: String) throws -> AppSettings {
        try environment.read { txn in
            guard let record = try txn.get(ProjectionStore.apps, ProjectionStore.key(app)) else { throw QueryError.unknownApp(app) }
            var s = AppSettings(app: app)
            var settings = try JSONValue(parsing: record)["settings"]
            for key in AppSettings.secretKeys { settings[key] = nil }
            s.merge(settings)
            for (key, value) in try SecretStore.of(app: app, txn) { s.setSecret(key, value) }
            return s
        }
    }
}
