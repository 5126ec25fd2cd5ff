import Foundation

/// Reads JSON Lines from a file descriptor on its own thread, so the writer can take every
/// line that has arrived (up to a batch) whenever it is ready: whatever arrives before the
/// input pauses is committed together.
///
/// From a regular file it reads ahead at most `maxQueued` lines or `maxQueuedBytes` (a few
/// batches), then waits for the writer, so a file of any size is never held in memory whole. From a pipe it reads everything
/// that comes: a client that writes all its commands before it reads any result (the results
/// fill their own pipe meanwhile) must not wait for us while we wait for it. A line longer than
/// `maxLineBytes` (`submit`: `commandLineLimit`) is not kept but skipped to its end, and handed
/// over as `.tooLong` (its command is refused, the rest go on).
final class LineFeed: @unchecked Sendable {
    enum Line {
        case text([UInt8])
        /// A line of this many bytes, over `maxLineBytes`: skipped.
        case tooLong(Int)

        /// The bytes it holds in memory.
        var bytes: Int {
            switch self {
            case .text(let text): text.count
            case .tooLong: 0
            }
        }
    }

    /// Whether a line is blank: empty, or only spaces, tabs and carriage returns (`submit` skips it).
    static func isBlank(_ bytes: some Collection<UInt8>) -> Bool { bytes.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D } }

    static let maxQueued = 4_000
    static let maxQueuedBytes = 64 << 20
    /// The longest command line `submit` takes.
    static let commandLineLimit = 64 << 20

    let maxLineBytes: Int
    /// `maxQueued` (and `maxQueuedBytes`) for a regular file, unbounded otherwise.
    private let readAhead: Int
    private let readAheadBytes: Int
    private let condition = NSCondition()
    private var lines: [Line] = []
    /// The bytes of the text lines in `lines`.
    private var queuedBytes = 0
    private var finished = false
    private var readError: String?
    private let fd: Int32

    init(fd: Int32, maxLineBytes: Int = .max) {
        self.fd = fd
        self.maxLineBytes = maxLineBytes
        var info = stat()
        let isFile = fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
        readAhead = isFile ? Self.maxQueued : .max
        readAheadBytes = isFile ? Self.maxQueuedBytes : .max
        let thread = Thread { [self] in self.run() }
        thread.start()
    }

    private func run() {
        var pending: [UInt8] = []
        var skipped = 0  // bytes of a line over the limit, read and let go (0: none)
        var skippedBlank = true  // whether they were all blank (such a line is skipped like any blank line)
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 {
                condition.lock()
                if n < 0 { readError = String(cString: strerror(errno)) }
                if skipped > 0 || pending.count > maxLineBytes {
                    if !(skippedBlank && Self.isBlank(pending[...])) { lines.append(.tooLong(skipped + pending.count)) }
                } else if !pending.isEmpty {
                    lines.append(.text(pending))
                    queuedBytes += pending.count
                }
                finished = true
                condition.broadcast()
                condition.unlock()
                return
            }
            var found: [Line] = []
            var start = 0
            for i in 0..<n where chunk[i] == 0x0A {
                let length = skipped + pending.count + i - start
                if skipped > 0 || length > maxLineBytes {
                    if !(skippedBlank && Self.isBlank(pending[...]) && Self.isBlank(chunk[start..<i])) { found.append(.tooLong(length)) }
                    skipped = 0
                    skippedBlank = true
                } else {
                    pending.append(contentsOf: chunk[start..<i])
                    found.append(.text(pending))
                }
                pending = []
                start = i + 1
            }
            pending.append(contentsOf: chunk[start..<n])
            if skipped > 0 || pending.count > maxLineBytes {
                skippedBlank = skippedBlank && Self.isBlank(pending[...])
                skipped += pending.count
                pending = []
            }
            if !found.isEmpty {
                condition.lock()
                while lines.count >= readAhead || queuedBytes >= readAheadBytes { condition.wait() }
                lines.append(contentsOf: found)
                queuedBytes += found.reduce(0) { $0 + $1.bytes }
                condition.broadcast()
                condition.unlock()
            }
        }
    }

    /// Waits for at least one line (or the end), then takes up to `max` lines, and no more lines
    /// than fit in `maxBytes` (one at least). Empty at the end.
    func take(max: Int, maxBytes: Int = .max) -> [Line] {
        condition.lock()
        defer { condition.unlock() }
        while lines.isEmpty && !finished { condition.wait() }
        var n = 0
        var bytes = 0
        while n < min(max, lines.count) {
            bytes += lines[n].bytes
            if n > 0 && bytes > maxBytes { break }
            n += 1
        }
        let batch = Array(lines[0..<n])
        lines.removeFirst(n)
        queuedBytes -= batch.reduce(0) { $0 + $1.bytes }
        condition.broadcast()  // room for the reader
        return batch
    }

    var error: String? {
        condition.lock()
        defer { condition.unlock() }
        return readError
    }
}
