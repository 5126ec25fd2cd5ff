import Delivery
import HTTPServer

extension LedgerServer {
    /// How a `LedgerServer` listens, whom it lets in, and whether it delivers rewards.
    public struct Configuration: Sendable {
        /// The address to bind (an IP address or `localhost`); SPEC §10's default is 127.0.0.1.
        public var host: String
        /// The TCP port; 0 picks a free one (read it back from `LedgerServer.port`).
        public var port: UInt16
        /// Largest request body; larger ones are answered 413 (1 MiB unless configured).
        public var maxBodyBytes: Int
        /// The API keys and their roles.
        public var keys: APIKeys
        /// The delivery worker run inside the server; nil runs none (`serve --no-deliver`).
        public var delivery: DeliveryConfiguration?
        /// libmicrohttpd threads doing socket I/O (handlers run as Swift tasks, not on them).
        public var ioThreads: Int
        /// Connections held open at once; more wait in the listen backlog.
        public var maxConnections: Int
        /// An idle connection is closed after this many seconds.
        public var connectionTimeoutSeconds: UInt32
        /// Seconds `shutdown` lets requests in flight finish before answering the rest 503.
        public var drainTimeout: Double
        /// One line per finished request: method, raw path (no query), status, duration.
        /// Never keys, bodies or webhook secrets (none of them are in the line).
        public var accessLog: (@Sendable (String) -> Void)?
        /// libmicrohttpd's own diagnostics.
        public var errorLog: (@Sendable (String) -> Void)?

        public init(
            host: String = "127.0.0.1",
            port: UInt16 = 8080,
            maxBodyBytes: Int = 1 << 20,
            keys: APIKeys = .none,
            delivery: DeliveryConfiguration? = DeliveryConfiguration(),
            ioThreads: Int = 2,
            maxConnections: Int = 1024,
            connectionTimeoutSeconds: UInt32 = 30,
            drainTimeout: Double = 10,
            accessLog: (@Sendable (String) -> Void)? = nil,
            errorLog: (@Sendable (String) -> Void)? = nil
        ) {
            self.host = host
            self.port = port
            self.maxBodyBytes = maxBodyBytes
            self.keys = keys
            self.delivery = delivery
            self.ioThreads = ioThreads
            self.maxConnections = maxConnections
            self.connectionTimeoutSeconds = connectionTimeoutSeconds
            self.drainTimeout = drainTimeout
            self.accessLog = accessLog
            self.errorLog = errorLog
        }
    }
}
