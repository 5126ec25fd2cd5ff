import Foundation
import LedgerCodec
import ReferralLedger
import Synchronization

/// The delivery worker (SPEC §10 `deliver`, §11): takes rewards `ready` for an outside call,
/// records `delivery.started`, makes the call (a signed webhook for custom benefits, a
/// RevenueCat promotional grant for entitlements; none for sandbox programs), and records
/// `delivery.succeeded` or `delivery.failed` with the error. The ledger's rules decide
/// retries (`retry_at`), the end of a round (`failed` after 5 attempts) and the owner
/// notification; the worker only observes time and reports.
///
/// A reward is never delivered twice once fulfilled: the call is made only after the ledger
/// accepted `delivery.started` for exactly the next attempt, and the rules refuse starting a
/// reward that is not `ready`. A worker that stops between the call and its record leaves the
/// reward `fulfilling`; the next start records that attempt failed ("interrupted") and tries
/// again, so the receiver sees at worst one repeated call with the same `reward_id`. An outcome
/// the ledger cannot record at once (a commit failing on a full disk) is tried twice more, then kept
/// with the time the call ended and recorded at the worker's next look (every poll, and before it
/// stops): the reward does not stay `fulfilling` until a restart, and no call is repeated for it.
///
/// One worker per ledger: `runOnce()` and `run(until:)` must not run at the same time in two
/// workers of one ledger (each starts by recovering what it finds `fulfilling`).
public final class DeliveryWorker: Sendable {
    public let ledger: Ledger
    /// The worker's and its mail sender's writes: off Swift's cooperative pool (waiting for the
    /// writer must not hold one of its few threads; inside `serve` the request handlers share them),
    /// and grouped: the outcomes of calls in flight that arrive while a commit runs are decided
    /// together in the next transaction, each answered its own result.
    public let committer: GroupCommitter
    /// The configuration it runs with: the one given, `bounded`.
    public let configuration: DeliveryConfiguration
    /// The mail sender, when the configuration names a mail command.
    public let notifier: Notifier?
    let client: DeliveryHTTPClient
    /// Rewards this worker is delivering right now (app + reward ID), and those whose outcome waits
    /// in `unrecorded`.
    private let inFlight = Mutex<Set<String>>([])
    /// Set when the ledger refused to record a worker command by throwing (a full disk, say): the
    /// loop then takes no new jobs until its next tick, instead of trying the same ones at once.
    private let recordingFailed = Mutex(false)
    /// Outcomes the ledger could not record yet, by reward (app + reward ID): recorded at the next look.
    private let unrecorded = Mutex<[String: ObservedOutcome]>([:])
    /// How the worker's commands reach the ledger (a test puts a failing disk in between).
    let commit: @Sendable (JSONValue, Ledger) async throws -> CommandResult

    /// The error recorded for a delivery a previous worker left `fulfilling`.
    public static let interruptedError = Ledger.interruptedDeliveryError

    /// A worker writing through a committer of its own (its writer thread ends with the worker).
    public convenience init(ledger: Ledger, configuration: DeliveryConfiguration = DeliveryConfiguration()) {
        self.init(committer: GroupCommitter(ledger: ledger), configuration: configuration)
    }

    /// A worker writing through `committer` (shared with other writers of its ledger, or not).
    public convenience init(committer: GroupCommitter, configuration: DeliveryConfiguration = DeliveryConfiguration()) {
        self.init(committer: committer, configuration: configuration) { command, _ in
            try await committer.submit([.value(command)])[0]
        }
    }

    convenience init(ledger: Ledger, configuration: DeliveryConfiguration, commit: @escaping @Sendable (JSONValue, Ledger) async throws -> CommandResult) {
        self.init(committer: GroupCommitter(ledger: ledger), configuration: configuration, commit: commit)
    }

