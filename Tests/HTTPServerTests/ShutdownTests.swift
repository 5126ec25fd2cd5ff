import HTTPTestSupport
import Foundation
import HTTPServer
import XCTest

/// `shutdown(drainTimeout:)`: refuse new connections, answer the in-flight ones, stop.
final class ShutdownTests: XCTestCase {
    func testShutdownAnswersInFlightRequestsAndRefusesNewConnections() throws {
        let gate = Gate()
        let probe = ConcurrencyProbe()
        let server = try startServer { request in
            probe.enter()
            await gate.wait()
            probe.leave()
            return HTTPResponse(status: 200, body: request.body)
        }
        let port = server.port
        let inFlight = 8
        let results = Collector<(Int, Int, String)>()
        let clientsDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            runOnThreads(inFlight) { index in
                do {
                    let response = try RawHTTPClient.request(
                        port: port, "POST", "/work", body: Array("job \(index)".utf8), timeout: 20)
                    results.append((index, response.status, response.text))
                } catch {
                    results.append((index, -1, "\(error)"))
                }
            }
            clientsDone.signal()
        }
        XCTAssertTrue(eventually { probe.current == inFlight }, "all requests should reach the handler")

        let shutdownReturned = Guarded(false)
        let shutdownDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            server.shutdown(drainTimeout: 20)
            shutdownReturned.withLock { $0 = true }
            shutdownDone.signal()
        }

        // While draining: new connections are refused, the old ones wait for their handlers.
        XCTAssertTrue(eventually {
            do { _ = try RawHTTPClient(port: port, timeout: 1); return false } catch { return true }
        }, "new connections must be refused once shutdown begins")
        XCTAssertThrowsError(try RawHTTPClient(port: port, timeout: 1)) { error in
            XCTAssertTrue((error as? RawHTTPClient.Failure)?.isConnectionRefused ?? false, "\(error)")
        }
        XCTAssertFalse(shutdownReturned.withLock { $0 }, "shutdown must wait for in-flight handlers")

        gate.open()
        XCTAssertEqual(shutdownDone.wait(timeout: .now() + 20), .success)
        XCTAssertEqual(clientsDone.wait(timeout: .now() + 20), .success)

        let answered = results.all
        XCTAssertEqual(answered.count, inFlight)
        for (index, status, text) in answered {
            XCTAssertEqual(status, 200, text)
            XCTAssertEqual(text, "job \(index)")
        }
        XCTAssertThrowsError(try RawHTTPClient(port: port, timeout: 1)) { error in
            XCTAssertTrue((error as? RawHTTPClient.Failure)?.isConnectionRefused ?? false, "\(error)")
        }
    }

    func testHandlersStillRunningAtTheDrainDeadlineGet503() throws {
        let finishedLate = ConcurrencyProbe()
        let server = try startServer { _ in
            try? await Task.sleep(for: .seconds(2))
            finishedLate.enter()  // runs after the daemon is gone: must not touch the connection
            return HTTPResponse(status: 200)
        }
        let port = server.port
        let client = try RawHTTPClient(port: port, timeout: 10)
        try client.sendRequest("GET", "/slow")
        usleep(200_000)  // let the handler start

        let started = Date()
        server.shutdown(drainTimeout: 0.3)
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.5, "shutdown must honour its drain timeout")

        let response = try client.readResponse()
        XCTAssertEqual(response.status, 503)
        XCTAssertTrue(response.text.contains("shutting_down"), response.text)
        // The abandoned handler finishes later without crashing anything.
        XCTAssertTrue(eventually(timeout: 5) { finishedLate.total == 1 })
        usleep(100_000)
    }

    func testShutdownIsIdempotentAndSafeToCallConcurrently() throws {
        let server = try startServer { _ in HTTPResponse(status: 200) }
        let port = server.port
        XCTAssertEqual(try RawHTTPClient.request(port: port, "GET", "/").status, 200)

        let returned = ConcurrencyProbe()
        runOnThreads(4) { _ in
            server.shutdown(drainTimeout: 1)
            returned.enter()
        }
        server.shutdown()
        XCTAssertEqual(returned.total, 4)
        XCTAssertThrowsError(try RawHTTPClient(port: port, timeout: 1))
    }

    func testShutdownFromADispatchSignalSource() throws {
        let server = try startServer { _ in HTTPResponse(status: 200) }
        let port = server.port
        let stopped = DispatchSemaphore(value: 0)
        let signalQueue = DispatchQueue(label: "signals")
        signal(SIGUSR1, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: signalQueue)
        source.setEventHandler {
            server.shutdown(drainTimeout: 2)
            stopped.signal()
        }
        // Registration is asynchronous; a signal sent before it completes is ignored.
        let registered = DispatchSemaphore(value: 0)
        source.setRegistrationHandler { registered.signal() }
        source.resume()
        defer { source.cancel() }
        XCTAssertEqual(registered.wait(timeout: .now() + 5), .success)

        kill(getpid(), SIGUSR1)
        XCTAssertEqual(stopped.wait(timeout: .now() + 5), .success)
        XCTAssertThrowsError(try RawHTTPClient(port: port, timeout: 1))
    }
}
