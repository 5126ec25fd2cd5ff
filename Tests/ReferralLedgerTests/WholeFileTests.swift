import Foundation
@testable import ReferralLedger
import XCTest

/// A file written whole or not at all (`WholeFile`, behind the state snapshot and the CLI's
/// `--out` files).
final class WholeFileTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "whole-file-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: folder) }

    private struct Failed: Error, Equatable { var step: String }
    private struct Stopped: Error {}

    private func contents(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }
    private func names() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted() }

    func testTheFileIsReplacedWholeWithTheBodysBytesAndItsResultReturned() throws {
        let path = folder + "/out.txt"
        try "old\n".write(toFile: path, atomically: false, encoding: .utf8)
        let result = try WholeFile.write(path, permissions: 0o640, failure: { Failed(step: $0) }) { fd -> Int in
            XCTAssertEqual(self.contents(path), "old\n", "the old file stays until the new one is whole")
            XCTAssertTrue(FileManager.default.fileExists(atPath: WholeFile.partialPath(of: path)))
            XCTAssertTrue(WholeFile.writeAll(Array("new\n".utf8), to: fd))
            XCTAssertTrue(WholeFile.writeAll(Array(repeating: UInt8(ascii: "x"), count: 1 << 20), to: fd))
            return 42
        }
        XCTAssertEqual(result, 42)
        XCTAssertEqual(contents(path)?.count, 4 + (1 << 20))
        XCTAssertEqual(contents(path)?.hasPrefix("new\nxxx"), true)
        XCTAssertEqual(names(), ["out.txt"], "no partial file is left")
        let mode = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        XCTAssertEqual(mode & 0o077 & ~0o640, 0, "created with at most the permissions asked for")
    }

    func testABodyThatThrowsLeavesTheOldFileAndNoPartial() throws {
        let path = folder + "/out.txt"
        try "old\n".write(toFile: path, atomically: false, encoding: .utf8)
        XCTAssertThrowsError(try WholeFile.write(path, permissions: 0o644, failure: { Failed(step: $0) }) { fd in
            XCTAssertTrue(WholeFile.writeAll(Array("half".utf8), to: fd))
            throw Stopped()
        }) { error in XCTAssertTrue(error is Stopped, "the body's own error: \(error)") }
        XCTAssertEqual(contents(path), "old\n")
        XCTAssertEqual(names(), ["out.txt"])
    }

    func testAFolderThatIsNotThereFailsAtCreateBeforeTheBodyRuns() {
        var ran = false
        XCTAssertThrowsError(try WholeFile.write(folder + "/missing/out.txt", permissions: 0o644, failure: { Failed(step: $0) }) { _ in ran = true }) { error in
            XCTAssertEqual(error as? Failed, Failed(step: "create"))
        }
        XCTAssertFalse(ran)
    }

    func testARenameOntoAFolderFailsAtRenameAndRemovesThePartial() throws {
        let path = folder + "/taken"
        try FileManager.default.createDirectory(atPath: path + "/inside", withIntermediateDirectories: true)
        XCTAssertThrowsError(try WholeFile.write(path, permissions: 0o644, failure: { Failed(step: $0) }) { fd in
            XCTAssertTrue(WholeFile.writeAll(Array("x".utf8), to: fd))
        }) { error in XCTAssertEqual(error as? Failed, Failed(step: "rename")) }
        XCTAssertEqual(names(), ["taken"])
    }

    func testTheParentFolderOfAPath() {
        XCTAssertEqual(WholeFile.parent(of: "out.txt"), ".")
        XCTAssertEqual(WholeFile.parent(of: "/out.txt"), "/")
        XCTAssertEqual(WholeFile.parent(of: "a/b/out.txt"), "a/b")
    }
}
