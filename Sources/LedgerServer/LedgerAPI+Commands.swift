import Dispatch
import HTTPServer
import LedgerCodec
import ReferralLedger
import ReferralRules

/// `POST /v1/commands`: one command object, or a non-empty array of them.
extension LedgerAPI {
    /// A post of commands, read and checked: what goes to the committer, and the answer's shape.
    struct CommandPost {
        var inputs: [CommandInput]
        var isBatch: Bool
    }

    /// Answers a post of commands from the thread that read it: the commands go straight to the
    /// group committer (no task between the request's thread and the writer), and once their
    /// transaction committed the answer is handed back from a Dispatch queue.
    func commands(_ request: HTTPRequest, responder: HTTPResponder) {
        let post: CommandPost
        do throws(APIError) {
            post = try commandPost(request, role: try authenticate(request))
        } catch {
            return responder.respond(error.response)
        }
        committer.enqueue(post.inputs) { outcome in
            // Answered off the writer thread: the writer is the one serial stage, and handing the
            // answer to the connection (a lock, a wake-up of its I/O thread) is not its work.
            DispatchQueue.global().async {
                switch outcome {
                case .success(let results):
                    self.noteWriteOutcome(nil)
                    responder.respond(Self.answer(results, isBatch: post.isBatch))
                case .failure(let error):
                    self.noteWriteOutcome(error)
                    responder.respond(APIError.ledger(error).response)
                }
            }
        }
    }

    /// The same, awaited.
    func commands(_ request: HTTPRequest, role: APIRole) async throws -> HTTPResponse {
        let post = try commandPost(request, role: role)
        return Self.answer(try await submit(post.inputs), isBatch: post.isBatch)
    }

    /// Reads and checks a post of commands: the role may post them, the body is one command or a
    /// batch of at most `maxBatchCommands`, the URL has no query.
    func commandPost(_ request: HTTPRequest, role: APIRole) throws(APIError) -> CommandPost {
        guard role != .read else { throw Self.readKeyMayNotPost }
        let value = try jsonBody(request, "the body")
        // One command object, or a batch; nil for any other JSON (refused below, after the checks).
        let commands: [JSONValue]?
        switch value {
        case .object:
            commands = [value]
        case .array(let items):
            guard !items.isEmpty else {
                throw APIError.invalidCommand("the batch is empty: post one command object or a non-empty array of them")
            }
            guard items.count <= Self.maxBatchCommands else {
                throw APIError.invalidCommand("a batch holds at most \(Self.maxBatchCommands) commands, not \(items.count)")
            }
            commands = items
        default:
            commands = nil
        }
        try checkRole(role, commands ?? [])
        // The command is the body; an argument in the URL would be silently lost (checked after the
        // roles, so a key that may not post at all hears 403 first).
        if let name = request.query.keys.min() ?? request.repeatedQueryNames.min() {
            throw APIError.invalidQuery("POST /v1/commands takes no query arguments (got \"\(name.prefix(40))\"): the command goes in the body")
        }
        guard let commands else {
            throw APIError.invalidCommand("the body must be a command object or an array of command objects, not a JSON \(value.typeName)")
        }
        // Already parsed: the writer thread does not read them again.
        let isBatch: Bool
        if case .array = value { isBatch = true } else { isBatch = false }
        return CommandPost(inputs: commands.map(CommandInput.value), isBatch: isBatch)
    }

    /// The answer to a post: the single command's own answer, or 200 with every result of a batch.
    static func answer(_ results: [CommandResult], isBatch: Bool) -> HTTPResponse {
        guard isBatch else { return answer(results[0]) }
        var body: [UInt8] = []
        body.reserveCapacity(results.reduce(2) { $0 + $1.bytes.count + 1 })
        body.append(UInt8(ascii: "["))
        for (index, result) in results.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: result.bytes)
        }
        body.append(UInt8(ascii: "]"))
        return .json(200, body)
    }

    /// 403 when any command is one the role may not send: a batch is refused whole, nothing decided.
    /// Commands without a known `type` are left to the ledger (they are malformed: `invalid_command`),
    /// except from a read key, which may send none.
    func checkRole(_ role: APIRole, _ commands: [JSONValue]) throws(APIError) {
        for (index, command) in commands.enumerated() {
            let which = commands.count == 1 ? "" : " (command \(index + 1) of the batch; nothing was decided)"
            if role == .read { throw APIError.forbidden("a read key may only query; commands need an append or owner key\(which)") }
            guard let type = command["type"].stringValue, Command.types.contains(type) else { continue }
            if !role.maySubmit(type: type, isOwnerOnly: Command.isOwnerOnly) {
                throw APIError.forbidden("\"\(type)\" is an owner-only command; an \(role.rawValue) key may not send it\(which)")
            }
        }
    }

    /// Through the group committer; answers once the write transaction holding them committed.
    func submit(_ lines: [CommandInput]) async throws -> [CommandResult] {
        do {
            let results = try await committer.submit(lines)
            noteWriteOutcome(nil)
            return results
        } catch {
            noteWriteOutcome(error)
            throw APIError.ledger(error)
        }
    }

    /// A single command's answer: 200 when ok (duplicates included), 409 with the whole result
    /// for a business rejection, 400 with `{"error": …}` for a malformed command, 500 with it when
    /// the ledger could not decide the command (503 `storage_error` when it could not write).
    static func answer(_ result: CommandResult) -> HTTPResponse {
        if result.ok { return .json(200, result.bytes) }
        if result.isBusinessRejection { return .json(409, result.bytes) }
        let error: JSONValue = ["error": result.json["error"]]
        return .json(result.isInternalError ? 500 : 400, error.bytes)
    }
}
