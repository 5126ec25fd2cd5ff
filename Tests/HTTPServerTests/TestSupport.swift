import Foundation
import HTTPServer
import XCTest

extension XCTestCase {
    /// Starts a server on 127.0.0.1 and a free port; it is shut down when the test ends.
    func startServer(
        _ configure: (inout HTTPServer.Configuration) -> Void = { _ in },
        handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse
    ) throws -> HTTPServer {
        signal(SIGPIPE, SIG_IGN)  // a client writing to a closed socket must fail, not kill the runner
        var configuration = HTTPServer.Configuration(host: "127.0.0.1", port: 0)
        configure(&configuration)
        let server = try HTTPServer(configuration: configuration, handler: handler)
        addTeardownBlock { server.shutdown(drainTimeout: 1) }
        return server
    }
}

/// A value behind an `NSLock` (visible to ThreadSanitizer, unlike
/// `Synchronization.Mutex` on Linux).
final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Counts handlers running at once and the most seen together.
final class ConcurrencyProbe: Sendable {
    private struct Counts { var current = 0, maximum = 0, total = 0 }
    private let counts = Guarded(Counts())

    func enter() {
        counts.withLock {
            $0.current += 1
            $0.total += 1
            $0.maximum = max($0.maximum, $0.current)
        }
    }

    func leave() { counts.withLock { $0.current -= 1 } }
    var maximum: Int { counts.withLock { $0.maximum } }
    var total: Int { counts.withLock { $0.total } }
    var current: Int { counts.withLock { $0.current } }
}

/// A thread-safe list, e.g. of access-log lines or captured requests.
final class Collector<Element: Sendable>: Sendable {
    private let items = Guarded<[Element]>([])
    func append(_ item: Element) { items.withLock { $0.append(item) } }
    var all: [Element] { items.withLock { $0 } }
}

/// Holds handlers until the test opens it.
final class Gate: Sendable {
    private let isOpen = Guarded(false)
    func open() { isOpen.withLock { $0 = true } }
    func wait() async {
        while !isOpen.withLock({ $0 }) {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}


/// Polls `condition` until it holds or `timeout` passes; returns its last value.
func eventually(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(5_000)
    }
    return condition()
}