    init(committer: GroupCommitter, configuration: DeliveryConfiguration, commit: @escaping @Sendable (JSONValue, Ledger) async throws -> CommandResult) {
        self.commit = commit
        self.committer = committer
        let ledger = committer.ledger
        let configuration = configuration.bounded
        self.ledger = ledger
        self.configuration = configuration
        client = DeliveryHTTPClient(timeout: configuration.requestTimeout, maxConnections: configuration.maxInFlight)
        notifier = configuration.mailCommand.flatMap { command in
            command.trimmingCharacters(in: .whitespaces).isEmpty ? nil
                : Notifier(committer: committer, mailCommand: command, timeout: configuration.mailTimeout,
                           clock: configuration.clock, log: configuration.log)
        }
    }

    // MARK: - One pass

    /// Delivers everything due now, once each: first records the deliveries a stopped worker left
    /// `fulfilling` failed (due again at their `retry_at`), then every due reward, at most
    /// `maxInFlight` at a time; then sends pending owner notifications (with a mail command).
    /// Cancelling the calling task stops it early; calls in flight are finished and recorded.
    public func runOnce() async -> DeliverySummary {
        guard isWriting() else { return DeliverySummary() }
        var summary = DeliverySummary()
        var attempted = Set<String>()
        await recoverInterrupted(&summary)
        while !Task.isCancelled {
            let tried = attempted
            let fresh = ledger.dueDeliveries(now: configuration.clock(), limit: configuration.batchSize) { app, rewardID in
                tried.contains(Self.key(app: app, rewardID: rewardID))
            }
            for job in fresh { attempted.insert(Self.key(job)) }
            if fresh.isEmpty { break }
            summary += await deliverAll(fresh)
        }
        summary += await recordUnrecorded()
        logUnrecordedLeft(atStop: false)
        if let notifier { summary += await notifier.sendPending() }
        return summary
    }

    // MARK: - Running

    /// Delivers until `shouldStop()` answers true (looked at least every `pollInterval`) or the
    /// calling task is cancelled (at once). Sleeps until the next retry is due or the poll
    /// interval passes; a finished delivery frees its slot for the next. Deliveries in flight
    /// when asked to stop are finished and recorded (each is bounded by `requestTimeout`)
    /// before it returns. Notifications are sent alongside, so a slow or failing mail command
    /// never holds up deliveries. Answers what the whole run did.
    public func run(until shouldStop: @escaping @Sendable () -> Bool = { false }) async -> DeliverySummary {
        guard isWriting() else { return DeliverySummary() }
        var total = DeliverySummary()
        await recoverInterrupted(&total)
        // A ledger closed meanwhile (`Ledger.close()`) records nothing more: the run ends.
        let ledger = self.ledger
        let stopping: @Sendable () -> Bool = { shouldStop() || Task.isCancelled || ledger.isClosed }
        let notifier = self.notifier
        await withTaskGroup(of: DeliverySummary.self) { group in
            group.addTask { await self.deliveryLoop(stopping) }
            if let notifier { group.addTask { await self.notificationLoop(notifier, stopping) } }
            for await part in group { total += part }
        }
        return total
    }

    private enum LoopEvent: Sendable {
        case finished(DeliverySummary)
        case tick
    }

    private func deliveryLoop(_ stopping: @escaping @Sendable () -> Bool) async -> DeliverySummary {
        await withTaskGroup(of: LoopEvent.self) { group in
            var summary = DeliverySummary()
            var running = 0
            var ticking = false
            var waiting: [DeliveryJob] = []
            var pausedUntilTick = false
            while true {
                if stopping() {
                    if running == 0 {
                        summary += await recordUnrecorded()  // a last try; else the next start records them interrupted
                        logUnrecordedLeft(atStop: true)
                        group.cancelAll()
                        break
                    }
                } else {
                    if waiting.isEmpty, running < configuration.maxInFlight, !pausedUntilTick {
                        let flying = inFlight.withLock { $0 }
                        waiting = ledger.dueDeliveries(now: configuration.clock(), limit: configuration.batchSize) { app, rewardID in
                            flying.contains(Self.key(app: app, rewardID: rewardID))
                        }
                    }
                    while running < configuration.maxInFlight, !waiting.isEmpty {
                        let job = waiting.removeFirst()
                        group.addTask { .finished(await self.deliver(job)) }
                        running += 1
                    }
                    if !ticking {
                        let delay = pausedUntilTick ? UInt64(configuration.pollInterval * 1e9) : nextWake()
                        group.addTask {
                            try? await Task.sleep(nanoseconds: delay)
                            return .tick
                        }
                        ticking = true
                    }
                }
                guard let event = await group.next() else { break }
                switch event {
                case .finished(let part):
                    summary += part
                    running -= 1
                    if recordingFailed.withLock({ failed in defer { failed = false }; return failed }) {
                        pausedUntilTick = true
                        waiting = []
                    }
                case .tick:
                    ticking = false
                    pausedUntilTick = false
                    summary += await recordUnrecorded()
                    // Look again: a retry that fell due goes before the rest of the list taken earlier.
                    waiting = []
                }
            }
            return summary
        }
    }

