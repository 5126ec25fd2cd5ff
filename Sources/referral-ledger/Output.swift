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
    /// What a verb did before its report, said when the report cannot be written (the keys are
    /// written, the rebuild is done…), so nobody repeats work that took place.
    var done: String?

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
        if failure == nil { failure = Self.writeAll(buffer, to: fd) }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes the whole of `bytes` to `fd`, a short write continued and an interrupted one
    /// retried: nil, or why it stopped.
    static func writeAll(_ bytes: [UInt8], to fd: Int32) -> String? {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 { return n < 0 ? String(cString: strerror(errno)) : "nothing could be written" }
            offset += n
        }
        return nil
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

    /// Progress (events done, rate, time left): a bar redrawn in place on a terminal; `plain`
    /// (stderr is a file or a pipe: a log) writes a line when the work starts, every ten seconds,
    /// and when it ends. `then`: what follows once every event is read (said when it starts).
    final class ProgressBar: @unchecked Sendable {
        let label: String
        let plain: Bool
        let then: String?
        let start = Timestamp.now()
        var last: Int64 = 0
        var started = false
        var allRead = false
        init(label: String, plain: Bool = false, then: String? = nil) {
            self.label = label
            self.plain = plain
            self.then = then
        }

        func update(_ done: UInt64, _ total: UInt64) {
            let now = Timestamp.now().milliseconds
            if let then, done >= total, !allRead {
                allRead = true
                if plain {
                    Terminal.error("\(label): all \(total) events read; \(then)")
                } else {
                    draw(total, total, "; \(then)")
                }
                return
            }
            if plain {
                guard !started || now - last >= 10_000 else { return }
                started = true
                last = now
                let (rate, left) = pace(done, total, now)
                Terminal.error("\(label): \(done)/\(total) events, \(Int(rate))/s, \(Int(left))s left")
                return
            }
            guard now - last >= 100 || done == total else { return }
            last = now
            let (rate, left) = pace(done, total, now)
            draw(done, total, ", \(Int(rate))/s, \(Int(left))s left")
        }

        /// The bar, redrawn over the last one: `label [###...] done/total events` and `tail`.
        private func draw(_ done: UInt64, _ total: UInt64, _ tail: String) {
            let width = 30
            let filled = total == 0 ? width : Int(Double(width) * Double(done) / Double(total))
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            let text = "\r\(label) [\(bar)] \(done)/\(total) events\(tail)   "
            _ = Array(text.utf8).withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        }

        private func pace(_ done: UInt64, _ total: UInt64, _ now: Int64) -> (rate: Double, left: Double) {
            let elapsed = max(Double(now - start.milliseconds) / 1000, 0.001)
            let rate = Double(done) / elapsed
            return (rate, rate > 0 ? Double(total - min(done, total)) / rate : 0)
        }

        /// Ends the bar's line; in a log, says how many events were done, in what time.
        func finish(events: UInt64) {
            guard plain else { return Terminal.error("") }
            let seconds = Double(Timestamp.now().milliseconds - start.milliseconds) / 1000
            Terminal.error("\(label): \(events)/\(events) events, done in \(String(format: "%.1f", seconds)) s")
        }
    }
}
