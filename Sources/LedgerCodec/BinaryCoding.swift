/// A compact binary encoding for values kept outside the chain (the decision state's snapshot):
/// unsigned integers as LEB128 varints, signed ones zig-zagged first, strings and byte arrays as
/// their length then their bytes. It has no field names: a reader reads exactly what its writer
/// wrote, in the same order, and says where the bytes ran out or made no sense.
public struct BinaryWriter: Sendable {
    @usableFromInline var storage: [UInt8] = []
    public var bytes: [UInt8] { storage }

    @inlinable public init(capacity: Int = 0) { storage.reserveCapacity(capacity) }

    @inlinable public mutating func write(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            storage.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        storage.append(UInt8(v))
    }

    @inlinable public mutating func write(_ value: Int64) { write(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }
    @inlinable public mutating func write(_ value: Int) { write(Int64(value)) }
    @inlinable public mutating func write(_ value: Bool) { storage.append(value ? 1 : 0) }

    @inlinable public mutating func write(_ value: String) {
        var text = value
        text.withUTF8 { utf8 in
            write(UInt64(utf8.count))
            storage.append(contentsOf: utf8)
        }
    }

    @inlinable public mutating func write(bytes value: [UInt8]) {
        write(UInt64(value.count))
        storage.append(contentsOf: value)
    }

    /// Whether a value follows (then the value, written by `body`).
    @inlinable public mutating func write<T>(_ value: T?, _ body: (inout BinaryWriter, T) -> Void) {
        write(value != nil)
        if let value { body(&self, value) }
    }

    /// A count, then each element written by `body`.
    @inlinable public mutating func write<S: Collection>(each elements: S, _ body: (inout BinaryWriter, S.Element) -> Void) {
        write(UInt64(elements.count))
        for element in elements { body(&self, element) }
    }

    /// A count, then each entry of `dictionary` in key order, written by `body`: one dictionary
    /// always gives the same bytes, whatever order its hashing keeps them in.
    @inlinable public mutating func write<K: Comparable, V>(inKeyOrder dictionary: [K: V], _ body: (inout BinaryWriter, (key: K, value: V)) -> Void) {
        write(each: dictionary.sorted { $0.key < $1.key }, body)
    }

    /// A count, then each entry of `dictionary` in the order of `keys`, when `keys` names as many
    /// entries as it holds and each of them (the order a fold kept them in: no sort), else in key
    /// order. Either way one dictionary and one list always give the same bytes. (Should `keys` name
    /// one twice and miss another, that entry is written twice: a reader refuses a key given twice.)
    @inlinable public mutating func write<K: Comparable, V>(_ dictionary: [K: V], inOrderOf keys: [K], _ body: (inout BinaryWriter, (key: K, value: V)) -> Void) {
        guard keys.count == dictionary.count else { return write(inKeyOrder: dictionary, body) }
        var entries: [(key: K, value: V)] = []
        entries.reserveCapacity(keys.count)
        for key in keys {
            guard let value = dictionary[key] else { return write(inKeyOrder: dictionary, body) }
            entries.append((key, value))
        }
        write(each: entries, body)
    }
}

/// Why bytes could not be read back (`BinaryReader`).
public struct BinaryFormatError: Error, Sendable, CustomStringConvertible {
    public var offset: Int
    public var message: String
    public var description: String { "at byte \(offset): \(message)" }

    @usableFromInline init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }
}

public struct BinaryReader {
    @usableFromInline let bytes: [UInt8]
    @usableFromInline var position = 0
    public var offset: Int { position }

    @inlinable public init(_ bytes: [UInt8]) { self.bytes = bytes }

    @inlinable public var isAtEnd: Bool { position == bytes.count }

    @inlinable public func failure(_ message: String) -> BinaryFormatError { BinaryFormatError(offset: position, message: message) }

    @inlinable public mutating func readUInt64() throws(BinaryFormatError) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard position < bytes.count else { throw failure("the bytes end inside a number") }
            let byte = bytes[position]
            position += 1
            guard shift < 64, shift < 63 || byte <= 1 else { throw failure("a number is longer than 64 bits") }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    @inlinable public mutating func readInt64() throws(BinaryFormatError) -> Int64 {
        let raw = try readUInt64()
        return Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
    }

    @inlinable public mutating func readInt() throws(BinaryFormatError) -> Int {
        let value = try readInt64()
        guard let int = Int(exactly: value) else { throw failure("a number does not fit an Int") }
        return int
    }

    @inlinable public mutating func readBool() throws(BinaryFormatError) -> Bool {
        guard position < bytes.count else { throw failure("the bytes end inside a flag") }
        let byte = bytes[position]
        guard byte <= 1 else { throw failure("a flag is \(byte), not 0 or 1") }
        position += 1
        return byte == 1
    }

    /// A count of items that each take at least one byte (so a corrupt count fails here, not in an allocation).
    @inlinable public mutating func readCount() throws(BinaryFormatError) -> Int {
        let count = try readUInt64()
        guard count <= UInt64(bytes.count - position) else { throw failure("a count of \(count) is more than the bytes left") }
        return Int(count)
    }

    @inlinable public mutating func readBytes() throws(BinaryFormatError) -> [UInt8] {
        let count = try readCount()
        defer { position += count }
        return Array(bytes[position..<position + count])
    }

    /// (Bytes that are not UTF-8 are repaired, not refused: what is read is checked whole, by a
    /// digest, before it is decoded.)
    @inlinable public mutating func readString() throws(BinaryFormatError) -> String {
        let count = try readCount()
        defer { position += count }
        return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[position..<position + count]), as: UTF8.self) }
    }

    @inlinable public mutating func readOptional<T>(_ body: (inout BinaryReader) throws -> T) throws -> T? {
        try readBool() ? try body(&self) : nil
    }

    @inlinable public mutating func readArray<T>(_ body: (inout BinaryReader) throws -> T) throws -> [T] {
        let count = try readCount()
        var items: [T] = []
        items.reserveCapacity(count)
        for _ in 0..<count { items.append(try body(&self)) }
        return items
    }

    /// A string-valued enum case by its raw value.
    @inlinable public mutating func readCase<T: RawRepresentable>(_ type: T.Type) throws -> T where T.RawValue == String {
        let raw = try readString()
        guard let value = T(rawValue: raw) else { throw failure("\"\(raw)\" is not a \(T.self)") }
        return value
    }
}