    private func notificationLoop(_ notifier: Notifier, _ stopping: @escaping @Sendable () -> Bool) async -> DeliverySummary {
        var summary = DeliverySummary()
        while !stopping() {
            summary += await notifier.sendPending()
            if stopping() { break }
            try? await Task.sleep(nanoseconds: UInt64(configuration.pollInterval * 1e9))
        }
        return summary
    }

    /// Nanoseconds until the next look: the poll interval, or sooner when a retry falls due.
    private func nextWake() -> UInt64 {
        var seconds = configuration.pollInterval
        if let next = ledger.nextRetry() {
            // In Double: a clock set anywhere in Int64's range cannot overflow it.
            let until = (Double(next.milliseconds) - Double(configuration.clock().milliseconds)) / 1000
            seconds = min(seconds, max(0.05, until))
        }
        return UInt64(seconds * 1e9)
    }

    // MARK: - Deliveries

    /// Records `delivery.failed` for each delivery left `fulfilling` by a worker that stopped
    /// mid-call. The reward is then due at the `retry_at` that records (SPEC §11: "due then"), like
    /// any failed attempt. A sandbox delivery makes no call, so nothing was cut short: it is
    /// recorded as done (simulated), as the worker would have.
    func recoverInterrupted(_ summary: inout DeliverySummary) async {
        for job in ledger.interruptedDeliveries() where !isInFlight(job) {
            if job.simulated {
                guard let result = await record("delivery.succeeded", job, attempt: job.attempt, error: nil) else { continue }
                if result.ok { summary.interrupted += 1; summary.simulated += 1; summary.delivered += 1 } else {
                    log("reward \(job.rewardID) of app \(job.app) was left fulfilling, but the ledger refused recording its simulated delivery: \(Self.message(result))")
                }
                continue
            }
            guard let result = await record("delivery.failed", job, attempt: job.attempt, error: Self.interruptedError) else { continue }
            guard result.ok else {
                log("reward \(job.rewardID) of app \(job.app) was left fulfilling, but the ledger refused recording it failed: \(Self.message(result))")
                continue
            }
            summary.interrupted += 1
            let status = result.json["status"].stringValue ?? ""
            let retryAt = result.json["retry_at"].stringValue
            log("reward \(job.rewardID) of app \(job.app) was left fulfilling by a stopped worker (attempt \(job.attempt)): recorded failed; \(retryAt.map { "due again at \($0)" } ?? "status \(status)")")
        }
    }

    /// Delivers `jobs`, at most `maxInFlight` at a time.
    func deliverAll(_ jobs: [DeliveryJob]) async -> DeliverySummary {
        guard !jobs.isEmpty else { return DeliverySummary() }
        return await withTaskGroup(of: DeliverySummary.self) { group in
            var summary = DeliverySummary()
            var running = 0
            for job in jobs {
                if Task.isCancelled { break }  // asked to stop: finish and record what is in flight only
                if running >= configuration.maxInFlight, let part = await group.next() {
                    summary += part
                    running -= 1
                }
                group.addTask { await self.deliver(job) }
                running += 1
            }
            for await part in group { summary += part }
            return summary
        }
    }

