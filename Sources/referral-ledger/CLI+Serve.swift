import Delivery
import Dispatch
import Foundation
import LedgerCodec
import LedgerServer
import ReferralLedger

extension CLI {
    /// The `serve --help` text (SPEC §10).
    static let serveHelp = """
    referral-ledger serve [--host H] [--port P] [--keys FILE] [--max-body BYTES] [--max-connections-per-client N]
                          [--mail-command CMD] [--mail-timeout S] [--no-deliver]
      The HTTP API, JSON in and out, with the delivery worker inside. This process is the ledger's one
      writer: commands from concurrent requests share durable write transactions, each answered after its
      commit; queries never wait for the writer.
      --host H             address to bind: an IP address or localhost (default 127.0.0.1)
      --port P             TCP port (default 8080; 0 picks a free one, shown in the startup line)
      --keys FILE          a JSON object mapping each API key to its role: "append" (every command but the
                           owner's), "owner" (everything) or "read" (queries only). Without it only
                           /healthz and the RevenueCat webhook answer; the rest is 401. SIGHUP re-reads
                           it: keys added, revoked or given another role take effect without a restart
                           (a file that cannot be used is logged, and the keys in force stay)
      --max-body BYTES     largest request body (default 1048576); larger ones are answered 413
      --max-connections-per-client N
                           connections one client address may hold of the 1024 (default 256; 0: no cap of
                           its own). Behind a reverse proxy every client has the proxy's address: raise it
                           or give 0, and let the proxy cap its clients
      --mail-command CMD   a sendmail-compatible command for owner notifications (see deliver --help)
      --mail-timeout S     time allowed for each run of the mail command, 1–600 seconds (default 30)
      --no-deliver         run no delivery worker (ready rewards wait; `deliver` can run once the server stops,
                           since a data folder has one writing process)
      Routes: POST /v1/commands · GET /v1/apps/{app}/programs · .../programs/{program} · .../programs/{program}/progress/{user}
      · .../programs/{program}/participants · GET /v1/apps/{app}/users/{user}/rewards[?program=P&limit=K&cursor=N] · .../balance
      · GET /v1/apps/{app}/resolve?input= · /v1/apps/{app}/deliveries · /v1/apps/{app}/audit
      · GET /v1/events?from=N&limit=K · POST /v1/apps/{app}/revenuecat · GET /healthz (no key).
      Clients send Authorization: Bearer KEY. One startup line and one access line per request (method, path,
      status, duration; never keys or bodies) go to stderr. SIGTERM or SIGINT: stop accepting, answer the
      requests in flight after their commits, stop the delivery worker, save the state snapshot when due
      (seconds for millions of events), exit 0. The snapshot is also saved every minute when due: 50,000
      events ($REFERRAL_LEDGER_SNAPSHOT_INTERVAL) and an eighth of the log since the last one.
    """

    /// `serve`: the HTTP API (SPEC §10).
    func serve(_ args: [String]) throws -> Int32 {
        let a = try Arguments(args, valued: ["host", "port", "keys", "max-body", "max-connections-per-client", "mail-command", "mail-timeout"],
                              boolean: ["no-deliver", "help"])
        if a.switches.contains("help") {
            print(Self.serveHelp)
            return 0
        }
        var configuration = LedgerServer.Configuration()
        if let host = a.flags["host"] {
            guard !host.isEmpty else { throw Arguments.UsageError(message: "--host needs an address, such as 127.0.0.1") }
            configuration.http.host = host
        }
        if let port = try a.integer("port") {
            guard port <= 65_535 else { throw Arguments.UsageError(message: "--port must be 0 to 65535") }
            configuration.http.port = UInt16(port)
        }
        if let bytes = try a.integer("max-body") {
            guard (1...(1 << 30)).contains(bytes) else { throw Arguments.UsageError(message: "--max-body must be 1 to 1073741824 bytes (1 GiB)") }
            configuration.http.maxBodyBytes = bytes
        }
        if let cap = try a.integer("max-connections-per-client") {
            guard cap <= configuration.http.maxConnections else {
                throw Arguments.UsageError(message: "--max-connections-per-client must be 0 to \(configuration.http.maxConnections)")
            }
            configuration.http.maxConnectionsPerClient = cap
        }
        if let path = a.flags["keys"] {
            do { configuration.keys = try APIKeys(contentsOfFile: path) } catch let invalid as APIKeys.Invalid {
                throw LedgerError(code: "invalid_keys", message: invalid.message)
            }
        }
        let serveLog = ServeLog()
        defer { serveLog.flush() }
        let log: @Sendable (String) -> Void = { line in serveLog.line(line) }
        if a.switches.contains("no-deliver") {
            if let option = ["mail-command", "mail-timeout"].first(where: { a.flags[$0] != nil }) {
                throw Arguments.UsageError(message: "--\(option) is for the delivery worker; it has no use with --no-deliver")
            }
            configuration.delivery = nil
        } else {
            var delivery = DeliveryConfiguration()
            try Self.readMailOptions(a, into: &delivery)
            delivery.log = log
            configuration.delivery = delivery
        }
        configuration.http.accessLog = { line in serveLog.access(line) }
        configuration.http.errorLog = { line in log("http: " + line) }

        // (SIGPIPE is ignored from the start, see `run`: a client gone mid-answer is an error, not a death.)
        // SIGHUP re-reads the keys file; it no longer ends the server as its default action would.
        // Taken from now on: one that comes while the ledger opens (seconds on a long log) is
        // acted on as soon as the server runs, so a key revoked meanwhile is never served.
        signal(SIGHUP, SIG_IGN)
        let hangupQueue = DispatchQueue(label: "serve.sighup")
        let hangup = HangupState()
        let hangups = DispatchSource.makeSignalSource(signal: SIGHUP, queue: hangupQueue)
        hangups.setEventHandler { [keysPath = a.flags["keys"]] in
            guard let server = hangup.server else {
                if keysPath == nil {
                    log("serve: SIGHUP: no --keys file to re-read; nothing changed")
                } else if !hangup.pending {
                    log("serve: SIGHUP while the ledger opens: the keys file is re-read before the server listens")
                }
                hangup.pending = keysPath != nil
                return
            }
            Self.reloadKeys(from: keysPath, into: server, log: log)
        }
        hangups.resume()
        defer { hangups.cancel() }
        // Signals are taken before the server starts, so one arriving early is not lost.
        let stopRequested = DispatchSemaphore(value: 0)
        var sources: [DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stopRequested.signal() }
            source.resume()
            sources.append(source)
        }
        defer { sources.forEach { $0.cancel() } }

