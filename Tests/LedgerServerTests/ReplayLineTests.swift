import Foundation
@testable import LedgerServer
import XCTest

/// `as_of` replays run one at a time, and at most `maxReplays` wait in line: one more is refused
/// at once (503 `replays_busy`), so abandoned requests cannot hold every later replay back.
final class ReplayLineTests: XCTestCase {
    func testReplaysPastTheLineAreRefusedAndTheLineEmpties() async throws {
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        var waiting: [Task<Int?, Error>] = []
        for n in 0..<BlockingWork.maxReplays {
            waiting.append(Task {
                try await BlockingWork.replay { () -> Int in
                    started.signal()
                    release.wait()
                    return n
                }
            })
        }
        // The first runs (and blocks); the others wait behind it.
        XCTAssertEqual(started.wait(timeout: .now() + 10), .success)
        let deadline = Date().addingTimeInterval(10)
        while BlockingWork.replaysWaitingOrRunning < BlockingWork.maxReplays && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        guard BlockingWork.replaysWaitingOrRunning == BlockingWork.maxReplays else {
            for _ in 0..<BlockingWork.maxReplays { release.signal() }
            return XCTFail("the replays never all stood in line")
        }
        let refused = try await BlockingWork.replay { 99 }
        XCTAssertNil(refused, "a replay past the line is refused, not queued")
        for _ in 0..<BlockingWork.maxReplays { release.signal() }
        var answers: [Int] = []
        for task in waiting { if let n = try await task.value { answers.append(n) } }
        XCTAssertEqual(answers.sorted(), Array(0..<BlockingWork.maxReplays))
        // The line is empty again: a new replay runs.
        let again = try await BlockingWork.replay { 7 }
        XCTAssertEqual(again, 7)
    }
}
