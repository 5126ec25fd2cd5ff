import HTTPServer
import LedgerCodec
import LedgerStore
import ReferralLedger

/// The HTTP API of SPEC §10 over one ledger, as an `HTTPServer` handler: routes, API keys and
/// roles, commands through the group committer (concurrent requests share write transactions;
/// each is answered after its commit), queries straight from the ledger (short LMDB read
/// transactions that never wait for the writer). Every answer is JSON.
public final class LedgerAPI: Sendable {
    public let ledger: Ledger
    public let committer: GroupCommitter
    /// The API keys in force: those the server started with, until `replaceKeys(_:)`.
    public var keys: APIKeys { keyring.withLock { $0 } }
    private let keyring: Locked<APIKeys>
    /// The last storage failure of a post of commands (a full disk), until a later post commits:
    /// `/healthz` reports it while it is recent (`storageFailureShown`).
    private let storageFailure = Locked<(at: ContinuousClock.Instant, message: String)?>(nil)
    /// How long `/healthz` answers 503 after a write failed for storage, if no write has succeeded
    /// since: long enough for a health check to see it, short enough that a balancer which stopped
    /// sending traffic sends some again (the next write tells whether the disk has room).
    static let storageFailureShown: Duration = .seconds(30)
    /// Most commands in one posted array: bounds one request's share of a write transaction, and so
    /// the wait of the requests queued behind it.
    public static let maxBatchCommands = 1000
    /// Bodies of posted commands up to this size are parsed on the I/O thread that read them.
    static let bodyReadOnIOThread = 64 << 10

    public init(ledger: Ledger, committer: GroupCommitter, keys: APIKeys) {
        self.ledger = ledger
        self.committer = committer
        keyring = Locked(keys)
    }

    /// Puts `keys` in force for every request authenticated from now on (`serve` does on SIGHUP,
    /// re-reading its keys file): keys added, revoked or given another role without a restart.
    /// A request already past its authentication keeps the role it was given.
    public func replaceKeys(_ keys: APIKeys) {
        keyring.withLock { $0 = keys }
    }

    /// Answers one request through `responder`, called on the request's I/O thread
    /// (`HTTPServer(configuration:answering:)`). A post of commands is read and checked there,
    /// queued for the group committer and answered once committed; every other request is handled
    /// in a task of its own (queries may wait for a replay).
    public func answer(_ request: HTTPRequest, with responder: HTTPResponder) {
        if request.method == "POST", case .commands? = try? Route.match(rawPath: request.rawPath) {
            // A big batch is parsed off the I/O thread, which serves other connections meanwhile.
            if request.body.count > Self.bodyReadOnIOThread {
                Task { commands(request, responder: responder) }
            } else {
                commands(request, responder: responder)
            }
            return
        }
        Task { responder.respond(await handle(request)) }
    }

    /// Answers one request. Never throws: every failure is a JSON error answer.
    public func handle(_ request: HTTPRequest) async -> HTTPResponse {
        do {
            guard let route = try Route.match(rawPath: request.rawPath) else {
                throw APIError.unknownRoute(request.method, request.rawPath)
            }
            // HEAD is answered wherever GET is (RFC 9110 §9.3.2): the same status and headers, and
            // libmicrohttpd leaves the body out.
            guard request.method == route.method || (request.method == "HEAD" && route.method == "GET") else {
                throw APIError.methodNotAllowed(request.method, allowed: route.method == "GET" ? "GET, HEAD" : route.method)
            }
            switch route {
            case .health:
                return try health()
            case .revenueCat(let app):
                return try await revenueCat(app: app, request)
            case .commands:
                return try await commands(request, role: try authenticate(request))
            default:
                _ = try authenticate(request)
                return try await query(route, try QueryArguments(rawQuery: request.rawQuery))
            }
        } catch let error as APIError {
            return error.response
        } catch let error as QueryError {
            return APIError.query(error).response
        } catch let error as LMDBError {
            return APIError.storage(error).response
        } catch {
            return APIError.internalError("\(error)").response
        }
    }

    /// A request whose headers alone settle it, answered before its body is read: a post of
    /// commands without a usable key (401) or with a read key (403). Anything else: nil.
    public func screen(_ request: HTTPRequest) -> HTTPResponse? {
        guard request.method == "POST", case .commands? = try? Route.match(rawPath: request.rawPath) else { return nil }
        do throws(APIError) {
            if try authenticate(request) == .read { throw Self.readKeyMayNotPost }
            return nil
        } catch {
            return error.response
        }
    }

    static let readKeyMayNotPost = APIError.forbidden("a read key may only query; posting commands needs an append or owner key")

    // MARK: - Keys

    /// The role of the request's `Authorization: Bearer KEY`; 401 when there is none or the key is unknown.
    /// (Read byte by byte: this runs for every request, and Foundation's trimming is slow.)
    func authenticate(_ request: HTTPRequest) throws(APIError) -> APIRole {
        guard let bytes = request.fieldValue("authorization") else {
            throw APIError.unauthorized("an API key is needed: send Authorization: Bearer KEY")
        }
        let scheme = Array("bearer ".utf8)
        guard bytes.count > scheme.count, zip(bytes, scheme).allSatisfy({ Self.lowercase($0) == $1 }) else {
            throw APIError.unauthorized("the Authorization header must be \"Bearer KEY\"")
        }
        let key = HTTPRequest.trimmingSpacesAndTabs(bytes[scheme.count...])
        guard let role = keys.role(of: String(decoding: key, as: UTF8.self)) else {
            throw APIError.unauthorized("unknown API key")
        }
        return role
    }

    /// The body as JSON, whatever its Content-Type (`curl -d` sends form encoding); a body that is
    /// not JSON is malformed: 400 `invalid_command` (SPEC §2, §10 name no other status for it).
    func jsonBody(_ request: HTTPRequest, _ what: String) throws(APIError) -> JSONValue {
        do {
            return try JSONValue(parsing: request.body)
        } catch {
            throw APIError.invalidCommand("\(what) is not valid JSON: \(error)")
        }
    }

    private static func lowercase(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
    }

    // MARK: - Health

    /// `GET /healthz` (no key): 200 `{"ok": true, "head_position"}`; 503 with `ok: false` and the error while
    /// writes recently failed for storage (a full disk), so a health check sees what the clients do.
    func health() throws -> HTTPResponse {
        let head = try ledger.currentHead()
        if let failure = storageFailure.withLock({ $0 }), ContinuousClock.now - failure.at < Self.storageFailureShown {
            let body: JSONValue = ["ok": false, "head_position": .int(Int64(head.position)),
                                   "error": ["code": "storage_error", "message": .string(failure.message)]]
            return HTTPResponse.json(503, body.bytes)
        }
        let body: JSONValue = ["ok": true, "head_position": .int(Int64(head.position))]
        return .json(200, body.bytes)
    }

    /// Notes how a post of commands ended for `/healthz`: a storage failure is remembered, a commit
    /// forgets it.
    func noteWriteOutcome(_ failure: (any Error)?) {
        if let error = failure as? LMDBError {
            storageFailure.withLock { $0 = (ContinuousClock.now, APIError.storage(error).message) }
        } else if failure == nil {
            storageFailure.withLock { if $0 != nil { $0 = nil } }
        }
    }
}
