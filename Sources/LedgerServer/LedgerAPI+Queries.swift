import HTTPServer
import LedgerCodec
import ReferralLedger

/// The query routes: the same library calls as the CLI, so the same JSON (SPEC §8, §10).
extension LedgerAPI {
    func query(_ route: Route, _ q: QueryArguments) async throws -> HTTPResponse {
        let answer: JSONValue
        switch route {
        case .program(let app, let program):
            try q.allow([])
            answer = try ledger.program(app: app, program: program)
        case .progress(let app, let program, let user):
            try q.allow([])
            answer = try ledger.progress(app: app, program: program, user: user)
        case .rewards(let app, let user):
            try q.allow(["program"])
            answer = try ledger.rewards(app: app, user: user, program: q.string("program"))
        case .balance(let app, let user):
            try q.allow([])
            answer = try ledger.balance(app: app, user: user)
        case .resolve(let app):
            try q.allow(["input"])
            let input = try q.required("input")
            let ledger = self.ledger
            // `resolve` reads the app's link settings under the writer's lock: keep it off the pool.
            answer = try await BlockingWork.run { try ledger.resolve(app: app, input: input) }
        case .participants(let app, let program):
            try q.allow(["user", "user_prefix", "status", "limit", "cursor"])
            answer = try ledger.participants(app: app, program: program, user: q.string("user"), userPrefix: q.string("user_prefix") ?? "",
                                             status: q.string("status"), limit: try q.limit() ?? 100, cursor: q.string("cursor"))
        case .deliveries(let app):
            try q.allow(["program", "user", "status", "limit", "cursor"])
            answer = try ledger.deliveries(app: app, program: q.string("program"), user: q.string("user"), status: q.string("status"),
                                           limit: try q.limit() ?? 100, cursor: q.string("cursor"))
        case .audit(let app):
            try q.allow(["program", "user", "type", "limit", "cursor"])
            answer = try ledger.audit(app: app, program: q.string("program"), user: q.string("user"), type: q.string("type"),
                                      limit: try q.limit() ?? 100, after: try q.integer("cursor", minimum: 0) ?? 0)
        case .events:
            try q.allow(["from", "limit"])
            return try events(from: try q.integer("from", minimum: 0) ?? 1, limit: try q.limit() ?? 1000)
        case .health, .commands, .revenueCat:
            throw APIError.internalError("\(route.template) is not a query")
        }
        return .json(200, answer.bytes)
    }

    /// `{"events": [...], "next": N}`: the stored values spliced in as they are stored (each a
    /// compact JSON object), at most 1,000; `next` is null at the head.
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
