/// What became of a call (or of preparing it).
enum CallOutcome: Sendable, Equatable {
    case fulfilled
    case failed(String)
}
