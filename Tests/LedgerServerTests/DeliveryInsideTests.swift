import Foundation
import LedgerCodec
import LedgerServer
import XCTest

/// `serve` runs the delivery worker inside (SPEC §10 `deliver`): rewards become deliverable
/// through HTTP commands and are delivered without another process.
final class DeliveryInsideTests: XCTestCase {
    func testTheWorkerInsideDeliversASandboxRewardAndStopsWithTheServer() throws {
        let f = try ServerFixture(deliver: true)
        let owner = ServerFixture.ownerKey
        let program: JSONValue = [
            "type": "program.create", "app": "acme", "at": "2026-03-01T00:00:00Z", "program": "beta", "environment": "sandbox",
            "config": ["inviter": nil, "friend": ["trigger": "invite_accepted", "benefit": ["type": "custom", "feature": "beta", "payload": [:]]],
                       "new_users_only": false],
        ]
        for command in [Commands.configure(["friend_referrals_enabled": true]), program, Commands.activate("beta")] {
            let reply = try f.post(command, key: owner)
            XCTAssertEqual(reply.status, 200, reply.text)
        }
        let code = try XCTUnwrap(try f.post(Commands.invite("alice", program: "beta")).json["code"].stringValue)
        let enrolled = try f.post(Commands.enroll("bob", code: code, program: "beta"))
        XCTAssertEqual(enrolled.status, 200, enrolled.text)

        var reward: JSONValue = .null
        let deadline = Date().addingTimeInterval(20)
        repeat {
            reward = try f.get("/v1/apps/acme/users/bob/rewards").json["rewards"].arrayValue?.first ?? .null
            if reward["status"] == "fulfilled" { break }
            usleep(50_000)
        } while Date() < deadline
        XCTAssertEqual(reward["status"], "fulfilled", reward.text)
        XCTAssertEqual(reward["simulated"], true)
        let deliveries = try f.get("/v1/apps/acme/deliveries?status=fulfilled").json["deliveries"].arrayValue ?? []
        XCTAssertEqual(deliveries.count, 1)

        f.stop()  // returns once the worker has stopped
        let head = f.head
        usleep(300_000)
        XCTAssertEqual(f.head, head, "nothing is recorded after the server stopped")
    }
}
