import LedgerCodec
import Synchronization

/// The wall clock plus an offset the test moves forward, to make retries due without sleeping.
final class TestClock: Sendable {
    private let offset = Mutex<Int64>(0)

    var now: @Sendable () -> Timestamp {
        { [self] in Timestamp.now().adding(milliseconds: offset.withLock { $0 }) }
    }

    func advance(seconds: Int64) { offset.withLock { $0 += seconds * 1000 } }
}
