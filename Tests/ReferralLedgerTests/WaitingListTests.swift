@testable import ReferralRules
import XCTest

/// The inventory queue keeps earning order through any mix of rewards starting to wait, being
/// handed codes (in any order) and waiting again, like a plain array would.
final class WaitingListTests: XCTestCase {
    func testTheQueueMatchesAPlainArrayThroughRandomTurns() {
        var generator = SplitMix(seed: 7)
        for round in 0..<40 {
            var list = WaitingList()
            var model: [(id: String, position: Int)] = []
            let positions = Dictionary(uniqueKeysWithValues: (0..<60).map { ("r\($0)", Int(generator.next() % 10_000)) })
            for step in 0..<400 {
                let id = "r\(generator.next() % 60)"
                if generator.next() % 3 == 0 {
                    list.remove(id)
                    model.removeAll { $0.id == id }
                } else {
                    let position = positions[id]!
                    list.insert(id) { positions[$0]! > position }
                    if !model.contains(where: { $0.id == id }) {
                        let at = model.firstIndex { $0.position > position } ?? model.endIndex
                        model.insert((id, position), at: at)
                    }
                }
                XCTAssertEqual(list.ids, model.map(\.id), "round \(round) step \(step)")
                XCTAssertEqual(list.count, model.count)
                XCTAssertEqual(list.contains(id), model.contains { $0.id == id })
                let suffix = "\(generator.next() % 10)"
                XCTAssertEqual(list.contains { $0.hasSuffix(suffix) }, model.contains { $0.id.hasSuffix(suffix) })
                if list.ids != model.map(\.id) { return }
            }
        }
    }

    func testTakingThousandsOffInAnotherOrderLeavesTheRestInOrder() {
        var list = WaitingList()
        for n in 0..<20_000 { list.insert("r\(n)") { _ in false } }
        for n in stride(from: 19_999, through: 0, by: -2) { list.remove("r\(n)") }
        XCTAssertEqual(list.ids, stride(from: 0, to: 20_000, by: 2).map { "r\($0)" })
        list.insert("r1") { Int($0.dropFirst())! > 1 }
        XCTAssertEqual(Array(list.ids.prefix(3)), ["r0", "r1", "r2"])
    }
}

/// A small deterministic generator (the test must not depend on the run).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
