#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value guarded by a pthread mutex.
///
/// Used instead of `Synchronization.Mutex`: on Linux that one is built on raw
/// futex calls which ThreadSanitizer cannot see, so every access under it is
/// reported as a race and `swift test --sanitize=thread` becomes useless.
///
/// `package`: the ledger server's swappable API keys use it too.
package final class Locked<Value: Sendable>: @unchecked Sendable {
    /// Heap-allocated so the mutex never moves.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
