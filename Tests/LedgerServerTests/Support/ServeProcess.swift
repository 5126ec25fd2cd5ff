import Foundation
import XCTest

/// `referral-ledger serve` as a child process: its port read from the startup line, its
/// stderr collected, SIGTERM sent on demand.
final class ServeProcess {
    let process = Process()
    private let stderrLines = Collector<String>()
    private let readerDone = DispatchSemaphore(value: 0)
    private(set) var port: UInt16 = 0

    /// The `referral-ledger` executable `swift build` produced next to the test bundle.
    static var executable: URL {
        let bundle = Bundle.main.bundleURL
        for dir in [bundle, bundle.deletingLastPathComponent(), Bundle(for: ServeProcess.self).bundleURL.deletingLastPathComponent()] {
            let candidate = dir.appendingPathComponent("referral-ledger")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/referral-ledger")
    }

    /// Starts `referral-ledger --data FOLDER serve ARGS` and, when `waitForPort`, waits for the startup line.
    init(folder: String, arguments: [String], waitForPort: Bool = true) throws {
        process.executableURL = Self.executable
        process.arguments = ["--data", folder, "serve"] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let reading = errors.fileHandleForReading
        let lines = stderrLines, done = readerDone
        let reader = Thread {
            var pending = Data()
            while true {
                let chunk = reading.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: 0x0A) {
                    lines.append(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending = Data(pending[(newline + 1)...])
                }
            }
            if !pending.isEmpty { lines.append(String(decoding: pending, as: UTF8.self)) }
            done.signal()
        }
        reader.start()
        guard waitForPort else { return }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, process.isRunning {
            if let line = stderrLines.all.first(where: { $0.contains("listening on http://127.0.0.1:") }),
               let portText = line.split(separator: "http://127.0.0.1:").last?.prefix(while: \.isNumber),
               let port = UInt16(portText) {
                self.port = port
                return
            }
            usleep(10_000)
        }
        process.terminate()
        throw NSError(domain: "ServeProcess", code: 1, userInfo: [NSLocalizedDescriptionKey: "serve did not start: \(stderrLines.all)"])
    }

    func signal(_ number: Int32 = SIGTERM) { kill(process.processIdentifier, number) }

    /// Waits for the process to exit (killing it after `timeout`) and for its stderr to end.
    func waitForExit(timeout: Double = 60) -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        _ = readerDone.wait(timeout: .now() + 10)
        return process.terminationStatus
    }

    var stderr: [String] { stderrLines.all }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
