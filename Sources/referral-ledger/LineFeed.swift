import Foundation

/// Reads JSON Lines from a file descriptor on its own thread, so the writer can take every
/// line that has arrived (up to a batch) whenever it is ready: whatever arrives before the
/// input pauses is committed together.
final class LineFeed: @unchecked Sendable {
    private let condition = NSCondition()
    private var lines: [[UInt8]] = []
    private var finished = false
    private var readError: String?
    private let fd: Int32

    init(fd: Int32) {
        self.fd = fd
        let thread = Thread { [self] in self.run() }
        thread.start()
    }

    private func run() {
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 {
                condition.lock()
                if n < 0 { readError = String(cString: strerror(errno)) }
                if !pending.isEmpty { lines.append(pending) }
                finished = true
                condition.signal()
                condition.unlock()
                return
            }
            var found: [[UInt8]] = []
            var start = 0
            for i in 0..<n where chunk[i] == 0x0A {
                pending.append(contentsOf: chunk[start..<i])
                found.append(pending)
                pending = []
                start = i + 1
            }
            pending.append(contentsOf: chunk[start..<n])
            if !found.isEmpty {
                condition.lock()
                lines.append(contentsOf: found)
                condition.signal()
                condition.unlock()
            }
        }
    }

    /// Waits for at least one line (or the end), then takes up to `max` lines. Empty at the end.
    func take(max: Int) -> [[UInt8]] {
        condition.lock()
        defer { condition.unlock() }
        while lines.isEmpty && !finished { condition.wait() }
        let n = min(max, lines.count)
        let batch = Array(lines[0..<n])
        lines.removeFirst(n)
        return batch
    }

    var error: String? {
        condition.lock()
        defer { condition.unlock() }
        return readError
    }
}
