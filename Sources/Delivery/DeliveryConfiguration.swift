import LedgerCodec

/// How a `DeliveryWorker` calls out, how much it does at once, and where it reports.
public struct DeliveryConfiguration: Sendable {
    /// Seconds an outgoing call (connect, send, answer) may take before it counts as failed;
    /// whole seconds, 1 to 600 (fractions are rounded up) as `deliver --timeout` takes them.
    public var requestTimeout: Double
    /// Deliveries in flight at once, 1 to 64 (`deliver --concurrency`): each holds a thread.
    public var maxInFlight: Int
    /// Seconds between looks at the ledger when nothing is due sooner (`run(until:)`), 0.05 to 600.
    public var pollInterval: Double
    /// Jobs taken from the ledger in one look, 1 to 10,000.
    public var batchSize: Int
    /// The operator's sendmail-compatible command (run with `/bin/sh -c`, the message on stdin),
    /// e.g. `/usr/sbin/sendmail -t`. `nil`: owner notifications stay pending.
    /// Never taken from app settings: no API key may make the server run a program.
    public var mailCommand: String?
    /// Seconds a mail command may run before it is stopped and the notification reported failed,
    /// 0.1 to 600.
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

    /// The configuration a worker runs with: each number brought into its range above (one past
    /// an end is that end; zero, a negative number or NaN is the default), so no setting can stall
    /// the worker or trap it.
    public var bounded: DeliveryConfiguration {
        var c = self
        c.requestTimeout = Self.seconds(requestTimeout, default: 10, in: 1...600)
        c.mailTimeout = Self.seconds(mailTimeout, default: 30, in: 0.1...600)
        c.pollInterval = Self.seconds(pollInterval, default: 1, in: 0.05...600)
        c.maxInFlight = min(max(maxInFlight, 1), 64)
        c.batchSize = min(max(batchSize, 1), 10_000)
        return c
    }

    static func seconds(_ value: Double, default fallback: Double, in range: ClosedRange<Double>) -> Double {
        guard value > 0 else { return fallback }  // also NaN
        return min(max(value, range.lowerBound), range.upperBound)
    }
}
