import Foundation
@testable import ReferralLedger
import XCTest

/// The two-core scans keep the order of the log, stop when asked, and never lose an error.
final class ReadAheadTests: XCTestCase {
    private struct Broken: Error, Equatable { var step: Int }

    func testStepsArriveInOrderUntilTheProducerEnds() throws {
        var seen: [Int] = []
        try ReadAhead.run(produce: { n in n < 50 ? n * 10 : nil }) { step in
            seen.append(step)
            return true
        }
        XCTAssertEqual(seen, (0..<50).map { $0 * 10 })
    }

    func testTheConsumerStopsTheScanAndTheStepInFlightFinishesFirst() throws {
        let produced = ProducedCount()
        var seen: [Int] = []
        try ReadAhead.run(produce: { n in
            usleep(2_000)
            produced.add()
            return n
        }) { step in
            seen.append(step)
            return step < 3
        }
        XCTAssertEqual(seen, [0, 1, 2, 3])
        // Steps 0…4 were started (one ahead of the last consumed) and all had finished on return.
        XCTAssertEqual(produced.value, 5)
    }

    func testErrorsOfEitherSideAreRethrown() {
        XCTAssertThrowsError(try ReadAhead.run(produce: { n -> Int? in
            if n == 3 { throw Broken(step: n) }
            return n
        }) { _ in true }) { XCTAssertEqual($0 as? Broken, Broken(step: 3)) }
        var consumed = 0
        XCTAssertThrowsError(try ReadAhead.run(produce: { n in n }) { step in
            consumed += 1
            if step == 2 { throw Broken(step: step) }
            return true
        }) { XCTAssertEqual($0 as? Broken, Broken(step: 2)) }
        XCTAssertEqual(consumed, 3)
    }

    func testConcurrentMapAnswersInOrder() {
        XCTAssertEqual(concurrentMap(100) { $0 * $0 }, (0..<100).map { $0 * $0 })
        XCTAssertEqual(concurrentMap(0) { $0 }, [])
    }
}

private final class ProducedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.lock(); count += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}
