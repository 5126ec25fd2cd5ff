import Foundation
import LedgerCodec
import LedgerStore
import ReferralLedger
import XCTest

/// A real ledger in a fresh temporary folder, removed at the end of the test.
final class TemporaryLedger {
    let folder: String
    private(set) var ledger: Ledger!

    init(mapSize: Int = 64 << 20) throws {
        folder = NSTemporaryDirectory() + "referral-ledger-test-" + UUID().uuidString
        ledger = try Ledger(folder: folder, mapSize: mapSize)
    }

    /// Closes and opens the ledger again (as after a restart).
    func reopen(rebuildingProjections: Bool = false) throws {
        ledger = nil
        ledger = try Ledger(folder: folder, rebuildingProjections: rebuildingProjections)
    }

    func close() { ledger = nil }

    /// Closes the ledger and leaves it as a rebuild killed after its first commit does: the
    /// projections dropped, the rebuild's mark set.
    func leaveARebuildCutShort() throws {
        close()
        let env = try LMDBEnvironment.open(path: folder, databases: Ledger.databases)
        try env.write { txn in
            for name in Ledger.databases where name.hasPrefix("proj_") { try txn.clear(name) }
            try txn.put("proj_meta", Array("rebuilding".utf8), Array("1".utf8))
        }
    }

    /// Plays fixture histories (Fixtures/NAME.jsonl) through the ledger, in order.
    func play(_ fixtures: String...) throws {
        var runner = FixtureRunner(ledger: ledger)
        for name in fixtures { try runner.run(name) }
    }

    deinit {
        ledger = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Submits one command given as JSON text; fails the test on a malformed literal.
    @discardableResult
    func submit(_ text: String, file: StaticString = #filePath, line: UInt = #line) throws -> JSONValue {
        let value = try JSONValue(parsing: text)
        return try ledger.submit(value).json
    }

    @discardableResult
    func submit(_ value: JSONValue) throws -> JSONValue { try ledger.submit(value).json }

    /// Every stored value, in order, read page by page as `events` does.
    func allValues() throws -> [[UInt8]] {
        var values: [[UInt8]] = []
        var from: UInt64 = 1
        while true {
            let (page, next) = try ledger.events(from: from, limit: 1000)
            values += page
            guard let next else { return values }
            from = next
        }
    }
}

/// The project's folders, found from this file.
enum ProjectPaths {
    static let root: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    static let fixtures = root.appendingPathComponent("Fixtures")

    /// The `referral-ledger` executable `swift build` produced next to the test bundle.
    static var executable: URL {
        let bundle = Bundle.main.bundleURL
        for dir in [bundle, bundle.deletingLastPathComponent(), Bundle(for: TemporaryLedger.self).bundleURL.deletingLastPathComponent()] {
            let candidate = dir.appendingPathComponent("referral-ledger")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return root.appendingPathComponent(".build/debug/referral-ledger")
    }
}

/// Runs the CLI as a process: arguments, optional stdin, and what it printed.
struct CLIRun {
    var status: Int32
    var stdout: String
    var stderr: String

    /// `output`: where standard output goes instead of being captured (`/dev/full`, say).
    static func run(_ arguments: [String], stdin: String? = nil, environment: [String: String]? = nil,
                    output: FileHandle? = nil) throws -> CLIRun {
        let process = Process()
        process.executableURL = ProjectPaths.executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe(), err = Pipe(), input = Pipe()
        if let output {
            process.standardOutput = output
            try out.fileHandleForWriting.close()
        } else {
            process.standardOutput = out
        }
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return CLIRun(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }

    var lines: [JSONValue] { stdout.split(separator: "\n").compactMap { try? JSONValue(parsing: String($0)) } }
}
