import LedgerCodec
@testable import LedgerServer
import XCTest

/// Unknown routes (404), wrong methods (405), and paths matched segment by segment before
/// percent-decoding.
final class RoutingTests: XCTestCase {
    func testUnknownRoutesAre404() throws {
        let f = try ServerFixture()
        for target in ["/", "/v1", "/v2/commands", "/v1/commands/", "/v1//commands", "/v1/apps/acme", "/v1/apps/acme/programs",
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
            ("POST", "/healthz", "GET"), ("POST", "/v1/events", "GET"), ("POST", "/v1/apps/acme/programs/spring", "GET"),
            ("DELETE", "/v1/apps/acme/users/u1/rewards", "GET"), ("GET", "/v1/apps/acme/revenuecat", "POST"),
        ]
        for (method, target, allowed) in cases {
            let reply = try f.call(method, target, key: ServerFixture.ownerKey)
            XCTAssertEqual(reply.status, 405, "\(method) \(target)")
            XCTAssertEqual(reply.headers["allow"], allowed, "\(method) \(target)")
            XCTAssertEqual(reply.errorCode, "method_not_allowed")
        }
        XCTAssertEqual(f.head, 0)
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
