import Foundation
import LedgerCodec

/// The server's API keys and their roles, read from the operator's keys file: a JSON object
/// mapping each key to `"append"`, `"owner"` or `"read"`.
///
/// Keys are held only as SHA-256 digests, so looking one up compares digests (no early exit on
/// the first differing byte of a secret) and a key never sits in memory beyond the load.
public struct APIKeys: Sendable {
    private let roles: [String: APIRole]

    /// Why a keys file cannot be used; the message names the file and the problem.
    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// No keys: every route that needs one answers 401.
    public static let none = APIKeys(digests: [:])

    private init(digests: [String: APIRole]) { roles = digests }

    /// Keys given in code (tests, embedding servers).
    public init(_ keys: [String: APIRole]) throws {
        var digests: [String: APIRole] = [:]
        for (key, role) in keys {
            try Self.check(key, source: "keys")
            digests[SHA256.hex(key)] = role
        }
        roles = digests
    }

    /// Reads a keys file's bytes; `source` names it in error messages.
    public init(json bytes: [UInt8], source: String) throws {
        let value: JSONValue
        do { value = try JSONValue(parsing: bytes) } catch {
            // A duplicate's message would quote the key, a secret: its place is enough.
            let reason = error.reason.hasPrefix("duplicate key") ? "invalid JSON at byte \(error.offset): a key appears twice" : "\(error)"
            throw Invalid(message: "\(source) is not valid JSON (\(reason)); it must be an object mapping each API key to \"append\", \"owner\" or \"read\"")
        }
        guard case .object(let object) = value else {
            throw Invalid(message: "\(source) must hold a JSON object mapping each API key to \"append\", \"owner\" or \"read\", not a JSON \(value.typeName)")
        }
        var keys: [String: APIRole] = [:]
        for key in object.keys.sorted() {
            guard let name = object[key]?.stringValue, let role = APIRole(rawValue: name) else {
                // The key itself is a secret: name it by position in sorted order, never by value.
                let index = object.keys.sorted().firstIndex(of: key)! + 1
                // Nor its value: a file with key and role swapped would put the key in the log.
                throw Invalid(message: "\(source): key #\(index) (in sorted order) has no known role (its value is not shown: it may be a key); roles are \"append\", \"owner\" and \"read\"")
            }
            keys[key] = role
        }
        do { try self.init(keys) } catch let invalid as Invalid {
            throw Invalid(message: "\(source): \(invalid.message)")
        }
    }

    /// Reads the keys file at `path`.
    public init(contentsOfFile path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Invalid(message: "cannot read the keys file \(path)")
        }
        try self.init(json: Array(data), source: "the keys file \(path)")
    }

    /// How many keys there are.
    public var count: Int { roles.count }

    /// The role of `key`, nil when it is not a key of this server.
    public func role(of key: String) -> APIRole? {
        roles[SHA256.hex(key)]
    }

    /// Keys travel in `Authorization: Bearer KEY`: visible ASCII only, no spaces.
    private static func check(_ key: String, source: String) throws {
        guard !key.isEmpty else { throw Invalid(message: "an API key must not be empty") }
        guard key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Invalid(message: "API keys must be visible ASCII characters without spaces (they travel in an Authorization header)")
        }
    }
}
