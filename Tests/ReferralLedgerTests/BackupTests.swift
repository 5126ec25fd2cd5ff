import Foundation
import LedgerCodec
import LedgerStore
@testable import ReferralLedger
import XCTest

/// `backup`: a consistent copy of the whole ledger taken while commands arrive, written whole or
/// not at all, that opens as a data folder at its head.
final class BackupTests: XCTestCase {
    private var parent = ""

    override func setUp() {
        parent = NSTemporaryDirectory() + "referral-ledger-backups-" + UUID().uuidString
        XCTAssertEqual(mkdir(parent, 0o755), 0)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: parent)
    }

    private func verification(_ n: Int) -> JSONValue {
        try! JSONValue(parsing: #"{"type":"account.verify","app":"acme","id":"v\#(n)","at":"2026-04-01T00:00:00Z","user":"late-\#(n)","account_created_at":"2026-01-01T00:00:00Z"}"#)
    }

    func testABackupTakenWhileCommandsArriveOpensAsTheLedgerAtItsHead() throws {
        let temp = try TemporaryLedger()
        try temp.play("manual-approvals")
        let ledger = temp.ledger!
        let before = try ledger.currentHead().position
        // A writer keeps appending on another thread while the backup is taken.
        let writing = DispatchGroup()
        let failure = FailureBox()
        let commands = (0..<400).map(verification)
        DispatchQueue.global().async(group: writing) {
            do {
                for command in commands { _ = try ledger.submit(command) }
            } catch { failure.keep(error) }
        }
        usleep(2000)
        let target = parent + "/copy"
        let made = try ledger.backup(to: target)
        let head = made.head
        writing.wait()
        XCTAssertNil(failure.error)
        let final = try ledger.currentHead()
        XCTAssertGreaterThanOrEqual(head.position, before)
        XCTAssertLessThanOrEqual(head.position, final.position)
        XCTAssertEqual(made.projections, "current")

        // Written whole: the data file only, its owner's alone, no temporary left beside it.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: target), ["data.mdb"])
        let mode = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: target + "/data.mdb")[.posixPermissions] as? NSNumber)
        XCTAssertEqual(mode.intValue & 0o777, 0o600)
        XCTAssertEqual(made.bytes, try FileManager.default.attributesOfItem(atPath: target + "/data.mdb")[.size] as? Int)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent), ["copy"])

        // The copy is the ledger as it stood at its head: the same values, projections at that
        // head (queries answer without a rebuild, as the original does as of that position).
        try checkCopy(target, of: temp, head: head)

        // Opened for writing it goes on from there, idempotency keys included.
        let writer = try Ledger(folder: target)
        if head.position > before {  // the copy holds the first verification
            XCTAssertEqual(try writer.submit(verification(0)).json["duplicate"], true)
        }
        let next = try writer.submit(verification(10_000)).json
        XCTAssertEqual(next["position"].intValue, Int64(head.position) + 1)
    }

    /// The copy holds the values up to its head, and projections at that head: queries answer
    /// without a rebuild what the original answers as of that position.
    private func checkCopy(_ target: String, of temp: TemporaryLedger, head: ChainHead) throws {
        let ledger = temp.ledger!
        let copy = try Ledger(readingFolder: target)
        XCTAssertEqual(try copy.currentHead(), head)
        let original = try temp.allValues()
        var copied: [[UInt8]] = []
        var from: UInt64 = 1
        while true {
            let (page, next) = try copy.events(from: from, limit: 1000)
            copied += page
            guard let next else { break }
            from = next
        }
        XCTAssertEqual(copied, Array(original.prefix(Int(head.position))))
        XCTAssertEqual(try copy.program(app: "acme", program: "spring"), try ledger.program(app: "acme", program: "spring", asOf: head.position))
        XCTAssertEqual(try copy.audit(app: "acme", limit: 1000), try ledger.audit(app: "acme", limit: 1000, asOf: head.position))
        XCTAssertTrue(try copy.verify().isClean)
    }

    func testABackupNeverWritesOverAnything() throws {
        let temp = try TemporaryLedger()
        try temp.play("inventory")
        let full = parent + "/full"
        XCTAssertEqual(mkdir(full, 0o755), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: full + "/keep.txt", contents: Data("mine".utf8)))
        let file = parent + "/file"
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data("mine".utf8)))
        for target in [full, file, temp.folder, temp.folder + "/inner", temp.folder + "/.", temp.folder + "/sub/deeper/inner",
                       temp.folder + "/missing/../inner"] {
            XCTAssertThrowsError(try temp.ledger.backup(to: target), target) { error in
                XCTAssertEqual((error as? LedgerError)?.code, "backup_target_exists", target)
            }
        }
        XCTAssertEqual(try String(contentsOfFile: full + "/keep.txt", encoding: .utf8), "mine")
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8), "mine")
        XCTAssertFalse(FileManager.default.fileExists(atPath: temp.folder + "/inner"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: temp.folder + "/sub"))
        // Under a file no folder can be made: nothing is written.
        XCTAssertThrowsError(try temp.ledger.backup(to: file + "/under/copy")) { error in
            XCTAssertEqual((error as? LedgerError)?.code, "unwritable_output")
            // The folder that could not be made, and the system's reason.
            XCTAssertEqual((error as? LedgerError)?.message, "cannot make the folder \(file)/under for the backup: Not a directory")
        }
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: parent)), ["full", "file"])
        // Missing parent folders are made (`backup --out backups/2026-03-02` in a fresh folder).
        let summary = try temp.ledger.backup(to: parent + "/backups/2026-03-02")
        let copy = try Ledger(readingFolder: parent + "/backups/2026-03-02")
        XCTAssertEqual(try copy.currentHead(), summary.head)
        XCTAssertTrue(try copy.verify().isClean)
    }

    /// A copy taken while a rebuild runs holds the whole log and says its projections are not at
    /// its head; its first writer rebuilds them.
    func testACopyOfARebuildingLedgerSaysSo() throws {
        let temp = try TemporaryLedger()
        try temp.play("caps")
        let head = try temp.ledger.currentHead()
        try temp.leaveARebuildCutShort()
        let target = parent + "/copy"
        do {
            let made = try Ledger(readingFolder: temp.folder, forQueries: false).backup(to: target)
            XCTAssertEqual(made.head, head)
            XCTAssertEqual(made.projections, "rebuilding")
        }
        XCTAssertTrue(try Ledger(folder: target).verify().isClean)
    }

    /// The writer's state snapshot goes with the copy (a new folder or an empty one) when it names
    /// an event of it: the copy's first writer loads it and folds only the events after it. One
    /// this build cannot vouch for is left behind.
    func testTheStateSnapshotGoesWithTheCopy() throws {
        let temp = try TemporaryLedger()
        try temp.play("manual-approvals")
        XCTAssertTrue(try temp.ledger.saveStateSnapshot(interval: 0))
        let saved = try temp.ledger.currentHead().position
        for n in 0..<3 { _ = try temp.ledger.submit(verification(n)) }
        let empty = parent + "/volume"
        XCTAssertEqual(mkdir(empty, 0o700), 0)
        for target in [parent + "/copy", empty] {
            let made = try temp.ledger.backup(to: target)
            XCTAssertEqual(made.stateSnapshot, saved, target)
            XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: target)), ["data.mdb", StateSnapshot.fileName], target)
            let writer = try Ledger(folder: target)
            XCTAssertEqual(writer.snapshotPosition, saved, "the copy's writer folded the whole log: \(target)")
            XCTAssertEqual(try writer.submit(verification(2)).json["duplicate"], true)
            XCTAssertEqual(try writer.submit(verification(3)).json["position"].intValue, Int64(made.head.position) + 1)
            XCTAssertTrue(try writer.verify().isClean)
        }

        // Copied a few bytes at a time, it is the same file; a damaged one is not copied.
        let file = StateSnapshot.path(temp.folder)
        let original = try XCTUnwrap(FileManager.default.contents(atPath: file))
        let small = parent + "/small"
        XCTAssertEqual(mkdir(small, 0o700), 0)
        XCTAssertTrue(StateSnapshot.copy(try XCTUnwrap(StateSnapshot.OpenFile(folder: temp.folder)), to: small, chunkSize: 7))
        XCTAssertEqual(FileManager.default.contents(atPath: StateSnapshot.path(small)), original)
        var damaged = original
        damaged[damaged.count - 3] ^= 0x01
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: damaged))
        XCTAssertNil(try temp.ledger.backup(to: parent + "/damaged").stateSnapshot)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent + "/damaged"), ["data.mdb"])
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: original))

        // A snapshot of another build (its header says so) stays behind; the backup goes on.
        var bytes = original
        let build = try XCTUnwrap(StateSnapshot.build)
        let range = try XCTUnwrap(bytes.range(of: Data(build.utf8)))
        bytes.replaceSubrange(range, with: Data(String(repeating: "0", count: build.count).utf8))
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: bytes))
        let made = try temp.ledger.backup(to: parent + "/other")
        XCTAssertNil(made.stateSnapshot)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent + "/other"), ["data.mdb"])
    }

    /// An empty folder (a mounted volume, say) is filled from inside and keeps its mode; a link is
    /// followed; the temporary copies of killed backups are cleared, those of running ones are not.
    func testAnEmptyFolderIsFilledInPlaceAndKilledBackupsAreCleared() throws {
        let temp = try TemporaryLedger()
        try temp.play("inventory")
        func abandoned(in folder: String, held: Bool = false) throws -> (String, Int32) {
            let path = folder + "/.referral-ledger-backup.partial-\(UUID().uuidString)"
            XCTAssertEqual(mkdir(path, 0o700), 0)
            XCTAssertTrue(FileManager.default.createFile(atPath: path + "/data.mdb", contents: Data(count: 4096)))
            let fd = open(path + "/backup.lock", O_CREAT | O_RDWR, 0o600)
            XCTAssertGreaterThanOrEqual(fd, 0)
            if held { XCTAssertEqual(flock(fd, LOCK_EX), 0) } else { close(fd) }
            return (path, fd)
        }
        let empty = parent + "/volume"
        XCTAssertEqual(mkdir(empty, 0o751), 0)
        let (killed, _) = try abandoned(in: empty)
        let link = parent + "/link"
        XCTAssertEqual(symlink(empty, link), 0)
        let made = try temp.ledger.backup(to: link + "/")
        XCTAssertEqual(made.head, try temp.ledger.currentHead())
        XCTAssertFalse(FileManager.default.fileExists(atPath: killed))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: empty), ["data.mdb"])
        let mode = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: empty)[.posixPermissions] as? NSNumber)
        XCTAssertEqual(mode.intValue & 0o777, 0o751)
        XCTAssertTrue(try Ledger(readingFolder: empty).verify().isClean)

        // A fresh volume's `lost+found` does not make it a full folder.
        let disk = parent + "/disk"
        XCTAssertEqual(mkdir(disk, 0o755), 0)
        XCTAssertEqual(mkdir(disk + "/lost+found", 0o700), 0)
        _ = try temp.ledger.backup(to: disk)
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: disk)), ["lost+found", "data.mdb"])

        // Beside a new folder: a dead backup's copy goes, a running one's (its lock held) stays.
        let (dead, _) = try abandoned(in: parent)
        let (running, fd) = try abandoned(in: parent, held: true)
        defer { close(fd) }
        _ = try temp.ledger.backup(to: parent + "/new")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dead))
        XCTAssertTrue(FileManager.default.fileExists(atPath: running + "/data.mdb"))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent + "/new"), ["data.mdb"])
    }
}

/// The first error of a writer thread, read once it has finished.
private final class FailureBox: @unchecked Sendable {
    private let lock = NSLock()
    private var first: Error?
    func keep(_ error: Error) { lock.withLock { if first == nil { first = error } } }
    var error: Error? { lock.withLock { first } }
}
