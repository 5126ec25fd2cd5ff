import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
import XCTest

/// Opening, sharing, growing and closing a ledger inside one process, as a backend embedding the
/// library does: queries on other threads while the map grows, one environment per folder, a
/// committer dropped without `drain()`, and open failures that say what is wrong.
final class LifecycleTests: XCTestCase {
    private func configure(_ n: Int) -> [UInt8] {
        JSONValue.object(["type": "app.configure", "app": "acme", "at": "2026-01-01T00:00:00Z",
                          "settings": ["workspace": "workspace-\(n)"]]).bytes
    }

    /// LMDB may resize its map only while no transaction of the process is open: queries running
    /// on other threads while the writer grows a tiny map must neither crash nor read garbage.
    func testQueriesOnOtherThreadsSurviveTheMapGrowing() throws {
        let temp = try TemporaryLedger(mapSize: 64 << 10)
        let ledger = temp.ledger!
        let startSize = ledger.environment.mapSize
        let done = Shared(false)
        let reads = Shared(0)
        let failures = Shared<[String]>([])
        let readers = (0..<3).map { _ in
            Thread {
                while !done.value {
                    do {
                        let head = try ledger.currentHead()
                        if head.position > 0 {
                            let (page, _) = try ledger.events(from: max(1, head.position - 5), limit: 5)
                            for value in page { _ = try JSONValue(parsing: value) }
                        }
                        reads.mutate { $0 += 1 }
                    } catch {
                        failures.mutate { $0.append("\(error)") }
                    }
                }
            }
        }
        readers.forEach { $0.start() }
        for chunk in 0..<8 {
            _ = try ledger.submit(lines: (0..<500).map { configure(chunk * 500 + $0) })
        }
        done.value = true
        Thread.sleep(forTimeInterval: 0.05)
        XCTAssertEqual(failures.value, [])
        XCTAssertGreaterThan(reads.value, 0)
        XCTAssertGreaterThan(ledger.environment.mapSize, startSize, "the map never grew: the test proves nothing")
        XCTAssertEqual(try ledger.currentHead().position, 4000)
        XCTAssertTrue(try ledger.verify().isClean)
    }

    /// One environment per folder per process: a reader opened next to the writer shares the
    /// writer's, so dropping it leaves the process's LMDB locks in place.
    func testAReaderInTheWritersProcessSharesItsEnvironment() throws {
        let temp = try TemporaryLedger()
        _ = try temp.ledger.submit(lines: [configure(1)])
        do {
            let reader = try Ledger(readingFolder: temp.folder)
            XCTAssertTrue(reader.environment === temp.ledger.environment)
            XCTAssertEqual(try reader.currentHead().position, 1)
        }
        _ = try temp.ledger.submit(lines: [configure(2)])
        XCTAssertEqual(try Ledger(readingFolder: temp.folder).currentHead().position, 2)
        // A folder open read-only here cannot also be opened for writing here.
        temp.close()
        let reader = try Ledger(readingFolder: temp.folder)
        XCTAssertThrowsError(try Ledger(folder: temp.folder)) { error in
            XCTAssertTrue("\(error)".contains("open read-only in this process"), "\(error)")
        }
        XCTAssertEqual(try reader.currentHead().position, 2)
    }

    /// A committer dropped without `drain()` commits what it was given, ends its thread and lets
    /// the folder be opened again.
    func testACommitterDroppedWithoutDrainReleasesTheFolder() async throws {
        let temp = try TemporaryLedger()
        let folder = temp.folder
        do {
            let committer = GroupCommitter(ledger: try Ledger(folder: folder + "-other"))
            _ = committer  // dropped before any use
        }
        do {
            temp.close()
            let committer = GroupCommitter(ledger: try Ledger(folder: folder))
            let results = try await committer.submit([configure(1), configure(2)])
            XCTAssertEqual(results.map(\.ok), [true, true])
        }
        let reopened = try Ledger(folder: folder)
        XCTAssertEqual(try reopened.currentHead().position, 2)
        try? FileManager.default.removeItem(atPath: folder + "-other")
    }


    /// `close()` lets go of the folder at once, while references to the ledger remain (a committer
    /// held at top level, say): another writer opens it, the closed one refuses to write (queued
    /// batches too) and still reads.
    func testACloseLetsAnotherWriterOpenWhileReferencesRemain() async throws {
        let temp = try TemporaryLedger()
        let folder = temp.folder
        temp.close()
        let first = try Ledger(folder: folder)
        let committer = GroupCommitter(ledger: first)
        let firstResults = try await committer.submit([configure(1)])
        XCTAssertEqual(firstResults.map(\.ok), [true])
        XCTAssertThrowsError(try Ledger(folder: folder)) { XCTAssertEqual(($0 as? CodedError)?.errorCode, "ledger_busy", "\($0)") }
        first.close()
        first.close()  // again: nothing more
        let second = try Ledger(folder: folder)
        XCTAssertEqual(try second.submit(lines: [configure(2)]).map(\.ok), [true])
        XCTAssertThrowsError(try first.submit(lines: [configure(3)])) { XCTAssertEqual(($0 as? LedgerError)?.code, "ledger_closed", "\($0)") }
        XCTAssertThrowsError(try first.rebuildProjections()) { XCTAssertEqual(($0 as? LedgerError)?.code, "ledger_closed", "\($0)") }
        XCTAssertFalse(try first.saveStateSnapshot(interval: 0))
        do {
            _ = try await committer.submit([configure(4)])
            XCTFail("a closed ledger's committer took a command")
        } catch let error as LedgerError {
            XCTAssertEqual(error.code, "ledger_closed")
        }
        // Reads go on, and see what the second writer wrote.
        XCTAssertEqual(try first.currentHead(), try second.currentHead())
        XCTAssertEqual(try first.currentHead().position, 2)
        XCTAssertTrue(try first.verify().isClean)
        committer.drain()
        second.close()
        XCTAssertEqual(try Ledger(folder: folder).currentHead().position, 2)
    }
    /// Open failures are thrown (never a crash) and name their cause.
    func testOpenFailuresSayWhatIsWrong() throws {
        let root = NSTemporaryDirectory() + "referral-ledger-open-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        XCTAssertThrowsError(try Ledger(folder: root + "/no-parent/ledger")) { error in
            XCTAssertTrue("\(error)".contains("create its parent folder first"), "\(error)")
        }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/a-file", contents: Data("x".utf8)))
        XCTAssertThrowsError(try Ledger(folder: root + "/a-file")) { error in
            XCTAssertFalse(error is WriterLock.Busy, "\(error)")
        }
        // A data file that is not LMDB's: refused with LMDB's reason, twice in a row (no double close).
        let corrupt = root + "/corrupt"
        try FileManager.default.createDirectory(atPath: corrupt, withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.createFile(atPath: corrupt + "/data.mdb", contents: Data(repeating: 0xAB, count: 64 << 10)))
        for _ in 0..<2 {
            XCTAssertThrowsError(try Ledger(folder: corrupt)) { error in
                XCTAssertTrue(error is LMDBError, "\(error)")
            }
            XCTAssertThrowsError(try Ledger(readingFolder: corrupt)) { error in
                XCTAssertTrue(error is LMDBError, "\(error)")
            }
        }
    }
}

/// A value shared between test threads.
final class Shared<Value>: @unchecked Sendable {
    private var stored: Value
    private let lock = NSLock()
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
    func mutate(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}
