@testable import ReferralLedger
import XCTest

/// `ProjectionStore.Entry.sortInKeyOrder`, the order a rebuild writes with `MDB_APPEND`, against
/// the plain definition: database name, then key bytes (a prefix first), then the entries' order.
final class KeyOrderSortTests: XCTestCase {
    private func expectedOrder(_ entries: [ProjectionStore.Entry]) -> [[UInt8]] {
        entries.enumerated().sorted { a, b in
            if a.element.database != b.element.database { return a.element.database < b.element.database }
            if a.element.key != b.element.key { return a.element.key.lexicographicallyPrecedes(b.element.key) }
            return a.offset < b.offset
        }.map(\.element.value)
    }

    /// Keys sharing long prefixes, keys that are prefixes of others, NUL and 0xFF bytes, repeated
    /// keys, databases interleaved: the shapes the 8-byte comparison after a common prefix must get
    /// right (including ties of zero padding against real zero bytes).
    func testSortsLikeTheDefinition() {
        var generator = SystemRandomNumberGenerator()
        for size in [2, 3, 17, 500, 40_000] {
            var entries: [ProjectionStore.Entry] = []
            for n in 0..<size {
                let database = ["proj_participants", "proj_users", "proj_audit", "proj_codes"][Int.random(in: 0..<(size > 100 ? 4 : 2), using: &generator)]
                var key = Array("acme\u{0}spring\u{0}".utf8)
                for _ in 0..<Int.random(in: 0...12, using: &generator) { key.append([0, 1, 0x30, 0x31, 0xFF].randomElement(using: &generator)!) }
                if n % 7 == 0, let previous = entries.last { key = previous.key }  // a repeated key
                if n % 11 == 0 { key = Array(key.prefix(Int.random(in: 0...key.count, using: &generator))) }  // a prefix, maybe empty
                entries.append(ProjectionStore.Entry(database: database, key: key, value: Array(String(n).utf8)))
            }
            let expected = expectedOrder(entries)
            var sorted = entries
            ProjectionStore.Entry.sortInKeyOrder(&sorted)
            XCTAssertEqual(sorted.map(\.value), expected, "\(size) entries")
        }
    }

    /// Two large databases are sorted side by side on every core: the same order as one at a time.
    func testLargeDatabasesSortTheSameSideBySide() {
        let entries = (0..<60_000).map { n in
            ProjectionStore.Entry(database: n % 2 == 0 ? "proj_users" : "proj_participants",
                                  key: Array("acme\u{0}user-\((n * 7_919) % 60_000)".utf8), value: Array(String(n).utf8))
        }
        var sorted = entries
        ProjectionStore.Entry.sortInKeyOrder(&sorted)
        XCTAssertEqual(sorted.map(\.value), expectedOrder(entries))
        XCTAssertEqual(sorted.first?.database, "proj_participants")
    }
}