        // A new deployment starts on an empty folder; a mistyped --data would too: say so plainly.
        let isNew = !LedgerFolder.holdsLedger(folder)
        let ledger = try openWriter(log: { log("serve: " + $0) })
        // The keys of a SIGHUP during the open are read before the server listens.
        hangupQueue.sync {
            guard hangup.pending, let path = a.flags["keys"] else { return }
            hangup.pending = false
            if let keys = Self.readKeysAgain(from: path, inForce: configuration.keys.count, log: log) { configuration.keys = keys }
        }
        if isNew { log("serve: there was no ledger in \(folder): a new, empty one was created there") }
        for (path, what) in [(a.flags["keys"], "the keys file"), (folder + "/data.mdb", "the ledger's data file (it holds the apps' secrets)")] {
            if let path { Self.warnIfOthersCanRead(path, what, log: log) }
        }
        let server = try LedgerServer(ledger: ledger, configuration: configuration)
        hangupQueue.sync {
            hangup.server = server
            if hangup.pending { Self.reloadKeys(from: a.flags["keys"], into: server, log: log) }
        }
        let shownHost = configuration.http.host.contains(":") && !configuration.http.host.hasPrefix("[") ? "[\(configuration.http.host)]" : configuration.http.host
        // The keys in force: a SIGHUP during the open may have replaced those read at the start.
        let keyCount = server.api.keys.count
        log("serve: listening on http://\(shownHost):\(server.port) (data \(folder); \(keyCount) API key\(keyCount == 1 ? "" : "s")"
            + (keyCount == 0 ? ": only /healthz and the RevenueCat webhook answer" : "")
            + "; delivery worker " + (configuration.delivery == nil ? "off" : "on")
            + (configuration.delivery != nil && configuration.delivery?.mailCommand == nil ? ", no --mail-command: owner notifications stay pending" : "")
            + "); SIGTERM or SIGINT stops it" + (a.flags["keys"] == nil ? "" : ", SIGHUP re-reads the keys file"))

        // A long-running server keeps its state snapshot recent (every 50,000 events or more), so a
        // restart after a crash folds little of the log.
        let snapshots = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        snapshots.schedule(deadline: .now() + 60, repeating: 60)
        snapshots.setEventHandler { Self.saveStateSnapshot(ledger, log: log) }
        snapshots.resume()

        stopRequested.wait()
        snapshots.cancel()
        log("serve: stopping; answering the requests in flight" + (configuration.delivery == nil ? "" : " and finishing the deliveries in flight"))
        let summary = server.shutdown()
        Self.saveStateSnapshot(ledger, log: log)
        let head = try? ledger.currentHead()
        log("serve: stopped at head_position \(head.map { String($0.position) } ?? "?")"
            + (summary.map { " (delivery worker: \($0.json.text))" } ?? ""))
        return 0
    }

    /// SIGHUP: the keys file read again and put in force for the requests that come from now on.
    /// A file that cannot be used changes nothing: the keys in force stay, and the log says why.
    static func reloadKeys(from path: String?, into server: LedgerServer, log: (String) -> Void) {
        guard let path else {
            log("serve: SIGHUP: no --keys file to re-read; nothing changed")
            return
        }
        if let keys = readKeysAgain(from: path, inForce: server.api.keys.count, log: log) { server.replaceKeys(keys) }
    }

    /// The keys file read again for a SIGHUP, and the outcome logged; nil (the `inForce` keys
    /// stay) when it cannot be used.
    static func readKeysAgain(from path: String, inForce: Int, log: (String) -> Void) -> APIKeys? {
        do {
            let keys = try APIKeys(contentsOfFile: path)
            log("serve: SIGHUP: re-read the keys file \(path): \(keys.count) API key\(keys.count == 1 ? "" : "s") in force"
                + (keys.count == 0 ? " (none: only /healthz and the RevenueCat webhook answer; the rest is 401)" : ""))
            warnIfOthersCanRead(path, "the keys file", log: log)
            return keys
        } catch {
            log("serve: SIGHUP: the keys file was not re-read, \(inForce == 1 ? "the 1 API key in force stays" : "the \(inForce) API keys in force stay"): \(error)")
            return nil
        }
    }

    /// What a SIGHUP handler needs to know (read and written on its serial queue only).
    private final class HangupState: @unchecked Sendable {
        var server: LedgerServer?
        var pending = false
    }

    /// API keys and the apps' secrets (in data.mdb) are for the server's user alone.
    static func warnIfOthersCanRead(_ path: String, _ what: String, log: (String) -> Void) {
        var info = stat()
        if stat(path, &info) == 0, info.st_mode & 0o077 != 0 {
            log("serve: warning: \(what) \(path) can be read by other users; chmod go-rwx \(path)")
        }
    }
}
