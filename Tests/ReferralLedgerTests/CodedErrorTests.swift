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
        // A folder without a ledger: the library's words (the CLI says --data instead).
        let missing = NSTemporaryDirectory() + "referral-ledger-none-" + UUID().uuidString
        let none = coded("a folder without a ledger") { _ = try Ledger(readingFolder: missing) }
        XCTAssertEqual(none?.errorCode, "no_ledger")
        XCTAssertTrue(none?.message.contains("Ledger(folder:)") == true, none?.message ?? "")
        XCTAssertFalse(none?.message.contains("--data") == true, none?.message ?? "")
        // A first map size out of range is the argument's fault, said so.
        for size in [0, -1, 1000, Int.max] {
            XCTAssertEqual(coded("mapSize \(size)") { _ = try Ledger(folder: missing, mapSize: size) }?.errorCode, "invalid_argument")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing), "a refused open creates nothing")
    }

    /// A reader open in this process keeps a writer out (LMDB must not be opened twice in one
    /// process): the same code as a second writer, `ledger_busy`.
    func testAReaderInThisProcessKeepsAWriterOutAsBusy() throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-reader-first-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        _ = try Ledger(folder: folder).submit(.configureApp(settings: [:]), app: "acme")
        let reader = try Ledger(readingFolder: folder)
        let busy = coded("a writer beside this process's reader") { _ = try Ledger(folder: folder) }
        XCTAssertEqual(busy?.errorCode, "ledger_busy")
        XCTAssertTrue(busy?.message.contains("read-only in this process") == true, busy?.message ?? "")
        XCTAssertEqual(try reader.currentHead().position, 1)
    }

    /// A committer's batch limit is brought into 1…10,000, and a limit of one still commits.
    func testACommittersBatchLimitIsBroughtIntoRange() async throws {
        let folder = NSTemporaryDirectory() + "referral-ledger-batch-limit-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let ledger = try Ledger(folder: folder)
        XCTAssertEqual(GroupCommitter(ledger: ledger, batchLimit: .max).batchLimit, 10_000)
        let one = GroupCommitter(ledger: ledger, batchLimit: -5)
        XCTAssertEqual(one.batchLimit, 1)
        let results = try await one.submit([CommandInput](repeating: .text(Array(#"{"type":"app.configure","app":"acme","settings":{}}"#.utf8)), count: 3))
        XCTAssertEqual(results.map(\.ok), [true, true, true])
        one.drain()
        XCTAssertEqual(try ledger.currentHead().position, 3)
    }
}
