import Delivery
import Dispatch
import Foundation
import LedgerCodec
import ReferralLedger

extension CLI {
    /// The `deliver --help` text (SPEC §10, §11).
    static let deliverHelp = """
    referral-ledger deliver [--once] [--mail-command CMD] [--mail-timeout SECONDS] [--timeout SECONDS] [--concurrency N]
      The delivery worker: takes rewards ready for an outside call and delivers them, recording each
      attempt (delivery.started, then delivery.succeeded or delivery.failed with its error). Custom
      benefits are POSTed to the app's webhook_url, signed with webhook_secret (X-Referral-Signature);
      RevenueCat entitlements are granted with the app's revenuecat_api_key; sandbox programs make no
      call. Failed attempts are retried with backoff; after 5 the reward is failed and the owner is
      notified. Deliveries a stopped worker left unfinished are recorded failed and tried again
      (a sandbox one, which made no call, is recorded done).
      It writes the ledger, so it holds the data folder while it runs: other writers (submit, the
      owner's reward.retry among them) are refused meanwhile. Run it inside `serve` (the default)
      to take commands over HTTP at the same time.
      --once               deliver what is due now, send pending notifications, print a JSON summary, exit
                           (without it: run until SIGTERM or SIGINT, then finish the calls in flight,
                           print the summary of the run and exit 0)
      --mail-command CMD   a sendmail-compatible command run with /bin/sh -c, the message on stdin
                           (e.g. "/usr/sbin/sendmail -t"); without it owner notifications stay pending
      --mail-timeout SECONDS  time allowed for each run of the mail command, 1–600 (default 30); one
                           that takes longer is stopped and the notification retried later
      --timeout SECONDS    time allowed for each outside call, whole seconds, 1–600 (default 10)
      --concurrency N      deliveries in flight at once, 1–64 (default 8)
      Progress goes to stderr, one line per attempt. The summary (JSON on stdout): delivered, failed,
      simulated (sandbox, counted in delivered too), skipped (taken by another attempt or no longer
      ready), interrupted (left fulfilling by a stopped worker: recorded failed, or done for sandbox),
      notifications_sent (mailed), notifications_simulated (sandbox: recorded, never mailed),
      notifications_failed, notifications_withdrawn (a review decided before its notice went out).
    """

    /// `--mail-command CMD` and `--mail-timeout SECONDS`, when given, into the worker's configuration
    /// (deliver and serve).
    static func readMailOptions(_ a: Arguments, into configuration: inout DeliveryConfiguration) throws {
        if let command = a.flags["mail-command"] {
            guard !command.trimmingCharacters(in: .whitespaces).isEmpty else {
                throw Arguments.UsageError(message: "--mail-command needs a command, such as \"/usr/sbin/sendmail -t\"")
            }
            configuration.mailCommand = command
        }
        if a.flags["mail-timeout"] != nil {
            guard a.flags["mail-command"] != nil else { throw Arguments.UsageError(message: "--mail-timeout goes with --mail-command") }
            configuration.mailTimeout = try a.seconds("mail-timeout")!
        }
    }

    /// `deliver [--once] [--mail-command CMD] [--timeout SECONDS] [--concurrency N]`: the delivery worker (SPEC §10, §11).
    func deliver(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["mail-command", "mail-timeout", "timeout", "concurrency"], boolean: ["once", "help"])
        if a.switches.contains("help") {
            print(Self.deliverHelp)
            return 0
        }
        var configuration = DeliveryConfiguration()
        configuration.requestTimeout = try a.seconds("timeout") ?? configuration.requestTimeout
        if let n = try a.integer("concurrency") {
            guard (1...64).contains(n) else { throw Arguments.UsageError(message: "--concurrency must be 1 to 64") }
            configuration.maxInFlight = n
        }
        try Self.readMailOptions(a, into: &configuration)
        configuration.log = { line in Terminal.error(Timestamp.now().description + " " + line) }

        try LedgerFolder.requireLedger(folder)
        let ledger = try openWriter()
        let worker = DeliveryWorker(ledger: ledger, configuration: configuration)

        let once = a.switches.contains("once")
        if !once {
            Terminal.error(Timestamp.now().description + " deliver: running on \(folder)"
                + (configuration.mailCommand == nil ? " (no --mail-command: owner notifications stay pending)" : "")
                + "; SIGTERM or SIGINT stops it")
        }
        let task = Task { once ? await worker.runOnce() : await worker.run() }
        var sources: [DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                Terminal.error(Timestamp.now().description + " deliver: stopping (signal \(number)); finishing the calls in flight")
                task.cancel()
            }
            source.resume()
            sources.append(source)
        }
        let summary = Self.wait { await task.value }
        sources.forEach { $0.cancel() }
        Self.saveStateSnapshot(ledger)
        out.done = "what the worker did is recorded: `deliveries` lists every attempt"
        out.line(summary.json)
        out.flush()
        return 0
    }

    /// Runs async work from this synchronous verb and blocks until it is done (the work runs
    /// on the concurrency pool, never on this thread).
    private static func wait(_ body: @escaping @Sendable () async -> DeliverySummary) -> DeliverySummary {
        let box = SummaryBox()
        let done = DispatchSemaphore(value: 0)
        Task {
            box.value = await body()
            done.signal()
        }
        done.wait()
        return box.value!
    }
}

/// Carries the summary out of the task; written once before the semaphore is signalled.
private final class SummaryBox: @unchecked Sendable {
    var value: DeliverySummary?
}
