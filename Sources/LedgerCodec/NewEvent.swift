/// An event decided by the rules, before the log gives it a position: its type, its business
/// time (the command's `at`) and its data.
public struct NewEvent: Sendable, Equatable {
    public var type: String
    public var at: Timestamp
    public var data: JSONValue

    public init(type: String, at: Timestamp, data: JSONValue) {
        self.type = type
        self.at = at
        self.data = data
    }
}
