import Dispatch
import LedgerCodec
import Synchronization

/// `serve`'s log on stderr, each line stamped with the time. A request's access line is gathered
/// and written with the others of its tenth of a second (or of 64 KiB): one write per request cost
/// a tenth of the server's throughput (15.7k / 16.0k appends/s, against 17.0k / 17.8k batched,
/// alternated; see docs/decisions.md). Every other line (start, stop, errors, the delivery
/// worker's) is written at once, after the access lines gathered before it, so the order holds.
/// A process killed with -9 loses at most the last tenth of a second of access lines.
/// (`@unchecked`: the timer is only set up in `init` and cancelled in `deinit`; the buffer is
/// behind its mutex.)
final class ServeLog: @unchecked Sendable {
    private let pending = Mutex<[UInt8]>([])
    private let timer: DispatchSourceTimer
    private static let flushBytes = 64 << 10

    init() {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "serve.log", qos: .utility))
        timer.schedule(deadline: .now() + .milliseconds(100), repeating: .milliseconds(100))
        timer.setEventHandler { [weak self] in self?.flush() }
        timer.resume()
    }

    deinit { timer.cancel() }

    /// An access line: written with the next batch.
    func access(_ line: String) {
        pending.withLock { buffer in
            Self.append(line, to: &buffer)
            if buffer.count >= Self.flushBytes { Self.writeOut(&buffer) }
        }
    }

    /// Any other line: written now, after the access lines gathered before it. (Every write is
    /// made under the lock, so lines reach stderr in the order they were logged.)
    func line(_ line: String) {
        pending.withLock { buffer in
            Self.append(line, to: &buffer)
            Self.writeOut(&buffer)
        }
    }

    /// Writes what is gathered (at the end of `serve`).
    func flush() {
        pending.withLock { Self.writeOut(&$0) }
    }

    private static func append(_ line: String, to buffer: inout [UInt8]) {
        buffer.append(contentsOf: Timestamp.now().description.utf8)
        buffer.append(0x20)
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
    }

    /// The whole of `buffer` to stderr, then empties it (a failed write drops the rest: a log
    /// that cannot be written must not stop the server).
    private static func writeOut(_ buffer: inout [UInt8]) {
        if !buffer.isEmpty { _ = Output.writeAll(buffer, to: 2) }
        buffer.removeAll(keepingCapacity: true)
    }
}
