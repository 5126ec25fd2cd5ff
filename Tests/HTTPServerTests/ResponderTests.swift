import Foundation
import HTTPServer
import HTTPTestSupport
import XCTest

/// `HTTPServer(configuration:answering:)`: the handler runs on the I/O thread and answers through
/// its responder, at once or later from another thread, once.
final class ResponderTests: XCTestCase {
    private func startAnsweringServer(_ handler: @escaping @Sendable (HTTPRequest, HTTPResponder) -> Void) throws -> HTTPServer {
        signal(SIGPIPE, SIG_IGN)
        let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, threads: 1), answering: handler)
        addTeardownBlock { server.shutdown(drainTimeout: 1) }
        return server
    }

    /// The calling thread's name as the kernel knows it (libmicrohttpd names its threads "MHD-…").
    private static func threadName() -> String {
        let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
        return comm.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testAnswersAtOnceLaterFromAnotherThreadAndOnlyOnce() throws {
        let threads = Collector<String>()
        let server = try startAnsweringServer { request, responder in
            threads.append(Self.threadName())
            switch request.path {
            case "/now":
                responder.respond(.json(200, Array(#"{"when":"now"}"#.utf8)))
                responder.respond(.json(500, Array(#"{"when":"again"}"#.utf8)))  // ignored: answered already
            default:
                let worker = Thread {
                    usleep(100_000)
                    responder.respond(.json(201, Array(#"{"when":"later"}"#.utf8)))
                    responder.respond(.json(500, Array(#"{"when":"again"}"#.utf8)))
                }
                worker.start()
            }
        }
        // One keep-alive connection: each answer is the first one given, and the connection goes on.
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        try client.sendRequest("GET", "/now")
        let first = try client.readResponse()
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(first.text, #"{"when":"now"}"#)
        try client.sendRequest("GET", "/later")
        let second = try client.readResponse()
        XCTAssertEqual(second.status, 201)
        XCTAssertEqual(second.text, #"{"when":"later"}"#)
        try client.sendRequest("GET", "/now")
        XCTAssertEqual(try client.readResponse().text, #"{"when":"now"}"#)
        // The handler ran on libmicrohttpd's I/O thread, not in a task.
        XCTAssertEqual(threads.all.count, 3)
        XCTAssertTrue(threads.all.allSatisfy { $0.hasPrefix("MHD") }, "\(threads.all)")
    }

    func testARequestWhoseResponderNeverAnswersGets503AtShutdown() throws {
        let kept = Collector<HTTPResponder>()
        let server = try startAnsweringServer { _, responder in kept.append(responder) }
        let client = try RawHTTPClient(port: server.port, timeout: 10)
        try client.sendRequest("GET", "/never")
        XCTAssertTrue(eventually { kept.all.count == 1 })
        server.shutdown(drainTimeout: 0.2)
        XCTAssertEqual(try client.readResponse().status, 503)
        // Answering after the server gave up touches nothing.
        kept.all[0].respond(HTTPResponse(status: 200))
    }
}
