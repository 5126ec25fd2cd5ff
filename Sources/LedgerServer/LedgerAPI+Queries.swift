import HTTPServer
import LedgerCodec
import ReferralLedger

/// The query routes: the same library calls as the CLI, so the same JSON (SPEC §8, §10).
extension LedgerAPI {
    func query(_ route: Route, _ q: QueryArguments) async throws -> HTTPResponse {
        if case .events = route {
            try q.allow(["from", "limit"])
            return try events(from: try q.integer("from", minimum: 0) ?? 1, limit: try q.limit() ?? 1000)
        }
        // Every query also answers as of a past position (`as_of`, the CLI's `--as-of`), by folding
        // the log up to it: for auditors.
        let asOf = try q.integer("as_of", minimum: 0)
        let ledger = self.ledger
        let answer: @Sendable () throws -> JSONValue
        switch route {
        case .program(let app, let program):
            try q.allow(["as_of"])
            answer = { try ledger.program(app: app, program: program, asOf: asOf) }
        case .programs(let app):
            try q.allow(["limit", "cursor", "as_of"])
            let (limit, cursor) = (try q.limit() ?? 100, q.string("cursor"))
            answer = { try ledger.programs(app: app, limit: limit, cursor: cursor, asOf: asOf) }
        case .progress(let app, let program, let user):
            try q.allow(["as_of"])
            answer = { try ledger.progress(app: app, program: program, user: user, asOf: asOf) }
        case .rewards(let app, let user):
            try q.allow(["program", "limit", "cursor", "as_of"])
            let (program, limit, cursor) = (q.string("program"), try q.limit(), try q.integer("cursor", minimum: 0))
            answer = { try ledger.rewards(app: app, user: user, program: program, limit: limit, cursor: cursor, asOf: asOf) }
        case .balance(let app, let user):
            try q.allow(["as_of"])
            answer = { try ledger.balance(app: app, user: user, asOf: asOf) }
        case .resolve(let app):
            try q.allow(["input", "as_of"])
            let input = try q.required("input")
            answer = { try ledger.resolve(app: app, input: input, asOf: asOf) }
        case .participants(let app, let program):
            try q.allow(["user", "user_prefix", "status", "limit", "cursor", "as_of"])
            let (user, prefix, status, limit, cursor) = (q.string("user"), q.string("user_prefix") ?? "", q.string("status"), try q.limit() ?? 100, q.string("cursor"))
            answer = { try ledger.participants(app: app, program: program, user: user, userPrefix: prefix, status: status, limit: limit, cursor: cursor, asOf: asOf) }
        case .deliveries(let app):
            try q.allow(["program", "user", "status", "limit", "cursor", "as_of"])
            let (program, user, status, limit, cursor) = (q.string("program"), q.string("user"), q.string("status"), try q.limit() ?? 100, q.string("cursor"))
            answer = { try ledger.deliveries(app: app, program: program, user: user, status: status, limit: limit, cursor: cursor, asOf: asOf) }
        case .audit(let app):
            try q.allow(["program", "user", "type", "limit", "cursor", "as_of"])
            let (program, user, type, limit, after) = (q.string("program"), q.string("user"), q.string("type"), try q.limit() ?? 100, try q.integer("cursor", minimum: 0) ?? 0)
            answer = { try ledger.audit(app: app, program: program, user: user, type: type, limit: limit, after: after, asOf: asOf) }
        case .health, .commands, .revenueCat, .events:
            throw APIError.internalError("\(route.template) is not a query")
        }
        if asOf != nil {
            // A replay reads the log and holds a whole state: one at a time, off the shared pool.
            guard let replayed = try await BlockingWork.replay(answer) else { throw APIError.replaysBusy(BlockingWork.maxReplays) }
            return .json(200, replayed.bytes)
        }
        return .json(200, try answer().bytes)
    }

    /// `{"events": [...], "next": N}`: the stored values spliced in as they are stored (each a
    /// compact JSON object), at most 1,000 (the limit is clamped by the caller).
    /// A page of the log as stored, and `next`: the position to ask for next, always a number (the
    /// head + 1 once the page reaches it), so a client following the log polls with it as it is.
    func events(from: UInt64, limit: Int) throws -> HTTPResponse {
        let start = max(from, 1)
        let (page, more) = try ledger.events(from: start, limit: limit)
        let next = more ?? start + UInt64(page.count)  // positions have no gaps
        var body: [UInt8] = []
        body.reserveCapacity(page.reduce(32) { $0 + $1.count + 1 })
        body.append(contentsOf: #"{"events":["#.utf8)
        for (index, value) in page.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: value)
        }
        body.append(contentsOf: #"],"next":"#.utf8)
        body.append(contentsOf: String(next).utf8)
        body.append(UInt8(ascii: "}"))
        return .json(200, body)
    }
}
