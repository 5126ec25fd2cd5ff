import Delivery
import Foundation
import HTTPServer
import LedgerCodec
import ReferralLedger
import XCTest

/// RevenueCat entitlements: a promotional grant to a stand-in for RevenueCat's API.
final class RevenueCatDeliveryTests: XCTestCase {
    static let benefit: JSONValue = ["type": "revenuecat_entitlement", "entitlement": "pro", "duration": "P1M"]

    func testGrantsThePromotionalEntitlementForTheBenefitsDuration() async throws {
        let f = try DeliveryFixture()
        let standIn = try Receiver()
        let clock = TestClock()
        clock.advance(seconds: 3 * 86_400)
        try f.configure("acme", ["revenuecat_api_base": .string(standIn.base + "/"), "revenuecat_api_key": "sk_rc_test"])
        try f.createProgram("acme", "spring", benefit: Self.benefit)
        let friend = "bob/1 é?"
        _ = try f.enroll("acme", "spring", friend: friend)

        let before = clock.now()
        let summary = await f.worker(clock: clock).runOnce()
        let after = clock.now()

        XCTAssertEqual(summary.delivered, 1)
        XCTAssertEqual(standIn.count, 1)
        let call = try XCTUnwrap(standIn.calls.first)
        XCTAssertEqual(call.method, "POST")
        XCTAssertEqual(call.rawPath, "/v1/subscribers/bob%2F1%20%C3%A9%3F/entitlements/pro/promotional")
        XCTAssertEqual(call.path, "/v1/subscribers/bob/1 é?/entitlements/pro/promotional")
        XCTAssertEqual(call.header("Authorization"), "Bearer sk_rc_test")
        XCTAssertEqual(call.header("Content-Type"), "application/json")
        XCTAssertEqual(call.header("Content-Length"), String(call.body.count))
        let body = bodyJSON(call)
        XCTAssertEqual(body.objectValue?.keys.sorted(), ["end_time_ms"])
        let end = try XCTUnwrap(body["end_time_ms"].intValue)
        XCTAssertGreaterThanOrEqual(end, before.adding(months: 1).milliseconds, "call time (the worker's clock) + P1M")
        XCTAssertLessThanOrEqual(end, after.adding(months: 1).milliseconds)
        XCTAssertGreaterThan(end, before.adding(days: 27).milliseconds)
        XCTAssertEqual(try f.reward("acme", friend)["status"].stringValue, "fulfilled")
    }

    /// A failed call's error quotes the answer; an answer echoing the request's headers must not
    /// put the API key into the log (kept for ever), the queries or stderr.
    func testAnAnswerEchoingTheKeyIsRecordedWithoutIt() async throws {
        let f = try DeliveryFixture()
        let standIn = try Receiver()
        // The key sits across the 200 bytes an error quotes: it is redacted before the cut.
        let filler = String(repeating: "x", count: 180)
        standIn.respond { call, _ in HTTPResponse(status: 500, body: Array("echo: \(filler) \(call.header("authorization") ?? "")".utf8)) }
        try f.configure("acme", ["revenuecat_api_base": .string(standIn.base), "revenuecat_api_key": "sk_rc_echoed_secret"])
        try f.createProgram("acme", "spring", benefit: Self.benefit)
        _ = try f.enroll("acme", "spring", friend: "bob")

        let summary = await f.worker(clock: TestClock()).runOnce()

        XCTAssertEqual(summary.failed, 1)
        let error = try f.reward("acme", "bob")["last_error"].stringValue ?? ""
        XCTAssertTrue(error.contains("Bearer [secre") && !error.contains("sk_rc"), error)
        let log = try f.events("delivery.failed").map(\.text).joined()
        XCTAssertFalse(log.contains("sk_rc_ech"), log)
    }

    func testAMissingAPIKeyFailsWithAClearError() async throws {
        let f = try DeliveryFixture()
        let standIn = try Receiver()
        let clock = TestClock()
        try f.configure("acme", ["revenuecat_api_base": .string(standIn.base)])
        try f.createProgram("acme", "spring", benefit: Self.benefit)
        _ = try f.enroll("acme", "spring", friend: "bob")

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.failed, 1)
        XCTAssertEqual(standIn.count, 0)
        let reward = try f.reward("acme", "bob")
        XCTAssertEqual(reward["status"].stringValue, "ready")
        XCTAssertEqual(reward["last_error"].stringValue, "app acme has no revenuecat_api_key setting: set it with app.configure")
    }

    func testARevenueCatErrorIsRecorded() async throws {
        let f = try DeliveryFixture()
        let standIn = try Receiver()
        standIn.answer(401, #"{"code":7225,"message":"Invalid API key"}"#)
        let clock = TestClock()
        try f.configure("acme", ["revenuecat_api_base": .string(standIn.base), "revenuecat_api_key": "sk_wrong"])
        try f.createProgram("acme", "spring", benefit: Self.benefit)
        _ = try f.enroll("acme", "spring", friend: "bob")

        let summary = await f.worker(clock: clock).runOnce()

        XCTAssertEqual(summary.failed, 1)
        XCTAssertEqual(try f.reward("acme", "bob")["last_error"].stringValue, #"HTTP 401: {"code":7225,"message":"Invalid API key"}"#)
    }
}
