import Delivery
import Dispatch
import Foundation
import HTTPServer
import ReferralLedger

/// `referral-ledger serve` as a library: the HTTP API (`LedgerAPI`) on an `HTTPServer`, one
/// `GroupCommitter` for every request's write, and the delivery worker alongside with a committer
/// of its own (SPEC §10, §11): at the drain deadline the server's committer refuses what is still
/// queued, while the worker must still record the outcomes of the calls it is finishing.
///
/// The server starts in `init` and runs until `shutdown`, which stops accepting connections,
/// lets requests in flight finish (each is answered after its commit), stops the delivery
/// worker (it finishes the calls in flight and records them), and drains the committer. The
/// ledger stays open: its owner closes it by dropping it.
public final class LedgerServer: Sendable {
    public let ledger: Ledger
    public let committer: GroupCommitter
    public let api: LedgerAPI
    public let configuration: Configuration
    /// The port actually bound (useful when 0 was asked for).
    public let port: UInt16

    private let http: HTTPServer
    private let worker: Task<Void, Never>?
    private let workerDone = DispatchSemaphore(value: 0)
    private let workerSummary = SummaryBox()
    private let stop = StopOnce()

    public init(ledger: Ledger, configuration: Configuration) throws {
        self.ledger = ledger
        self.configuration = configuration
        let committer = GroupCommitter(ledger: ledger)
        let api = LedgerAPI(ledger: ledger, committer: committer, keys: configuration.keys)
        let http: HTTPServer
        do {
            var httpConfiguration = configuration.http
            httpConfiguration.screen = { request in api.screen(request) }
            http = try HTTPServer(configuration: httpConfiguration, answering: { request, responder in api.answer(request, with: responder) })
        } catch let error as HTTPServerError {
            committer.drain()
            // In the ledger's own error type, its code kept: invalid_host, invalid_configuration, start_failed.
            throw LedgerError(code: error.code.rawValue, message: error.message)
        } catch {
            committer.drain()
            throw error
        }
        self.committer = committer
        self.api = api
        self.http = http
        port = http.port
        if let delivery = configuration.delivery {
            let deliveryWorker = DeliveryWorker(ledger: ledger, configuration: delivery)
            let done = workerDone, box = workerSummary
            worker = Task {
                box.value = await deliveryWorker.run()
                done.signal()
            }
        } else {
            worker = nil
        }
    }

    /// Puts `keys` in force for the requests that come from now on (see `LedgerAPI.replaceKeys`);
    /// `configuration.keys` stays what the server started with.
    public func replaceKeys(_ keys: APIKeys) {
        api.replaceKeys(keys)
    }

    /// Stops as SIGTERM asks (SPEC §10): no new connections; requests in flight finish and are
    /// answered after their commits (for up to `drainTimeout`; then the commands still queued are
    /// refused with 503 `shutting_down`, not applied, and the batch being decided is answered); the delivery worker
    /// finishes its calls in flight and stops; the committer commits what is queued and stops.
    /// Answers the delivery worker's summary (nil without a worker, or on a second call).
    ///
    /// Blocks the calling thread: call it from a signal source or a plain thread, never from a
    /// request handler or the cooperative pool. Idempotent; a concurrent second call waits.
    @discardableResult
    public func shutdown() -> DeliverySummary? {
        stop.once {
            // At the deadline, commands still queued are refused (503, not applied) rather than
            // answered 503 and committed anyway; the batch being decided is answered for real.
            http.shutdown(drainTimeout: configuration.drainTimeout, atDeadline: { [committer] in committer.refuseQueued() })
            if let worker {
                worker.cancel()
                workerDone.wait()  // it finishes and records the calls in flight first
            }
            committer.drain()
            return workerSummary.value
        } ?? nil
    }

    deinit {
        shutdown()
    }
}

/// Runs the shutdown once; a concurrent caller waits for it to finish.
private final class StopOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false

    func once<T>(_ body: () -> T) -> T? {
        lock.lock()
        defer { lock.unlock() }
        guard !done else { return nil }
        done = true
        return body()
    }
}

/// Carries the worker's summary out of a task; written once before the semaphore is signalled.
private final class SummaryBox: @unchecked Sendable {
    var value: DeliverySummary?
}
