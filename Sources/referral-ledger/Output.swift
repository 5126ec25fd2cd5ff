#if canImport(Glibc)
import Glibc
#endif
import LedgerCodec
import ReferralLedger

/// Buffered writes to a file descriptor (stdout by default). A write that fails (a full disk,
/// `/dev/full`) is kept as `failure`: the verb then ends with an error, never a silent exit 0.
final class Output {
    private var buffer: [UInt8] = []
    private let fd: Int32
    /// Why a write failed (the first failure; what was buffered then is dropped).
    private(set) var failure: String?

    init(fd: Int32 = 1) {
        self.fd = fd
        buffer.reserveCapacity(1 << 16)
    }

    /// Bytes as they are, no line end added.
    func append(_ bytes: [UInt8]) {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 16 { flush() }
    }

    func line(_ bytes: [UInt8]) {
        buffer.append(contentsOf: bytes)
        append([0x0A])
    }

    func line(_ value: JSONValue) { line(value.bytes) }
    func line(_ text: String) { line(Array(text.utf8)) }

    func flush() {
        var offset = 0
        while offset < buffer.count, failure == nil {
            let n = buffer[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 {
                failure = n < 0 ? String(cString: strerror(errno)) : "nothing could be written"
                break
            }
            offset += n
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Flushes, and throws if any write failed.
    func finish(_ what: @autoclosure () -> String) throws {
        flush()
        if let failure { throw LedgerError(code: "unwritable_output", message: "cannot write \(what()): \(failure)") }
    }

    deinit { flush() }
}

enum Terminal {
    static func isTTY(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    static func error(_ message: String) {
        let bytes = Array((message + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }

    static func error(code: String, _ message: String) {
        let value: JSONValue = ["error": ["code": .string(code), "message": .string(message)]]
        error(value.text)
    }

    /// A progress line on a terminal (events done, rate, time left), redrawn in place.
    final class ProgressBar: @unchecked Sendable {
        let label: String
        let start = Timestamp.now()
        var last: Int64 = 0
        init(label: String) { self.label = label }

        func update(_ done: UInt64, _ total: UInt64) {
            let now = Timestamp.now().milliseconds
            guard now - last >= 100 || done == total else { return }
            last = now
            let elapsed = max(Double(now - start.milliseconds) / 1000, 0.001)
            let rate = Double(done) / elapsed
            let left = rate > 0 ? Double(total - min(done, total)) / rate : 0
            let width = 30
            let filled = total == 0 ? width : Int(Double(width) * Double(done) / Double(total))
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            let text = "\r\(label) [\(bar)] \(done)/\(total) events, \(Int(rate))/s, \(Int(left))s left   "
            let bytes = Array(text.utf8)
            _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        }

        func finish() { Terminal.error("") }
    }
}
