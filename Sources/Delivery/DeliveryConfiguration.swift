import LedgerCodec

/// How a `DeliveryWorker` calls out, how much it does at once, and where it reports.
public struct DeliveryConfiguration: Sendable {
    /// Seconds an outgoing call (connect, send, answer) may take before it counts as failed;
    /// whole seconds, at least 1 (fractions are rounded up).
    public var requestTimeout: Double
    /// Deliveries in flight at once.
    public var maxInFlight: Int
    /// Seconds between looks at the ledger when nothing is due sooner (`run(until:)`).
    public var pollInterval: Double
    /// Jobs taken from the ledger in one look.
    public var batchSize: Int
    /// The operator's sendmail-compatible command (run with `/bin/sh -c`, the message on stdin),
    /// e.g. `/usr/sbin/sendmail -t`. `nil`: owner notifications stay pending.
    /// Never taken from app settings: no API key may make the server run a program.
    public var mailCommand: String?
    /// Seconds a mail command may run before it is stopped and the notification reported failed.
    public var mailTimeout: Double
    /// The `User-Agent` of outgoing calls.
    public var userAgent: String
    /// The time the worker observes: the `at` of what it records, the signature's `t`, the
    /// start of a RevenueCat grant. Tests move it forward to make retries due.
    public var clock: @Sendable () -> Timestamp
    /// One line per attempt, recovery, notification and recording problem (stderr in the CLI).
    public var log: (@Sendable (String) -> Void)?

    public init(
        requestTimeout: Double = 10,
        maxInFlight: Int = 8,
        pollInterval: Double = 1,
        batchSize: Int = 100,
        mailCommand: String? = nil,
        mailTimeout: Double = 30,
        userAgent: String = "referral-ledger-delivery/1",
        clock: @escaping @Sendable () -> Timestamp = { Timestamp.now() },
        log: (@Sendable (String) -> Void)? = nil
    ) {
        self.requestTimeout = requestTimeout
        self.maxInFlight = maxInFlight
        self.pollInterval = pollInterval
        self.batchSize = batchSize
        self.mailCommand = mailCommand
        self.mailTimeout = mailTimeout
        self.userAgent = userAgent
        self.clock = clock
        self.log = log
    }
}
