import Delivery
import HTTPServer

extension LedgerServer {
    /// How a `LedgerServer` listens (the HTTP server's own configuration), whom it lets in, and
    /// whether it delivers rewards.
    public struct Configuration: Sendable {
        /// Address, port, body limit (1 MiB), I/O threads, connection limits and logs of the HTTP
        /// server. The access log never holds keys, bodies or webhook secrets.
        public var http: HTTPServer.Configuration
        /// The API keys and their roles the server starts with (`LedgerServer.replaceKeys` swaps them).
        public var keys: APIKeys
        /// The delivery worker run inside the server; nil runs none (`serve --no-deliver`).
        public var delivery: DeliveryConfiguration?
        /// Seconds `shutdown` lets requests in flight finish before answering the rest 503.
        public var drainTimeout: Double

        /// SPEC §10's defaults: 127.0.0.1:8080, bodies up to 1 MiB; two I/O threads suit the
        /// 2-core machines (more made no difference), handlers run as Swift tasks.
        public init(
            http: HTTPServer.Configuration = HTTPServer.Configuration(threads: 2),
            keys: APIKeys = .none,
            delivery: DeliveryConfiguration? = DeliveryConfiguration(),
            drainTimeout: Double = 10
        ) {
            self.http = http
            self.keys = keys
            self.delivery = delivery
            self.drainTimeout = drainTimeout
        }
    }
}
