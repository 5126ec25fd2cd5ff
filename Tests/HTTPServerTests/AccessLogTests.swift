import HTTPTestSupport
import Foundation
import HTTPServer
import XCTest

/// One access-log line per request, and never a secret in it.
final class AccessLogTests: XCTestCase {
    func testOneLinePerRequestWithoutHeadersQueryOrBody() throws {
        let log = Collector<String>()
        let server = try startServer({
            $0.accessLog = { log.append($0) }
            $0.maxBodyBytes = 64
        }) { request in
            .json(request.path == "/missing" ? 404 : 200, Array("{}".utf8))
        }
        let secrets = ["sk_live_HEADER_SECRET", "QUERY_SECRET", "BODY_SECRET", "COOKIE_SECRET"]
        let headers = [("Authorization", "Bearer \(secrets[0])"), ("X-Api-Key", secrets[0]),
                       ("Cookie", "session=\(secrets[3])")]

        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "GET", "/v1/apps/a%20b?api_key=\(secrets[1])",
                                                 headers: headers).status, 200)
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "POST", "/v1/commands", headers: headers,
                                                 body: Array(#"{"key":"\#(secrets[2])"}"#.utf8)).status, 200)
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "GET", "/missing", headers: headers).status, 404)
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "POST", "/big", headers: headers,
                                                 body: [UInt8](repeating: 1, count: 100)).status, 413)

        // Lines are written once the response has gone out, so they may trail the client slightly.
        XCTAssertTrue(eventually { log.all.count >= 4 })
        usleep(50_000)
        let lines = log.all
        XCTAssertEqual(lines.count, 4, "\(lines)")

        // Each request has its line; a loaded machine may write them in another order than sent.
        let expectedPrefixes = ["GET /v1/apps/a%20b 200 ", "POST /v1/commands 200 ", "GET /missing 404 ", "POST /big 413 "]
        for prefix in expectedPrefixes {
            XCTAssertEqual(lines.filter { $0.hasPrefix(prefix) }.count, 1, "one line starts with \(prefix): \(lines)")
        }
        for line in lines {
            XCTAssertNotNil(line.range(of: #"^\S+ \S+ \d{3} \d+\.\dms$"#, options: .regularExpression), line)
            for secret in secrets {
                XCTAssertFalse(line.contains(secret), "\(line) leaks \(secret)")
            }
            XCTAssertFalse(line.contains("?"), "the query string must not be logged: \(line)")
        }
    }

    func testControlCharactersInThePathCannotForgeLogLines() throws {
        let log = Collector<String>()
        let server = try startServer({ $0.accessLog = { log.append($0) } }) { _ in HTTPResponse(status: 200) }
        let client = try RawHTTPClient(port: server.port)
        // A raw tab and a raw DEL inside the request target (MHD accepts them).
        try client.send("GET /a\u{7F}b\tfake HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try? client.readResponse()
        XCTAssertTrue(eventually { !log.all.isEmpty })
        let line = try XCTUnwrap(log.all.first)
        XCTAssertFalse(line.contains("\t") || line.contains("\u{7F}") || line.contains("\n"), line)
    }
}
