import Foundation
import LedgerCodec
import LedgerStore
@testable import LedgerServer
import XCTest

/// A write the storage refuses (a full disk) is 503 `storage_error` over HTTP, the code the CLI
/// gives, and `/healthz` says so until a write commits again.
final class StorageFailureTests: XCTestCase {
    func testAStorageFailureIs503AndHealthzReportsItUntilAWriteCommits() throws {
        let full = LMDBError(code: ENOSPC, message: "the disk holding the ledger is full: free space and retry")
        let answer = APIError.ledger(full)
        XCTAssertEqual(answer.status, 503)
        XCTAssertEqual(answer.code, "storage_error")
        XCTAssertTrue(answer.message.contains("free space and retry"), answer.message)
        XCTAssertTrue(answer.headers.contains { $0 == ("Retry-After", "5") })
        // Other failures to decide stay 500 internal_error.
        XCTAssertEqual(APIError.ledger(CocoaError(.fileReadUnknown)).code, "internal_error")

        let f = try ServerFixture()
        XCTAssertEqual(try f.call("GET", "/healthz").status, 200)
        f.server.api.noteWriteOutcome(full)
        let sick = try f.call("GET", "/healthz")
        XCTAssertEqual(sick.status, 503, sick.text)
        XCTAssertEqual(sick.json["ok"], false)
        XCTAssertEqual(sick.errorCode, "storage_error")
        XCTAssertNotNil(sick.json["head_position"].intValue)
        // A refusal that is not about storage changes nothing; a post that commits clears it.
        f.server.api.noteWriteOutcome(CocoaError(.fileReadUnknown))
        XCTAssertEqual(try f.call("GET", "/healthz").status, 503)
        let posted = try f.post(["type": "app.configure", "app": "acme", "settings": ["friend_referrals_enabled": true]], key: ServerFixture.ownerKey)
        XCTAssertEqual(posted.status, 200, posted.text)
        let well = try f.call("GET", "/healthz")
        XCTAssertEqual(well.status, 200, well.text)
        XCTAssertEqual(well.json["ok"], true)
    }
}
