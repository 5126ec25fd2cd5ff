import HTTPTestSupport
import Foundation
import HTTPServer
import XCTest

/// Slow handlers and slow clients must not hold anybody else up.
final class ConcurrencyTests: XCTestCase {
    func testSixtyFourSlowHandlersOverlapOnOneWorkerThread() throws {
        try assertSlowHandlersOverlap(threads: 1)
    }

    func testSixtyFourSlowHandlersOverlapOnTheDefaultPool() throws {
        try assertSlowHandlersOverlap(threads: HTTPServer.Configuration().threads)
    }

    private func assertSlowHandlersOverlap(threads: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let probe = ConcurrencyProbe()
        let server = try startServer({ $0.threads = threads }) { request in
            probe.enter()
            try? await Task.sleep(for: .milliseconds(200))
            probe.leave()
            return HTTPResponse(status: 200, body: request.body)
        }
        let count = 64
        let bodies = Collector<(Int, Int, String)>()
        let started = Date()
        runOnThreads(count) { index in
            do {
                let response = try RawHTTPClient.request(
                    port: server.port, "POST", "/slow", body: Array("request \(index)".utf8), timeout: 20)
                bodies.append((index, response.status, response.text))
            } catch {
                bodies.append((index, -1, "\(error)"))
            }
        }
        let elapsed = Date().timeIntervalSince(started)

        let results = bodies.all
        XCTAssertEqual(results.count, count, file: file, line: line)
        for (index, status, text) in results {
            XCTAssertEqual(status, 200, text, file: file, line: line)
            XCTAssertEqual(text, "request \(index)", file: file, line: line)
        }
        XCTAssertEqual(probe.total, count, file: file, line: line)
        // More handlers at once than MHD threads: no handler holds an MHD thread.
        XCTAssertGreaterThan(probe.maximum, threads, "handlers did not overlap", file: file, line: line)
        // Sequential would take 64 x 0.2 s = 12.8 s; this bound is only a sanity check.
        XCTAssertLessThan(elapsed, 10, file: file, line: line)
        print("\(count) requests x 200 ms handler, \(threads) MHD thread(s): \(Int(elapsed * 1000)) ms, "
              + "max \(probe.maximum) handlers at once")
    }

    func testStalledClientsDoNotBlockOthers() throws {
        // One worker thread: if anything blocked it, every other client would hang.
        let server = try startServer({ $0.threads = 1 }) { request in
            HTTPResponse(status: 200, body: request.body.isEmpty ? Array(request.path.utf8) : request.body)
        }
        // Half a body, half a header block, and a bare connection, all stalled.
        let halfBody = try RawHTTPClient(port: server.port)
        try halfBody.send("POST /half HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
        let halfHeaders = try RawHTTPClient(port: server.port)
        try halfHeaders.send("GET /never HTTP/1.1\r\nHost: x\r\nX-Partial: ")
        let silent = try RawHTTPClient(port: server.port)
        _ = silent

        for index in 0..<10 {
            let response = try RawHTTPClient.request(port: server.port, "GET", "/ok/\(index)", timeout: 3)
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.text, "/ok/\(index)")
        }

        // The stalled request was kept, not dropped: finishing it gets it answered.
        try halfBody.send("world")
        let finished = try halfBody.readResponse()
        XCTAssertEqual(finished.status, 200)
        XCTAssertEqual(finished.text, "helloworld")
    }

    func testIdleConnectionIsClosedAfterTheTimeout() throws {
        let log = Collector<String>()
        let server = try startServer({
            $0.connectionTimeoutSeconds = 1
            $0.accessLog = { log.append($0) }
        }) { _ in HTTPResponse(status: 200) }
        let stalled = try RawHTTPClient(port: server.port, timeout: 6)
        try stalled.send("POST /stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        let started = Date()
        XCTAssertTrue(stalled.waitForClose(), "the server should close a connection idle past its timeout")
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertTrue(eventually { log.all.contains { $0.hasPrefix("POST /stalled - ") && $0.hasSuffix("(timed out)") } },
                      "\(log.all)")
    }

    /// A one-thread server echoing paths, with `maxConnections` slots (`perClient` of them for one
    /// address), and two clients stalled halfway through their headers holding two.
    private func serverWithTwoStalledClients(maxConnections: Int, perClient: Int) throws -> (HTTPServer, [RawHTTPClient]) {
        let server = try startServer({
            $0.threads = 1
            $0.maxConnections = maxConnections
            $0.maxConnectionsPerClient = perClient
        }) { request in HTTPResponse(status: 200, body: Array(request.path.utf8)) }
        var stalled: [RawHTTPClient] = []
        for _ in 0..<2 {
            let client = try RawHTTPClient(port: server.port)
            try client.send("GET /stalled HTTP/1.1\r\nHost: x\r\n")
            stalled.append(client)
        }
        usleep(100_000)  // let the server register both
        return (server, stalled)
    }

    func testConnectionLimitHoldsExtraClientsUntilASlotFrees() throws {
        var (server, stalled) = try serverWithTwoStalledClients(maxConnections: 2, perClient: 0)

        let extra = try RawHTTPClient(port: server.port, timeout: 0.5)  // the kernel queues it
        try extra.sendRequest("GET", "/extra")
        XCTAssertThrowsError(try extra.readResponse(), "no slot free: the request must not be served yet")

        stalled.removeFirst()  // closes one stalled connection
        extra.setTimeout(5)
        let response = try extra.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.text, "/extra")
    }

    /// One client address holds at most `maxConnectionsPerClient` connections: a client trickling
    /// bytes on many connections cannot take every slot.
    func testOneClientCannotHoldMoreThanItsShareOfConnections() throws {
        var (server, stalled) = try serverWithTwoStalledClients(maxConnections: 8, perClient: 2)
        let third = try RawHTTPClient(port: server.port, timeout: 2)
        try? third.sendRequest("GET", "/third")
        XCTAssertThrowsError(try third.readResponse(), "a third connection from the same address is refused")
        stalled.removeFirst()
        usleep(100_000)
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "GET", "/after").status, 200)
    }
}
