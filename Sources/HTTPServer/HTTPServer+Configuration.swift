extension HTTPServer {
    /// How an `HTTPServer` listens and what it tolerates.
    public struct Configuration: Sendable {
        /// The address to bind: an IPv4 dotted quad, an IPv6 address (optionally
        /// in brackets), or `localhost` (meaning 127.0.0.1). Only this address is bound.
        public var host: String
        /// The TCP port; 0 picks a free port (read it back from `HTTPServer.port`).
        public var port: UInt16
        /// Largest accepted request body; larger bodies are answered 413 without
        /// calling the handler.
        public var maxBodyBytes: Int
        /// A connection idle this long (no bytes received or sent) is closed.
        /// Connections waiting for a handler are not idle and never time out.
        /// 0 disables the timeout (not recommended).
        public var connectionTimeoutSeconds: UInt32
        /// libmicrohttpd worker threads doing socket I/O. Handlers do not run on
        /// them (they run as Swift tasks), so a few are plenty.
        public var threads: Int
        /// Connections held open at once (split evenly between the threads);
        /// further clients wait in the listen backlog.
        public var maxConnections: Int
        /// Connections one client address may hold open at once (0: no limit of its own), so that
        /// one client holding connections open (slowly trickling bytes, say) cannot take them all.
        public var maxConnectionsPerClient: Int
        /// Called once per finished request with a line such as
        /// `POST /v1/commands 200 1.2ms` (raw path, no query, no headers, no body).
        /// Runs on a server thread: keep it cheap and do not call `shutdown` from it.
        public var accessLog: (@Sendable (String) -> Void)?
        /// Diagnostics from libmicrohttpd (socket errors and the like). Optional.
        public var errorLog: (@Sendable (String) -> Void)?
        /// Looks at each request as soon as its headers are in (the body empty: not read yet). An
        /// answer returned here is sent at once and the body is never read (a client that sent
        /// `Expect: 100-continue` never uploads it): for checks that need no body, such as keys.
        /// Runs on a server thread: keep it cheap. Optional.
        public var screen: (@Sendable (HTTPRequest) -> HTTPResponse?)?

        public init(
            host: String = "127.0.0.1",
            port: UInt16 = 8080,
            maxBodyBytes: Int = 1 << 20,
            connectionTimeoutSeconds: UInt32 = 30,
            threads: Int = 4,
            maxConnections: Int = 1024,
            maxConnectionsPerClient: Int = 256,
            accessLog: (@Sendable (String) -> Void)? = nil,
            errorLog: (@Sendable (String) -> Void)? = nil
        ) {
            self.host = host
            self.port = port
            self.maxBodyBytes = maxBodyBytes
            self.connectionTimeoutSeconds = connectionTimeoutSeconds
            self.threads = threads
            self.maxConnections = maxConnections
            self.maxConnectionsPerClient = maxConnectionsPerClient
            self.accessLog = accessLog
            self.errorLog = errorLog
        }
    }
}
