import Foundation
import ReferralLedger

/// `submit`'s input, a take at a time (up to 1,000 commands and 16 MiB: one write transaction),
/// read from the `LineFeed` and parsed (`Ledger.prepare`) on a thread of its own one take ahead:
/// parsing the next take overlaps deciding this one. A take is split where a line too long to
/// keep stands, so that its refusal is answered in order.
final class SubmitReadAhead: @unchecked Sendable {
    enum Part {
        case commands(Ledger.PreparedCommands)
        /// A line of this many bytes, over the limit: skipped.
        case tooLong(Int)
    }

    private let feed: LineFeed
    private let queue = DispatchQueue(label: "submit.read-ahead")
    private let ready = DispatchSemaphore(value: 0)
    private var taken: [Part]?

    init(feed: LineFeed) {
        self.feed = feed
        start()
    }

    /// The next take, parsed; nil at the end of the input.
    func next() -> [Part]? {
        ready.wait()
        guard let parts = taken else { return nil }
        start()
        return parts
    }

    private func start() {
        queue.async { [self] in
            let lines = feed.take(max: 1000, maxBytes: 16 << 20)
            taken = lines.isEmpty ? nil : Self.parts(lines)
            ready.signal()
        }
    }

    private static func parts(_ lines: [LineFeed.Line]) -> [Part] {
        var parts: [Part] = []
        var batch: [CommandInput] = []
        func flush() {
            if !batch.isEmpty { parts.append(.commands(Ledger.prepare(batch))) }
            batch = []
        }
        for line in lines {
            switch line {
            case .text(let text):
                if !LineFeed.isBlank(text) { batch.append(.text(text)) }
            case .tooLong(let bytes):
                flush()  // in order: the lines before it first
                parts.append(.tooLong(bytes))
            }
        }
        flush()
        return parts
    }
}
