import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger
import XCTest

/// An embedder catches one type: every error the library throws is a `CodedError`, with the code
/// the CLI and the HTTP API answer for it and a message.
final class CodedErrorTests: XCTestCase {
    func coded(_ what: String, _ attempt: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) -> CodedError? {
        do {
            try attempt()
            XCTFail("\(what) did not fail", file: file, line: line)
        } catch let error as CodedError {
            XCTAssertFalse(error.message.isEmpty, what, file: file, line: line)
            XCTAssertEqual("\(error)", error.message, what, file: file, line: line)
            XCTAssertEqual(error.errorJSON["error"]["code"].stringValue, error.errorCode, what, file: file, line: line)
            return error
        } catch {
            XCTFail("\(what) threw \(type(of: error)), not a CodedError: \(error)", file: file, line: line)
        }
        return nil
    }

    func testEveryKindOfFailureHasACodeAndAMessage() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        XCTAssertEqual(coded("a second writer") { _ = try Ledger(folder: temp.folder) }?.errorCode, "ledger_busy")
        let reader = try Ledger(readingFolder: temp.folder)
        XCTAssertEqual(coded("a rebuild by a reader") { _ = try reader.rebuildProjections() }?.errorCode, "read_only")
        XCTAssertEqual(coded("an unknown user") { _ = try temp.ledger.progress(app: "acme", program: "capped", user: "nobody-at-all") }?.errorCode,
                       "unknown_user")
        XCTAssertEqual(coded("an unknown app") { _ = try temp.ledger.progress(app: "nope", program: "capped", user: "alice") }?.errorCode,
                       "unknown_app")
        XCTAssertEqual(coded("text that is not JSON") { _ = try JSONValue(parsing: "{\"a\":") }?.errorCode, "invalid_json")
        XCTAssertEqual(coded("a key that is not PEM") { _ = try Ed25519.sign(Array("x".utf8), privateKeyPEM: "not a key") }?.errorCode, "bad_key")
        // A data folder that is a file: the store's own error, the errno kept beside the code.
        let file = NSTemporaryDirectory() + "referral-ledger-file-" + UUID().uuidString
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data("not a folder".utf8)))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let storage = coded("a file for a folder") { _ = try Ledger(folder: file) }
        XCTAssertEqual(storage?.errorCode, "storage_error")
        XCTAssertEqual((storage as? LMDBError)?.code, ENOTDIR)
    }
}
