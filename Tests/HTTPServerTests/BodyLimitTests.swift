import HTTPTestSupport
import Foundation
import HTTPServer
import XCTest

/// `maxBodyBytes`: oversized bodies are answered 413 without calling the handler.
final class BodyLimitTests: XCTestCase {
    private let limit = 1024
    private let calls = ConcurrencyProbe()

    private func startLimitedServer() throws -> HTTPServer {
        let calls = self.calls
        return try startServer({ $0.maxBodyBytes = self.limit }) { request in
            calls.enter()
            return HTTPResponse(status: 200, body: request.body)
        }
    }

    private func assertBodyTooLarge(_ response: RawHTTPClient.Response, file: StaticString = #filePath,
                                    line: UInt = #line) throws {
        XCTAssertEqual(response.status, 413, file: file, line: line)
        XCTAssertEqual(response.headers["content-type"], "application/json", file: file, line: line)
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: [String: String]]
        XCTAssertEqual(object?["error"]?["code"], "body_too_large", file: file, line: line)
        XCTAssertNotNil(object?["error"]?["message"], file: file, line: line)
    }

    func testLargeContentLengthIsRejectedBeforeTheBodyIsSent() throws {
        let server = try startLimitedServer()
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        // Only the head: the server must answer from Content-Length alone.
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
        try assertBodyTooLarge(client.readResponse())
        XCTAssertEqual(calls.total, 0)
        XCTAssertTrue(client.waitForClose(), "the rest of the upload is not read: the connection closes")
    }

    /// Under a generous limit a declared length reserves at most a mebibyte up front: a client
    /// declaring exabytes and sending nothing costs the server no memory (it used to abort).
    func testAHugeDeclaredLengthUnderAHugeLimitReservesNothingLarge() throws {
        let server = try startServer({ $0.maxBodyBytes = Int.max }) { request in
            HTTPResponse(status: 200, body: Array(String(request.body.count).utf8))
        }
        do {  // the connection closes at the end of this scope
            let client = try RawHTTPClient(port: server.port, timeout: 5)
            try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4611686018427387904\r\n\r\nabc")
            usleep(100_000)
        }
        let response = try RawHTTPClient.request(port: server.port, "POST", "/after", body: Array("hello".utf8))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.text, "5")
    }

    /// A client that sends a body a little over the limit without waiting (no `Expect`) gets to
    /// send all of it and then reads the 413: the connection is not closed under its upload.
    func testABodyJustOverTheLimitIsReadToTheEndAndAnswered413() throws {
        let server = try startLimitedServer()
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        let body = [UInt8](repeating: UInt8(ascii: "a"), count: limit + 1)
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\n\r\n")
        try client.send(Array(body.prefix(100)))
        usleep(200_000)  // long enough for a server that answered early to have closed
        try client.send(Array(body.dropFirst(100)))
        try assertBodyTooLarge(client.readResponse())
        XCTAssertEqual(calls.total, 0)
    }

    /// Up to 8 MiB over the limit, the declared body is read to its end (not 8 MiB of it), then 413.
    func testABodyNearlyTheAllowanceOverTheLimitIsReadWhole() throws {
        let server = try startLimitedServer()
        let client = try RawHTTPClient(port: server.port, timeout: 10)
        let size = (8 << 20) + 500  // more than 8 MiB in all, less than 8 MiB over the 1 KiB limit
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(size)\r\n\r\n")
        let piece = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
        var sent = 0
        while sent < size {
            let n = min(piece.count, size - sent)
            try client.send(Array(piece.prefix(n)))
            sent += n
        }
        try assertBodyTooLarge(client.readResponse())
        XCTAssertEqual(calls.total, 0)
    }

    func testLargeContentLengthWithExpectContinueGetsNoContinue() throws {
        let server = try startLimitedServer()
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\nExpect: 100-continue\r\n\r\n")
        try assertBodyTooLarge(client.readResponse())  // a 100 here would fail the 413 check
        XCTAssertEqual(calls.total, 0)
    }

    /// A chunked body is dropped as far as 8 MiB past the limit (not 8 MiB in all), then 413.
    func testAChunkedBodyOverEightMebibytesInAllStillGetsIts413() throws {
        let server = try startLimitedServer()
        let client = try RawHTTPClient(port: server.port, timeout: 10)
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        let chunk = Array("100000\r\n".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20) + Array("\r\n".utf8)
        for _ in 0..<8 { try client.send(chunk) }  // 8 MiB, then a little more
        try client.send("200\r\n" + String(repeating: "a", count: 512) + "\r\n0\r\n\r\n")
        try assertBodyTooLarge(client.readResponse())
        XCTAssertEqual(calls.total, 0)
    }

    func testChunkedBodyOverTheLimitIs413() throws {
        let server = try startLimitedServer()
        let client = try RawHTTPClient(port: server.port, timeout: 5)
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        let chunk = String(repeating: "a", count: 512)
        for _ in 0..<8 {  // 4 KiB in 512-byte chunks
            try client.send("200\r\n" + chunk + "\r\n")
        }
        try client.send("0\r\n\r\n")
        try assertBodyTooLarge(client.readResponse())
        XCTAssertEqual(calls.total, 0)

        // The upload was drained, so the connection is still in sync and usable.
        try client.sendRequest("POST", "/after", body: Array("fine".utf8))
        let next = try client.readResponse()
        XCTAssertEqual(next.status, 200)
        XCTAssertEqual(next.text, "fine")
    }

    func testBodyExactlyAtTheLimitIsAccepted() throws {
        let server = try startLimitedServer()
        let body = [UInt8](repeating: 7, count: limit)
        let accepted = try RawHTTPClient.request(port: server.port, "POST", "/upload", body: body)
        XCTAssertEqual(accepted.status, 200)
        XCTAssertEqual(accepted.body, body)

        let rejected = try RawHTTPClient.request(port: server.port, "POST", "/upload", body: body + [7])
        XCTAssertEqual(rejected.status, 413)
        XCTAssertEqual(calls.total, 1)
    }
}
