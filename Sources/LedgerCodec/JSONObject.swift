/// The members of a JSON object, kept sorted by their keys' UTF-8 bytes: the order `JSONWriter`
/// writes them in (the canonical form), so writing needs no sort, two objects compare member by
/// member, and a canonical text parses without any reordering. Objects in this ledger are small
/// (a command, an event's data), where a sorted array beats hashing every key.
public struct JSONObject: Sendable, Hashable {
    public struct Member: Sendable, Hashable {
        public var key: String
        public var value: JSONValue
    }

    /// Sorted by key (UTF-8 bytes), keys unique.
    public private(set) var members: [Member]

    public init() { members = [] }

    public init(_ dictionary: [String: JSONValue]) {
        members = dictionary.map { Member(key: $0.key, value: $0.value) }
        members.sort { Self.precedes($0.key, $1.key) }
    }

    /// Members already sorted by key with no key twice (the parser checks before it calls this).
    init(sortedUniqueMembers: [Member]) { members = sortedUniqueMembers }

    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }
    public var keys: [String] { members.map(\.key) }
    public var values: [JSONValue] { members.map(\.value) }

    /// Whether `a` sorts before `b` by UTF-8 bytes (the canonical key order).
    @inline(__always)
    public static func precedes(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        return a.withUTF8 { pa in b.withUTF8 { pb in
            let n = Swift.min(pa.count, pb.count)
            if n > 0 {
                // Most keys differ in their first byte: no call for those.
                if pa[0] != pb[0] { return pa[0] < pb[0] }
                let c = memcmp(pa.baseAddress!, pb.baseAddress!, n)
                if c != 0 { return c < 0 }
            }
            return pa.count < pb.count
        } }
    }

    /// The index of `key`, or where it would be inserted.
    private func find(_ key: String) -> (index: Int, found: Bool) {
        if members.count <= 8 {
            let length = key.utf8.count
            for (i, m) in members.enumerated() {
                if m.key.utf8.count == length, m.key == key { return (i, true) }
                if Self.precedes(key, m.key) { return (i, false) }
            }
            return (members.count, false)
        }
        var low = 0, high = members.count
        while low < high {
            let mid = (low + high) / 2
            let k = members[mid].key
            if k == key { return (mid, true) }
            if Self.precedes(k, key) { low = mid + 1 } else { high = mid }
        }
        return (low, false)
    }

    /// The position of `key` among the members, if present.
    public func index(forKey key: String) -> Int? {
        let (i, found) = find(key)
        return found ? i : nil
    }

    public subscript(key: String) -> JSONValue? {
        get {
            // Small objects (most of them): equality alone, and only of keys of the same length
            // (`==` calls out of line for every pair of different strings).
            if members.count <= 12 {
                let length = key.utf8.count
                for i in members.indices where members[i].key.utf8.count == length && members[i].key == key { return members[i].value }
                return nil
            }
            let (i, found) = find(key)
            // Not a ternary: `nil` there would become JSONValue.null (it is nil-literal expressible).
            if found { return members[i].value }
            return nil
        }
        set {
            let (i, found) = find(key)
            switch (found, newValue) {
            case (true, let v?): members[i].value = v
            case (true, nil): members.remove(at: i)
            case (false, let v?): members.insert(Member(key: key, value: v), at: i)
            case (false, nil): break
            }
        }
    }

    /// Sets `value` under `key`; answers the value it replaced.
    @discardableResult
    public mutating func updateValue(_ value: JSONValue, forKey key: String) -> JSONValue? {
        let (i, found) = find(key)
        if found {
            let old = members[i].value
            members[i].value = value
            return old
        }
        members.insert(Member(key: key, value: value), at: i)
        return nil
    }

    public func mapValues(_ transform: (JSONValue) throws -> JSONValue) rethrows -> JSONObject {
        JSONObject(sortedUniqueMembers: try members.map { Member(key: $0.key, value: try transform($0.value)) })
    }
}

extension JSONObject: Sequence {
    public struct Iterator: IteratorProtocol {
        var base: IndexingIterator<[Member]>
        public mutating func next() -> (key: String, value: JSONValue)? { base.next().map { ($0.key, $0.value) } }
    }
    public func makeIterator() -> Iterator { Iterator(base: members.makeIterator()) }
    public var underestimatedCount: Int { members.count }
}

extension JSONObject: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(literal: elements)
    }

    /// The members of a literal, sorted once (a key given twice keeps its last value, as
    /// assigning them one by one would). A literal written in key order is only checked.
    init(literal elements: [(String, JSONValue)]) {
        var members = elements.map { Member(key: $0.0, value: $0.1) }
        // Insertion sort in place: literals are a handful of members, most nearly in order, where
        // it beats sorting an index (one comparison per step, members moved, not copied). Stable:
        // of two equal keys the later stays later, and is the one kept below.
        var twice = false
        for i in members.indices.dropFirst() {
            var j = i
            while j > 0, !Self.precedes(members[j - 1].key, members[j].key) {
                guard Self.precedes(members[j].key, members[j - 1].key) else { twice = true; break }
                members.swapAt(j - 1, j)
                j -= 1
            }
        }
        if !twice {
            self.init(sortedUniqueMembers: members)
            return
        }
        var unique: [Member] = []
        unique.reserveCapacity(members.count)
        for m in members {
            if let last = unique.last, !Self.precedes(last.key, m.key) { unique[unique.count - 1] = m } else { unique.append(m) }
        }
        self.init(sortedUniqueMembers: unique)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
