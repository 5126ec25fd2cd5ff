import HTTPTestSupport
import Foundation
import LedgerCodec
import ReferralLedger
import XCTest

/// `referral-ledger serve` as a process (SPEC §10): the startup line, the access log, bad keys
/// files, and SIGTERM during a stream of concurrent posts.
final class ServeCommandTests: XCTestCase {
    var folder = ""
    var keysFile = ""

    override func setUpWithError() throws {
        signal(SIGPIPE, SIG_IGN)
        folder = NSTemporaryDirectory() + "ledger-serve-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        keysFile = folder + "/keys.json"
        let keys: JSONValue = [ServerFixture.appendKey: "append", ServerFixture.ownerKey: "owner", ServerFixture.readKey: "read"]
        try Data(keys.bytes).write(to: URL(fileURLWithPath: keysFile))
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    var data: String { folder + "/data" }

    static func post(_ port: UInt16, _ command: JSONValue, connection: RawHTTPClient? = nil) throws -> Reply {
        let headers = [("Authorization", "Bearer \(ServerFixture.appendKey)"), ("Content-Type", "application/json")]
        if let connection {
            try connection.sendRequest("POST", "/v1/commands", headers: headers, body: command.bytes)
            return Reply(try connection.readResponse())
        }
        return Reply(try RawHTTPClient.request(port: port, "POST", "/v1/commands", headers: headers, body: command.bytes))
    }

    func testServeStartsAnswersAndExits0OnSIGTERM() throws {
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile])
        let health = Reply(try RawHTTPClient.request(port: serve.port, "GET", "/healthz"))
        XCTAssertEqual(health.json, ["ok": true, "head_position": 0])
        XCTAssertEqual(try Self.post(serve.port, Commands.verify("u1", id: "p-1")).status, 200)
        XCTAssertEqual(Reply(try RawHTTPClient.request(port: serve.port, "GET", "/v1/events",
                                                       headers: [("Authorization", "Bearer \(ServerFixture.readKey)")])).json["events"].arrayValue?.count, 1)
        serve.signal(SIGTERM)
        XCTAssertEqual(serve.waitForExit(), 0)
        let lines = serve.stderr
        XCTAssertEqual(lines.filter { $0.contains("listening on http://127.0.0.1:\(serve.port)") }.count, 1, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("GET /healthz 200") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("POST /v1/commands 200") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("stopped at head_position 1") }, "\(lines)")
        for line in lines {
            XCTAssertFalse(line.contains(ServerFixture.appendKey) || line.contains(ServerFixture.readKey) || line.contains("u1"), line)
        }
        // The ledger is closed and whole: another process may open it for writing.
        let ledger = try Ledger(folder: data)
        XCTAssertEqual(try ledger.currentHead().position, 1)
    }

    /// Access lines are gathered and written a tenth of a second at a time: each request's line
    /// comes out while the server runs (not only at its end), once, and before the lines logged
    /// after it.
    func testEveryRequestsAccessLineIsWrittenOnceAndInOrder() throws {
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
        let connection = try RawHTTPClient(port: serve.port)
        for n in 0..<300 { XCTAssertEqual(try Self.post(serve.port, Commands.verify("u\(n)", id: "log-\(n)"), connection: connection).status, 200) }
        let deadline = Date().addingTimeInterval(5)
        func answered() -> Int { serve.stderr.filter { $0.contains("POST /v1/commands 200") }.count }
        while answered() < 300, Date() < deadline { usleep(10_000) }
        XCTAssertEqual(answered(), 300, "written while the server runs")
        serve.signal(SIGTERM)
        XCTAssertEqual(serve.waitForExit(), 0)
        let lines = serve.stderr
        XCTAssertEqual(lines.filter { $0.contains("POST /v1/commands 200") }.count, 300)
        let listening = try XCTUnwrap(lines.firstIndex { $0.contains("listening on") })
        let stopping = try XCTUnwrap(lines.firstIndex { $0.contains("serve: stopping") })
        let access = lines.indices.filter { lines[$0].contains("POST /v1/commands") }
        XCTAssertTrue(access.allSatisfy { $0 > listening && $0 < stopping }, "\(lines)")
        // Each line is stamped, and the stamps never go back.
        let stamps = lines.compactMap { $0.split(separator: " ").first.flatMap { Timestamp(rfc3339: String($0)) } }
        XCTAssertEqual(stamps.count, lines.count, "\(lines.filter { $0.split(separator: " ").first.flatMap { Timestamp(rfc3339: String($0)) } == nil })")
        XCTAssertEqual(stamps, stamps.sorted())
    }

    /// A keys file others can read is served, with a warning naming it; a private one is not warned about.
    func testAKeysFileOthersCanReadIsWarnedAbout() throws {
        for (mode, warned) in [(0o644, true), (0o600, false)] as [(Int, Bool)] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: keysFile)
            let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
            serve.signal(SIGTERM)
            XCTAssertEqual(serve.waitForExit(), 0)
            let warning = serve.stderr.contains { $0.contains("warning: the keys file \(self.keysFile) can be read by other users") }
            XCTAssertEqual(warning, warned, "\(mode): \(serve.stderr)")
        }
    }

    /// SIGHUP re-reads the keys file: a revoked key is refused from then on, a new one and a changed
    /// role take effect, the server and its ledger carry on; a file that cannot be used changes nothing.
    func testSIGHUPReReadsTheKeysFile() throws {
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
        func events(_ key: String) throws -> Int {
            try Reply(RawHTTPClient.request(port: serve.port, "GET", "/v1/events", headers: [("Authorization", "Bearer \(key)")])).status
        }
        func hangUp(expecting text: String) {
            let before = serve.stderr.filter { $0.contains(text) }.count
            serve.signal(SIGHUP)
            let deadline = Date().addingTimeInterval(20)
            while serve.stderr.filter({ $0.contains(text) }).count == before, Date() < deadline { usleep(10_000) }
        }
        XCTAssertEqual(try Self.post(serve.port, Commands.verify("u1")).status, 200)
        XCTAssertEqual(try events(ServerFixture.readKey), 200)

        // The append key is revoked, the read key becomes an owner key, a new read key is added.
        let rotated: JSONValue = ["rotated-read-key-0123456789": "read", ServerFixture.readKey: "owner"]
        try Data(rotated.bytes).write(to: URL(fileURLWithPath: keysFile))
        hangUp(expecting: "re-read the keys file")
        XCTAssertEqual(try Self.post(serve.port, Commands.verify("u2")).status, 401, "the revoked append key")
        XCTAssertEqual(try events("rotated-read-key-0123456789"), 200)
        let configure: JSONValue = ["type": "app.configure", "app": "app", "at": "2026-03-01T00:00:00Z", "settings": ["friend_referrals_enabled": true]]
        let asOwner = try Reply(RawHTTPClient.request(port: serve.port, "POST", "/v1/commands",
                                                      headers: [("Authorization", "Bearer \(ServerFixture.readKey)")], body: configure.bytes))
        XCTAssertEqual(asOwner.status, 200, "the read key is an owner key now: \(asOwner.text)")

        // A file that cannot be used (here a key and its role swapped): logged without the key, and
        // the keys in force stay.
        try Data(#"{"admin": "some-key"}"#.utf8).write(to: URL(fileURLWithPath: keysFile))
        hangUp(expecting: "was not re-read")
        XCTAssertEqual(try events("rotated-read-key-0123456789"), 200)
        XCTAssertEqual(try events("some-key"), 401)
        try FileManager.default.removeItem(atPath: keysFile)
        hangUp(expecting: "cannot read the keys file")
        XCTAssertEqual(try events("rotated-read-key-0123456789"), 200)

        serve.signal(SIGTERM)
        XCTAssertEqual(serve.waitForExit(), 0)
        let lines = serve.stderr
        XCTAssertTrue(lines.contains { $0.contains("SIGHUP: re-read the keys file \(keysFile): 2 API keys in force") }, "\(lines)")
        XCTAssertEqual(lines.filter { $0.contains("the 2 API keys in force stay") }.count, 2, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("stopped at head_position 2") }, "\(lines)")
        for line in lines { XCTAssertFalse(line.contains("some-key") || line.contains("rotated-read-key"), line) }
    }

    /// Without a keys file there is nothing to re-read: SIGHUP is logged and the server carries on.
    func testSIGHUPWithoutAKeysFileChangesNothing() throws {
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--no-deliver"])
        serve.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(20)
        while !serve.stderr.contains(where: { $0.contains("no --keys file to re-read") }), Date() < deadline { usleep(10_000) }
        XCTAssertEqual(Reply(try RawHTTPClient.request(port: serve.port, "GET", "/healthz")).status, 200)
        serve.signal(SIGTERM)
        XCTAssertEqual(serve.waitForExit(), 0)
        XCTAssertTrue(serve.stderr.contains { $0.contains("SIGHUP: no --keys file to re-read; nothing changed") }, "\(serve.stderr)")
    }

    func testABadKeysFileIsAClearStartupError() throws {
        try Data(#"{"some-key": "admin"}"#.utf8).write(to: URL(fileURLWithPath: keysFile))
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile], waitForPort: false)
        XCTAssertEqual(serve.waitForExit(), 1)
        let text = serve.stderr.joined(separator: "\n")
        XCTAssertTrue(text.contains("invalid_keys"), text)
        XCTAssertTrue(text.contains(keysFile), text)
        XCTAssertFalse(text.contains("some-key"), text)
        XCTAssertFalse(text.contains("listening"), text)

        let missing = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", folder + "/none.json"], waitForPort: false)
        XCTAssertEqual(missing.waitForExit(), 1)
        XCTAssertTrue(missing.stderr.joined().contains("none.json"))
    }

    func testAPortInUseABusyFolderOrABadFlagIsAStartupError() throws {
        let first = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
        // The same data folder: it has one writer.
        let busy = try ServeProcess(folder: data, arguments: ["--port", "0", "--no-deliver"], waitForPort: false)
        XCTAssertEqual(busy.waitForExit(), 1)
        XCTAssertTrue(busy.stderr.joined().contains("ledger_busy"), busy.stderr.joined())
        // Another folder, the same port.
        let taken = try ServeProcess(folder: folder + "/other", arguments: ["--port", String(first.port), "--no-deliver"], waitForPort: false)
        XCTAssertEqual(taken.waitForExit(), 1)
        XCTAssertTrue(taken.stderr.joined().contains("cannot listen on 127.0.0.1:\(first.port)"), taken.stderr.joined())
        for arguments in [["--port", "70000"], ["--max-body", "0"], ["--max-connections-per-client", "5000"], ["--max-connections-per-client", "-1"], ["--no-deliver", "--mail-command", "sendmail -t"], ["--bogus"], ["extra"]] {
            let refused = try ServeProcess(folder: folder + "/other", arguments: arguments, waitForPort: false)
            XCTAssertEqual(refused.waitForExit(), 2, "\(arguments): \(refused.stderr)")
        }
        // The first server is unaffected.
        XCTAssertEqual(try Self.post(first.port, Commands.verify("u1")).status, 200)
        first.signal(SIGINT)
        XCTAssertEqual(first.waitForExit(), 0)
    }

    func testSIGTERMDuringConcurrentPostsLosesNoAnsweredCommand() throws {
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
        let stream = PostStream(port: serve.port)
        stream.waitForAnswers(400)
        serve.signal(SIGTERM)
        XCTAssertEqual(serve.waitForExit(), 0, serve.stderr.suffix(5).joined(separator: "\n"))
        let (answered, unanswered) = try stream.finish()
        print("SIGTERM test: \(answered.count) answered 200, \(unanswered.count) unanswered")
        let stoppedLine = try XCTUnwrap(serve.stderr.first { $0.contains("stopped at head_position") })
        let stoppedHead = Int(stoppedLine.split(separator: "head_position ").last!.prefix(while: \.isNumber))!
        XCTAssertGreaterThanOrEqual(stoppedHead, answered.count, "every 200 answer was committed")
        try checkAfterRestart(answered: answered, unanswered: unanswered, headBefore: stoppedHead)
    }

    /// Rule 3 of the guide for `serve`: kill -9 in the middle of a stream of concurrent posts
    /// loses no command the server answered 200, and leaves projections that agree with the log
    /// (the restart opens it without a rebuild, and `verify` compares them with a fresh fold).
    func testSIGKILLDuringConcurrentPostsLosesNoAnsweredCommand() throws {
        let serve = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
        let stream = PostStream(port: serve.port)
        stream.waitForAnswers(400)
        serve.signal(SIGKILL)
        XCTAssertEqual(serve.waitForExit(), SIGKILL, "killed by the signal")
        XCTAssertEqual(serve.process.terminationReason, .uncaughtSignal)
        let (answered, unanswered) = try stream.finish()
        print("SIGKILL test: \(answered.count) answered 200, \(unanswered.count) unanswered")
        XCTAssertGreaterThanOrEqual(answered.count, 400)
        // What the killed server left, read before anything opens it for writing.
        let left = try Ledger(readingFolder: data)
        let head = Int(try left.currentHead().position)
        XCTAssertEqual(try left.status()["projections"]["state"], "current", "projections at the head of the log, no rebuild needed")
        XCTAssertGreaterThanOrEqual(head, answered.count, "every 200 answer was committed")
        let report = try left.verify()
        XCTAssertTrue(report.isClean, "as killed: chain, rules and projections against a fresh fold\n" + report.text)
        try checkAfterRestart(answered: answered, unanswered: unanswered, headBefore: head)
    }

    /// Restarts the server on the stopped ledger: every answered command is there (a duplicate at
    /// its first position); the unanswered ones are either wholly in (duplicate) or wholly out
    /// (decided now); the log then holds each command once and verifies clean.
    private func checkAfterRestart(answered: [(String, Int64)], unanswered: [String], headBefore: Int,
                                   file: StaticString = #filePath, line: UInt = #line) throws {
        let again = try ServeProcess(folder: data, arguments: ["--port", "0", "--keys", keysFile, "--no-deliver"])
        let connection = try RawHTTPClient(port: again.port, timeout: 30)
        for (id, position) in answered {
            let reply = try Self.post(again.port, Commands.verify("user-\(id)", id: id), connection: connection)
            XCTAssertEqual(reply.status, 200, reply.text, file: file, line: line)
            XCTAssertEqual(reply.json["duplicate"], true, id, file: file, line: line)
            XCTAssertEqual(reply.json["position"].intValue, position, id, file: file, line: line)
        }
        var wereIn = 0
        for id in unanswered {
            let reply = try Self.post(again.port, Commands.verify("user-\(id)", id: id), connection: connection)
            XCTAssertEqual(reply.status, 200, reply.text, file: file, line: line)
            if reply.json["duplicate"].boolValue == true { wereIn += 1 }
        }
        XCTAssertEqual(headBefore, answered.count + wereIn, "the log holds exactly the answered commands and the unanswered ones that were in", file: file, line: line)
        let health = Reply(try RawHTTPClient.request(port: again.port, "GET", "/healthz"))
        XCTAssertEqual(health.json["head_position"].intValue, Int64(answered.count + unanswered.count), "each command exactly once", file: file, line: line)
        again.signal(SIGTERM)
        XCTAssertEqual(again.waitForExit(), 0, file: file, line: line)

        let report = try Ledger(readingFolder: data).verify()
        XCTAssertTrue(report.isClean, report.text, file: file, line: line)
        XCTAssertEqual(report.events, UInt64(answered.count + unanswered.count), file: file, line: line)
    }
}

