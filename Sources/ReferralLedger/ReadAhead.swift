import Dispatch

/// Two-stage pipeline for long scans of the log (verify, fold, rebuild): step `n + 1` is produced
/// on another thread (reading a page in its own short read transaction, parsing and hashing its
/// values) while the caller consumes step `n` (folding, re-deciding, writing projections).
/// Both cores work; the order of steps is kept; at most one step waits ahead.
enum ReadAhead {
    /// Calls `produce(0)`, `produce(1)`, … one step ahead on a background thread and hands each
    /// result to `consume` in order on the calling thread. Stops after the first nil from `produce`,
    /// the first `false` from `consume`, or the first error of either (which is rethrown).
    static func run<Step: Sendable>(produce: @escaping @Sendable (Int) throws -> Step?, consume: (Step) throws -> Bool) throws {
        var pending = Pending<Step?>.start { try produce(0) }
        // However this ends, the step in flight finishes first: its read transaction closes before
        // the caller may close the environment, and nothing it writes is read while it runs.
        var finished = false
        defer { if !finished { _ = try? pending.wait() } }
        var n = 0
        while true {
            let step: Step?
            do { step = try pending.wait() } catch { finished = true; throw error }
            guard let step else { finished = true; return }
            n += 1
            let next = n
            pending = Pending.start { try produce(next) }
            let goOn = try consume(step)
            // Released off this thread: freeing a page of parsed events is work the thread that
            // folds them (the one a fold waits for) need not do.
            Disposal.release(consume step)
            guard goOn else { return }
        }
    }
}

/// One piece of work computing on a global queue while its starter goes on; `wait` answers its
/// result (a read-ahead step, a state snapshot saved while a rebuild writes its projections).
final class Pending<Value: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<Value, any Error>?
    /// The work, dropped before it says it is done: what it holds (the environment a page is read
    /// from) is released by the time `wait` returns, so a caller that closes a ledger after a scan
    /// can open it again at once.
    private var work: (@Sendable () throws -> Value)?

    static func start(_ work: @escaping @Sendable () throws -> Value) -> Pending {
        let p = Pending()
        p.work = work
        DispatchQueue.global(qos: .userInitiated).async { [p] in
            p.run()
            p.done.signal()
        }
        return p
    }

    private func run() {
        let work = self.work!
        self.work = nil
        result = Result { try work() }
    }

    /// Waits for the work to end and answers what it gave, or rethrows what it threw (again at
    /// every later call).
    func wait() throws -> Value {
        done.wait()
        done.signal()
        return try result!.get()
    }
}

/// Runs `body(0..<count)` on every core and answers the results in order.
func concurrentMap<T: Sendable>(_ count: Int, _ body: @Sendable (Int) -> T) -> [T] {
    let slots = UnsafeMutableBufferPointer<T?>.allocate(capacity: count)
    slots.initialize(repeating: nil)
    defer { _ = slots.deinitialize(); slots.deallocate() }
    let box = UncheckedBox(slots)
    // Each iteration writes only its own slot.
    DispatchQueue.concurrentPerform(iterations: count) { i in box.value[i] = body(i) }
    return slots.map { $0! }
}

/// `transform` of every element, in order, the elements split into `parts` runs made on every
/// core; the first error (in element order) is rethrown.
func concurrentMap<Element: Sendable, T: Sendable>(_ elements: [Element], parts: Int = 4,
                                                   _ transform: @Sendable (Element) throws -> T) throws -> [T] {
    let runs = concurrentMap(parts) { part -> Result<[T], any Error> in
        Result { try elements[(elements.count * part / parts)..<(elements.count * (part + 1) / parts)].map(transform) }
    }
    return try runs.flatMap { try $0.get() }
}

private struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