    /// One attempt: started (or skipped when the ledger refuses), the call, the outcome.
    func deliver(_ job: DeliveryJob) async -> DeliverySummary {
        var summary = DeliverySummary()
        let key = Self.key(job)
        guard claim(key) else {
            summary.skipped += 1
            return summary
        }
        var parked = false  // the outcome waits in `unrecorded`, claimed until it is recorded
        defer { if !parked { release(key) } }

        guard let started = await record("delivery.started", job, attempt: job.attempt) else {
            summary.skipped += 1
            return summary
        }
        guard started.ok else {
            log("skipped reward \(job.rewardID) of app \(job.app) (attempt \(job.attempt)): \(Self.message(started))")
            summary.skipped += 1
            return summary
        }

        // The call is built from the reward as started, not as it was when the queue was read.
        guard let current = ledger.startedDelivery(app: job.app, program: job.program, rewardID: job.rewardID),
              current.attempt == job.attempt else {
            log("reward \(job.rewardID) of app \(job.app) was recorded otherwise right after delivery.started (attempt \(job.attempt)); no call made")
            summary.skipped += 1
            return summary
        }
        let outcome: CallOutcome
        if current.simulated {
            outcome = .fulfilled  // sandbox: no outside call; the reward is already marked simulated
        } else {
            switch CallBuilder.call(for: current, at: configuration.clock(), userAgent: configuration.userAgent) {
            case .failure(let problem): outcome = .failed(problem.message)
            case .success(var call):
                // The error text quotes the receiver's answer, which may echo the request's headers:
                // the client redacts the app's secrets from it, so they never reach the log (kept
                // for ever) nor stderr.
                call.secrets = [current.webhookSecret, current.revenueCatAPIKey].compactMap { $0 }
                outcome = await client.send(call)
            }
        }

        let error: String? = switch outcome {
        case .fulfilled: nil
        case .failed(let error): error
        }
        let observed = ObservedOutcome(job: job, error: error, at: configuration.clock(), simulated: current.simulated)
        // The outcome is known: it is recorded, again after a failing commit (a full disk, say);
        // one that still cannot be recorded waits for the next look, claimed, so that it is never
        // recorded "interrupted" while this worker knows how the call went.
        for pause in [0.25, 1.0] {
            if let result = try? await commit(observed.command, ledger) {
                summary += tally(observed, result)
                return summary
            }
            try? await Task.sleep(nanoseconds: UInt64(pause * 1e9))
        }
        do {
            summary += tally(observed, try await commit(observed.command, ledger))
        } catch {
            unrecorded.withLock { $0[key] = observed }
            parked = true
            log("could not record \(observed.type) of reward \(job.rewardID) of app \(job.app) (attempt \(job.attempt)): \(error); "
                + "the outcome is kept and recorded at the next look")
        }
        return summary
    }

    /// What a recorded outcome adds to the summary, logged.
    private func tally(_ o: ObservedOutcome, _ result: CommandResult, late: Bool = false) -> DeliverySummary {
        var summary = DeliverySummary()
        let job = o.job
        let when = late ? " (recorded late: the ledger could not be written at first)" : ""
        guard result.ok else {
            log(o.error.map { "delivery of reward \(job.rewardID) of app \(job.app) failed (\($0)) and the ledger refused recording it: \(Self.message(result))" }
                ?? "reward \(job.rewardID) of app \(job.app) was delivered (attempt \(job.attempt)) but the ledger refused recording it: \(Self.message(result))")
            return summary
        }
        guard let error = o.error else {
            summary.delivered += 1
            if o.simulated { summary.simulated += 1 }
            log("delivered reward \(job.rewardID) of app \(job.app) to \(job.user) (attempt \(job.attempt)\(o.simulated ? ", simulated" : ""))\(when)")
            return summary
        }
        summary.failed += 1
        let json = result.json
        if let retryAt = json["retry_at"].stringValue {
            log("delivery of reward \(job.rewardID) of app \(job.app) failed (attempt \(job.attempt)): \(error); retry at \(retryAt)\(when)")
        } else {
            log("delivery of reward \(job.rewardID) of app \(job.app) failed (attempt \(job.attempt)): \(error); status \(json["status"].stringValue ?? "?"), the owner is notified\(when)")
        }
        return summary
    }

