/// What every error the ledger's library throws has: a stable code to branch on and a message
/// saying what happened and what to do. One `catch let error as CodedError` reads any of them:
/// `LedgerError` (`read_only`, `shutting_down`, …), `QueryError` (`unknown_user`, …), `LMDBError`
/// (`storage_error`), `WriterLock.Busy` (`ledger_busy`), `Ed25519.Failure` (`bad_key`), and the
/// reading errors of JSON and the log. The CLI prints it as `{"error": {"code", "message"}}`.
public protocol CodedError: Error, CustomStringConvertible {
    /// A stable snake_case code, the one the CLI and the HTTP API answer with.
    var errorCode: String { get }
    /// What happened and what to do, in words meant for a person.
    var message: String { get }
}

extension CodedError {
    public var description: String { message }
    /// `{"error": {"code": …, "message": …}}`, as the CLI and the HTTP API write an error.
    public var errorJSON: JSONValue { ["error": ["code": .string(errorCode), "message": .string(message)]] }
}
