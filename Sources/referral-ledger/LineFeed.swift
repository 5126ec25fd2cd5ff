import Foundation

/// Reads JSON Lines from a file descriptor on its own thread, so the writer can take every
/// line that has arrived (up to a batch) whenever it is ready: whatever arrives before the
/// input pauses is committed together.
///
/// From a regular file it reads ahead at most `maxQueued` lines (a few batches), then waits for the
/// writer, so a file of any size is never held in memory whole. From a pipe it reads everything
/// that comes: a client that writes all its commands before it reads any result (the results
/// fill their own pipe meanwhile) must not wait for us while we wait for it. A line longer than
/// `maxLineBytes` (`submit`: `commandLineLimit`) is not kept but skipped to its end, and handed
/// over as `.tooLong` (its command is refused, the rest go on).
final class LineFeed: @unchecked Sendable {
    enum Line {
        case text([UInt8])
        /// A line of this many bytes, over `maxLineBytes`: skipped.
        case tooLong(Int)
    }

    static let maxQueued = 4_000
    /// The longest command line `submit` takes.
    static let commandLineLimit = 64 << 20

    let maxLineBytes: Int
    /// `maxQueued` for a regular file, unbounded otherwise.
    private let readAhead: Int
    private let condition = NSCondition()
    private var lines: [Line] = []
    private var finished = false
    private var readError: String?
    private let fd: Int32

    init(fd: Int32, maxLineBytes: Int = .max) {
        self.fd = fd
        self.maxLineBytes = maxLineBytes
        var info = stat()
        readAhead = fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG ? Self.maxQueued : .max
        let thread = Thread { [self] in self.run() }
        thread.start()
    }

    private func run() {
        var pending: [UInt8] = []
        var skipped = 0  // bytes of a line over the limit, read and let go (0: none)
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 {
                condition.lock()
                if n < 0 { readError = String(cString: strerror(errno)) }
                if skipped > 0 { lines.append(.tooLong(skipped + pending.count)) } else if !pending.isEmpty { lines.append(.text(pending)) }
                finished = true
                condition.broadcast()
                condition.unlock()
                return
            }
            var found: [Line] = []
            var start = 0
            for i in 0..<n where chunk[i] == 0x0A {
                if skipped > 0 {
                    found.append(.tooLong(skipped + pending.count + i - start))
                    skipped = 0
                } else {
                    pending.append(contentsOf: chunk[start..<i])
                    found.append(.text(pending))
                }
                pending = []
                start = i + 1
            }
            pending.append(contentsOf: chunk[start..<n])
            if skipped > 0 || pending.count > maxLineBytes {
                skipped += pending.count
                pending = []
            }
            if !found.isEmpty {
                condition.lock()
                while lines.count >= readAhead { condition.wait() }
                lines.append(contentsOf: found)
                condition.broadcast()
                condition.unlock()
            }
        }
    }

    /// Waits for at least one line (or the end), then takes up to `max` lines. Empty at the end.
    func take(max: Int) -> [Line] {
        condition.lock()
        defer { condition.unlock() }
        while lines.isEmpty && !finished { condition.wait() }
        let n = min(max, lines.count)
        let batch = Array(lines[0..<n])
        lines.removeFirst(n)
        condition.broadcast()  // room for the reader
        return batch
    }

    var error: String? {
        condition.lock()
        defer { condition.unlock() }
        return readError
    }
}
