import HTTPTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import XCTest

/// Requests in, responses out: decoding, bodies, headers, framing.
final class RequestHandlingTests: XCTestCase {
    func testGetDecodesPercentEncodedPathAndQuery() throws {
        let seen = Collector<HTTPRequest>()
        let server = try startServer { request in
            seen.append(request)
            return .json(200, Array("{}".utf8))
        }
        let response = try RawHTTPClient.request(
            port: server.port, "GET",
            "/v1/apps/a%20b/rewards?x=1&name=J%C3%B6rg&plus=a+b&x=2&empty&pct=100%25&=skip")
        XCTAssertEqual(response.status, 200)

        let request = try XCTUnwrap(seen.all.first)
        XCTAssertEqual(request.method, "GET")
        XCTAssertEqual(request.path, "/v1/apps/a b/rewards")
        XCTAssertEqual(request.rawPath, "/v1/apps/a%20b/rewards")
        XCTAssertEqual(request.query, [
            "x": "1", "name": "Jörg", "plus": "a b", "empty": "", "pct": "100%", "": "skip",
        ])
        XCTAssertEqual(request.body, [])
    }

    func testOddTargetsDecodeLeniently() throws {
        let seen = Collector<HTTPRequest>()
        let server = try startServer { request in
            seen.append(request)
            return HTTPResponse(status: 200)
        }
        // Malformed escapes stay literal, "+" is a plus in paths, %2F decodes to "/".
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "GET", "/a+b/%zz/%4/x%2Fy?q=%zz+1").status, 200)
        // Absolute form is legal in a request line; only its path and query count.
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "DELETE", "http://example.com/abs/p?k=v").status, 200)

        let requests = seen.all
        XCTAssertEqual(requests.count, 2)
        XCTAssertEqual(requests.first?.path, "/a+b/%zz/%4/x/y")
        XCTAssertEqual(requests.first?.rawPath, "/a+b/%zz/%4/x%2Fy")
        XCTAssertEqual(requests.first?.query, ["q": "%zz 1"])
        XCTAssertEqual(requests.last?.method, "DELETE")
        XCTAssertEqual(requests.last?.path, "/abs/p")
        XCTAssertEqual(requests.last?.query, ["k": "v"])
    }

    func testHeadersAreLowercasedAndLookedUpCaseInsensitively() throws {
        let seen = Collector<HTTPRequest>()
        let server = try startServer { request in
            seen.append(request)
            return HTTPResponse(status: 204)
        }
        let response = try RawHTTPClient.request(
            port: server.port, "GET", "/h",
            headers: [("X-Request-ID", "abc-123"), ("X-Dup", "1"), ("x-dup", "2")])
        XCTAssertEqual(response.status, 204)

        let request = try XCTUnwrap(seen.all.first)
        XCTAssertEqual(request.headers["x-request-id"], "abc-123")
        XCTAssertNil(request.headers["X-Request-ID"])
        XCTAssertEqual(request.header("X-REQUEST-id"), "abc-123")
        XCTAssertEqual(request.header("x-dup"), "1, 2")
        XCTAssertEqual(request.header("host"), "127.0.0.1")
    }

    func testAFieldValueLeavesOutTheSpacesAndTabsAroundItOnly() {
        let request = HTTPRequest(method: "GET", path: "/", rawPath: "/", headers: ["authorization": " \tBearer  k 1\t "])
        XCTAssertEqual(request.fieldValue("Authorization"), Array("Bearer  k 1".utf8))
        XCTAssertEqual(request.header("authorization"), " \tBearer  k 1\t ")
        XCTAssertNil(request.fieldValue("x-missing"))
        XCTAssertEqual(HTTPRequest.trimmingSpacesAndTabs(Array(" \t \t".utf8)), [])
        XCTAssertEqual(HTTPRequest.trimmingSpacesAndTabs(Array("a".utf8)), Array("a".utf8))
        XCTAssertEqual(HTTPRequest.trimmingSpacesAndTabs(Array("\n a \n".utf8)), Array("\n a \n".utf8))
        XCTAssertEqual(HTTPRequest.trimmingSpacesAndTabs(Array(" 12 ".utf8)[1...]), Array("12".utf8))
    }

    func testPostBodyIsEchoedByteForByte() throws {
        let server = try startServer { request in
            HTTPResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: request.body)
        }
        var generator = SystemRandomNumberGenerator()
        let body = (0..<200_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let response = try RawHTTPClient.request(port: server.port, "POST", "/echo", body: body)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.headers["content-length"], "200000")
        XCTAssertEqual(response.headers["content-type"], "application/octet-stream")
        XCTAssertEqual(response.body, body)
    }

    func testChunkedPostBodyIsReassembled() throws {
        let server = try startServer { request in
            HTTPResponse(status: 200, body: request.body)
        }
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + "5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.text, "hello world")
    }

    func testJSONResponseCarriesContentTypeAndContentLength() throws {
        let server = try startServer { _ in .json(201, Array(#"{"ok":true}"#.utf8)) }
        let response = try RawHTTPClient.request(port: server.port, "GET", "/json")
        XCTAssertEqual(response.status, 201)
        XCTAssertEqual(response.headers["content-type"], "application/json")
        XCTAssertEqual(response.headers["content-length"], "11")
        XCTAssertEqual(response.text, #"{"ok":true}"#)
    }

    func testResponseHeadersPassThroughAndUnsafeOnesAreDropped() throws {
        let server = try startServer { request in
            if request.path == "/bad-status" { return HTTPResponse(status: 42) }
            return HTTPResponse(status: 202, headers: [
                ("X-Request-Id", "r-1"),
                ("X-Injected", "a\r\nSet-Cookie: evil=1"),
                ("Content-Length", "9999"),
            ], body: Array("ok".utf8))
        }
        let response = try RawHTTPClient.request(port: server.port, "GET", "/")
        XCTAssertEqual(response.status, 202)
        XCTAssertEqual(response.headers["x-request-id"], "r-1")
        XCTAssertNil(response.headers["x-injected"])
        XCTAssertNil(response.headers["set-cookie"])
        XCTAssertEqual(response.headers["content-length"], "2")
        XCTAssertEqual(response.text, "ok")

        let invalid = try RawHTTPClient.request(port: server.port, "GET", "/bad-status")
        XCTAssertEqual(invalid.status, 500)
    }

    func testKeepAliveConnectionServesSeveralRequests() throws {
        let server = try startServer { request in
            HTTPResponse(status: 200, body: Array(request.path.utf8))
        }
        let client = try RawHTTPClient(port: server.port)
        for index in 0..<5 {
            try client.sendRequest("GET", "/n/\(index)")
            let response = try client.readResponse()
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.text, "/n/\(index)")
        }
    }

    func testMalformedRequestIsRejectedAndServerKeepsServing() throws {
        let calls = ConcurrencyProbe()
        let server = try startServer { _ in
            calls.enter()
            return HTTPResponse(status: 200)
        }
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        try client.send("GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: banana\r\n\r\n")
        let rejected = try client.readResponse()
        XCTAssertEqual(rejected.status, 400)
        XCTAssertEqual(calls.total, 0)

        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "GET", "/fine").status, 200)
        XCTAssertEqual(calls.total, 1)
    }

    /// A body whose length is ambiguous (two Content-Lengths, or one with Transfer-Encoding) is
    /// refused before it is read and the connection closed: the bytes after what one reading takes
    /// for the body must never run as a second request (request smuggling).
    func testAmbiguousBodyLengthsAreRefusedAndTheConnectionClosed() throws {
        let calls = ConcurrencyProbe()
        let server = try startServer { _ in
            calls.enter()
            return HTTPResponse(status: 200)
        }
        let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        for framing in ["Content-Length: 2\r\nContent-Length: \(2 + smuggled.utf8.count)",
                        "Content-Length: 2\r\nTransfer-Encoding: chunked"] {
            let client = try RawHTTPClient(port: server.port, timeout: 5)
            try client.send("POST /x HTTP/1.1\r\nHost: x\r\n\(framing)\r\n\r\n{}" + smuggled)
            let rejected = try client.readResponse()
            XCTAssertEqual(rejected.status, 400, framing)
            XCTAssertTrue(rejected.text.contains("bad_request"), rejected.text)
            XCTAssertTrue(client.waitForClose(), "the connection is closed after the refusal: \(framing)")
        }
        XCTAssertEqual(calls.total, 0, "neither the request nor the smuggled one reached the handler")
        XCTAssertEqual(try RawHTTPClient.request(port: server.port, "POST", "/fine", body: Array("{}".utf8)).status, 200)
    }

    /// A transfer coding other than plain `chunked` (gzip, or gzip then chunked) cannot be framed:
    /// refused at once with a JSON message naming it (not left waiting for a body never read).
    func testTransferCodingsOtherThanChunkedAreRefusedAtOnce() throws {
        let calls = ConcurrencyProbe()
        let server = try startServer { _ in
            calls.enter()
            return HTTPResponse(status: 200)
        }
        for (coding, body) in [("gzip", "{}"), ("gzip, chunked", "2\r\n{}\r\n0\r\n\r\n"), ("identity", "{}"),
                               ("chunked ", "2\r\n{}\r\n0\r\n\r\n"), ("chunked\t", "2\r\n{}\r\n0\r\n\r\n"),
                               ("chun ked", "2\r\n{}\r\n0\r\n\r\n")] {
            let client = try RawHTTPClient(port: server.port, timeout: 5)
            try client.send("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \(coding)\r\n\r\n" + body)
            let rejected = try client.readResponse()
            XCTAssertEqual(rejected.status, 400, coding)
            let error = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(rejected.body)) as? [String: [String: String]])
            XCTAssertEqual(error["error"]?["code"], "bad_request")
            let shown = coding.filter { $0 != "\t" }  // (the message shows printable characters only)
            XCTAssertEqual(error["error"]?["message"]?.contains("Transfer-Encoding \"\(shown)\" is not supported"), true, rejected.text)
            XCTAssertTrue(client.waitForClose(), "the connection is closed after the refusal: \(coding)")
        }
        // HTTP/1.0 has no transfer codings (RFC 9112 §6.1): faulty framing, refused and closed.
        let old = try RawHTTPClient(port: server.port, timeout: 5)
        try old.send("POST /x HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        XCTAssertEqual(try old.readResponse().status, 400)
        XCTAssertTrue(old.waitForClose())
        XCTAssertEqual(calls.total, 0)
        // Plain chunked, in any case, is read.
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        try client.send("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 200)
        XCTAssertEqual(calls.total, 1)
    }

    func testURLSessionClientGetsJSON() async throws {
        let server = try startServer { request in
            .json(200, Array(#"{"path":"\#(request.path)"}"#.utf8))
        }
        let url = try XCTUnwrap(URL(string: "http://127.0.0.1:\(server.port)/hello%20world?a=1"))
        let (data, response) = try await URLSession.shared.data(from: url)
        let http = try XCTUnwrap(response as? HTTPURLResponse)
        XCTAssertEqual(http.statusCode, 200)
        XCTAssertEqual(http.value(forHTTPHeaderField: "Content-Type"), "application/json")
        let object = try JSONSerialization.jsonObject(with: data) as? [String: String]
        XCTAssertEqual(object, ["path": "/hello world"])
    }

    func testPortZeroBindsAFreePortAndInvalidHostsAreRejected() throws {
        let server = try startServer { _ in HTTPResponse(status: 200) }
        XCTAssertNotEqual(server.port, 0)

        XCTAssertThrowsError(try HTTPServer(configuration: .init(host: "example.com", port: 0)) { _ in
            HTTPResponse(status: 200)
        }) { error in
            XCTAssertEqual((error as? HTTPServerError)?.code, .invalidHost)
        }
    }

    func testBindingAPortInUseThrows() throws {
        let first = try startServer { _ in HTTPResponse(status: 200) }
        XCTAssertThrowsError(try HTTPServer(configuration: .init(port: first.port)) { _ in
            HTTPResponse(status: 200)
        }) { error in
            let serverError = error as? HTTPServerError
            XCTAssertEqual(serverError?.code, .startFailed)
            XCTAssertTrue(serverError?.message.contains("\(first.port)") ?? false, "\(error)")
        }
    }

    func testLocalhostAndIPv6LoopbackCanBeBound() throws {
        let viaName = try startServer({ $0.host = "localhost" }) { _ in HTTPResponse(status: 200) }
        XCTAssertEqual(try RawHTTPClient.request(port: viaName.port, "GET", "/").status, 200)

        try XCTSkipUnless(Self.hasIPv6Loopback(), "no IPv6 loopback on this host")
        let v6 = try startServer({ $0.host = "::1" }) { _ in HTTPResponse(status: 200) }
        XCTAssertNotEqual(v6.port, 0)
        // Bound to ::1 only: the IPv4 loopback on that port is not ours.
        XCTAssertThrowsError(try RawHTTPClient(port: v6.port, timeout: 2))
    }

    private static func hasIPv6Loopback() -> Bool {
        let probe = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { close(probe) }
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_addr = in6addr_loopback
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(probe, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) == 0
            }
        }
    }
}