    /// Says, for each outcome still unrecorded as a run stops (or a pass ends), that only this worker
    /// knows it: a later pass of it records it; otherwise the next start records the attempt
    /// interrupted and calls again.
    private func logUnrecordedLeft(atStop: Bool) {
        for (_, o) in unrecorded.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            let what = "the outcome of reward \(o.job.rewardID) of app \(o.job.app) (attempt \(o.job.attempt): \(o.error.map { "failed, \($0)" } ?? "delivered"))"
            log(atStop
                ? what + " could not be recorded and is lost as the worker stops: it stays fulfilling, and the next start records the attempt interrupted and calls again"
                : what + " could not be recorded in this pass: it stays fulfilling; a later pass of this worker records it, else the next start records the attempt interrupted and calls again")
        }
    }

    /// Records the outcomes that waited (`unrecorded`), each once; those the ledger still cannot
    /// take wait for the next look. A refused one (the reward changed meanwhile) is let go.
    func recordUnrecorded() async -> DeliverySummary {
        var summary = DeliverySummary()
        for (key, o) in unrecorded.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            guard let result = try? await commit(o.command, ledger) else { continue }
            summary += tally(o, result, late: true)
            unrecorded.withLock { _ = $0.removeValue(forKey: key) }
            release(key)
        }
        return summary
    }

    // MARK: - Recording

    /// Submits a worker command with the time the worker observed (through `committer`);
    /// answers nil (and logs) when the ledger could not be written.
    func record(_ type: String, _ job: DeliveryJob, attempt: Int, error: String? = nil) async -> CommandResult? {
        let command = Self.command(type, job, attempt: attempt, error: error, at: configuration.clock())
        do {
            return try await commit(command, ledger)
        } catch {
            recordingFailed.withLock { $0 = true }
            log("could not record \(type) of reward \(job.rewardID) of app \(job.app) (attempt \(attempt)): \(error)")
            return nil
        }
    }

    /// A worker command: `type` for attempt `attempt` of `job`'s reward, observed at `at`.
    static func command(_ type: String, _ job: DeliveryJob, attempt: Int, error: String?, at: Timestamp) -> JSONValue {
        var command: [String: JSONValue] = ["type": .string(type), "app": .string(job.app), "reward_id": .string(job.rewardID),
                                            "attempt": .int(attempt), "at": .string(at.description)]
        if let error { command["error"] = .string(error) }
        return .object(command)
    }

    static func message(_ result: CommandResult) -> String {
        result.json["error"]["message"].stringValue ?? result.text
    }

    private func log(_ line: String) { configuration.log?(line) }

    /// A worker records what it does: over a ledger opened for queries only it does nothing, and
    /// says so (once per run) instead of answering empty summaries without a word.
    private func isWriting() -> Bool {
        if ledger.isClosed {
            log("the ledger in \(ledger.folder) was closed (Ledger.close()): nothing is delivered; give the worker an open Ledger")
            return false
        }
        guard ledger.isReadOnly else { return true }
        log("the ledger in \(ledger.folder) was opened for queries only (Ledger(readingFolder:)): nothing is delivered; give the worker the writing Ledger")
        return false
    }

    // MARK: - In flight

    static func key(_ job: DeliveryJob) -> String { key(app: job.app, rewardID: job.rewardID) }
    static func key(app: String, rewardID: String) -> String { app + "\u{1F}" + rewardID }

    private func isInFlight(_ job: DeliveryJob) -> Bool { inFlight.withLock { $0.contains(Self.key(job)) } }
    private func claim(_ key: String) -> Bool { inFlight.withLock { $0.insert(key).inserted } }
    private func release(_ key: String) { _ = inFlight.withLock { $0.remove(key) } }
}

/// An attempt's outcome as the worker observed it: `delivery.succeeded`, or `delivery.failed` with
/// `error`, at the time the call ended. Kept in `unrecorded` while the ledger cannot record it.
struct ObservedOutcome: Sendable {
    var job: DeliveryJob
    var error: String?
    var at: Timestamp
    var simulated: Bool

    var type: String { error == nil ? "delivery.succeeded" : "delivery.failed" }
    var command: JSONValue { DeliveryWorker.command(type, job, attempt: job.attempt, error: error, at: at) }
}
