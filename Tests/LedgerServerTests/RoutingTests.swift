import LedgerCodec
import HTTPTestSupport
@testable import LedgerServer
import XCTest

/// Unknown routes (404), wrong methods (405), and paths matched segment by segment before
/// percent-decoding.
final class RoutingTests: XCTestCase {
    func testUnknownRoutesAre404() throws {
        let f = try ServerFixture()
        for target in ["/", "/v1", "/v2/commands", "/v1/commands/", "/v1//commands", "/v1/apps/acme", "/v1/apps/acme/programs/",
                       "/v1/apps/acme/programs/spring/progress", "/v1/apps/acme/users/u1", "/v1/apps/acme/users/u1/wallet",
                       "/v1/apps/acme/programs/spring/progress/u1/more", "/healthz/x", "/v1/apps/acme/programs/spring/"] {
            let reply = try f.get(target)
            XCTAssertEqual(reply.status, 404, target)
            XCTAssertEqual(reply.errorCode, "not_found", target)
        }
    }

    func testAWrongMethodOnAKnownRouteIs405WithAllow() throws {
        let f = try ServerFixture()
        let cases: [(String, String, String)] = [
            ("GET", "/v1/commands", "POST"), ("PUT", "/v1/commands", "POST"), ("DELETE", "/v1/commands", "POST"),
            ("HEAD", "/v1/commands", "POST"), ("POST", "/healthz", "GET, HEAD"), ("POST", "/v1/events", "GET, HEAD"),
            ("POST", "/v1/apps/acme/programs/spring", "GET, HEAD"), ("DELETE", "/v1/apps/acme/users/u1/rewards", "GET, HEAD"),
            ("GET", "/v1/apps/acme/revenuecat", "POST"), ("POST", "/v1/apps/acme/programs", "GET, HEAD"),
        ]
        for (method, target, allowed) in cases {
            let reply = try f.call(method, target, key: ServerFixture.ownerKey)
            XCTAssertEqual(reply.status, 405, "\(method) \(target)")
            XCTAssertEqual(reply.headers["allow"], allowed, "\(method) \(target)")
            if method != "HEAD" { XCTAssertEqual(reply.errorCode, "method_not_allowed") }  // HEAD: no body
        }
        XCTAssertEqual(f.head, 0)
    }

    func testHEADAnswersWhereGETDoesWithTheSameHeadersAndNoBody() throws {
        let f = try ServerFixture()
        for (target, key) in [("/healthz", nil), ("/v1/events?from=1&limit=2", ServerFixture.readKey),
                              ("/v1/apps/acme/programs/spring", ServerFixture.readKey), ("/v1/apps/acme/programs/nope", ServerFixture.readKey),
                              ("/v1/events", nil)] as [(String, String?)] {
            let get = try f.call("GET", target, key: key)
            // A fresh connection, reading exactly the headers: were a body sent, the next request
            // on it would be misread, so send a second one and expect it answered cleanly.
            let client = try RawHTTPClient(port: f.port)
            var headers: [(String, String)] = []
            if let key { headers.append(("Authorization", "Bearer \(key)")) }
            try client.sendRequest("HEAD", target, headers: headers)
            let head = try client.readResponse(toHead: true)
            try client.sendRequest("GET", "/healthz")
            let after = try client.readResponse()
            XCTAssertEqual(head.status, get.status, target)
            XCTAssertEqual(head.headers["content-length"], String(get.body.count), target)
            XCTAssertEqual(head.headers["content-type"], get.headers["content-type"], target)
            XCTAssertEqual(after.status, 200, "the HEAD answer carried no body: \(target)")
        }
    }

    func testSegmentsArePercentDecodedAfterSplitting() throws {
        XCTAssertEqual(try Route.match(rawPath: "/v1/apps/acme/users/a%2Fb%20c/rewards"), .rewards(app: "acme", user: "a/b c"))
        XCTAssertEqual(try Route.match(rawPath: "/v1/apps/acme/users/a+b/balance"), .balance(app: "acme", user: "a+b"))
        XCTAssertEqual(try Route.match(rawPath: "/v1/apps/acme/programs/spring/progress/%C3%A9%3F%23"),
                       .progress(app: "acme", program: "spring", user: "é?#"))
        XCTAssertEqual(try Route.match(rawPath: "/v1/apps/my%20app/resolve"), .resolve(app: "my app"))
        XCTAssertEqual(try Route.match(rawPath: "/v1/%61pps/acme/audit"), .audit(app: "acme"))
        XCTAssertNil(try Route.match(rawPath: "/v1/apps/acme/users/a/b/rewards"))
        XCTAssertThrowsError(try Route.match(rawPath: "/v1/apps/acme/users/%zz/rewards"))
        XCTAssertThrowsError(try Route.match(rawPath: "/v1/apps/acme/users/%C3/rewards"), "not UTF-8")
    }

    func testBadPercentEncodingIs400() throws {
        let f = try ServerFixture()
        for target in ["/v1/apps/acme/users/%zz/rewards", "/v1/apps/acme/users/%/rewards", "/v1/apps/acme/users/%FF/balance"] {
            let reply = try f.get(target)
            XCTAssertEqual(reply.status, 400, target)
            XCTAssertEqual(reply.errorCode, "invalid_path")
        }
    }
}