/// Eight clients posting `account.verify` commands (each with its own id) on kept-alive
/// connections until the server goes away, each noting which commands were answered 200 (with
/// their position) and which were not (an error, a 503, a connection closed).
private final class PostStream: @unchecked Sendable {
    let answered = Collector<(String, Int64)>()
    let unanswered = Collector<String>()
    private let finished = DispatchSemaphore(value: 0)

    init(port: UInt16, clients: Int = 8) {
        let answered = self.answered, unanswered = self.unanswered, finished = self.finished
        let workers = Thread {
            runOnThreads(clients) { client in
                var connection: RawHTTPClient?
                for n in 0..<100_000 {
                    let id = "t\(client)-\(n)"
                    if connection == nil {
                        // Refused: the server has stopped listening; this client is done.
                        guard let fresh = try? RawHTTPClient(port: port, timeout: 30) else { return }
                        connection = fresh
                    }
                    do {
                        let reply = try ServeCommandTests.post(port, Commands.verify("user-\(id)", id: id), connection: connection)
                        if reply.status == 200, let position = reply.json["position"].intValue {
                            answered.append((id, position))
                        } else {
                            unanswered.append(id)
                        }
                        if reply.headers["connection"]?.lowercased() == "close" { connection = nil }
                    } catch {
                        unanswered.append(id)
                        connection = nil
                    }
                }
            }
            finished.signal()
        }
        workers.start()
    }

    /// Lets a stream build up (at most a minute).
    func waitForAnswers(_ count: Int) {
        let deadline = Date().addingTimeInterval(60)
        while answered.all.count < count, Date() < deadline { usleep(2_000) }
    }

    /// Waits for every client to stop (the server is gone) and answers what each command got.
    func finish() throws -> (answered: [(String, Int64)], unanswered: [String]) {
        guard finished.wait(timeout: .now() + 60) == .success else { throw NSError(domain: "PostStream", code: 1, userInfo: [NSLocalizedDescriptionKey: "the clients did not stop within a minute"]) }
        return (answered.all, unanswered.all)
    }
}
