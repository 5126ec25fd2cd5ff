/// Why an `HTTPServer` could not be started.
public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public enum Code: String, Sendable {
        /// `Configuration.host` is neither an IP address nor `localhost`.
        case invalidHost = "invalid_host"
        /// A configuration value is out of range.
        case invalidConfiguration = "invalid_configuration"
        /// libmicrohttpd refused to start, most often because the address
        /// could not be bound (in use, or not a local address).
        case startFailed = "start_failed"
    }

    public var code: Code
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
