import LedgerCodec

/// The position of the last event and the SHA-256 of its value: what the chain ends in.
public struct ChainHead: Sendable, Equatable {
    public var position: UInt64
    public var hash: String

    public init(position: UInt64, hash: String) {
        self.position = position
        self.hash = hash
    }

    public static let genesis = ChainHead(position: 0, hash: SHA256.zeroHex)
}

/// An event as stored: its envelope, its data and the exact bytes the chain hashes.
public struct StoredEvent: Sendable, Equatable {
    public var position: UInt64
    public var type: String
    public var at: Timestamp
    public var recordedAt: Timestamp
    public var commandID: String?
    public var data: JSONValue
    public var prevHash: String
    public var bytes: [UInt8]

    /// Parses a stored value. Throws a message naming what is wrong.
    public init(bytes: [UInt8]) throws(EventFormatError) {
        let value: JSONValue
        do { value = try JSONValue(parsing: bytes) } catch { throw EventFormatError(message: "not valid JSON (\(error))") }
        try self.init(bytes: bytes, value: value)
    }

    /// Parses a stored value and tells whether its bytes are exactly what the log writes for it
    /// (compact JSON, sorted keys, canonical timestamps): the check `verify` makes of every value.
    public static func parsingCheckingForm(_ bytes: [UInt8]) throws(EventFormatError) -> (event: StoredEvent, isCanonical: Bool) {
        let parsed: (value: JSONValue, canonical: Bool?)
        do { parsed = try JSONParser.parseNotingForm(bytes) } catch { throw EventFormatError(message: "not valid JSON (\(error))") }
        let event = try StoredEvent(bytes: bytes, value: parsed.value)
        switch parsed.canonical {
        case false?:
            return (event, false)
        case true?:
            // The parser vouches for the layout; the times must also be written as the log writes them.
            return (event, parsed.value["at"].stringValue.map(event.at.isWritten(as:)) == true
                        && parsed.value["recorded_at"].stringValue.map(event.recordedAt.isWritten(as:)) == true)
        case nil:
            return (event, bytes == event.canonicalBytes)
        }
    }

    /// The bytes the log writes for this event.
    public var canonicalBytes: [UInt8] {
        EventLog.encode(position: position, event: NewEvent(type: type, at: at, data: data), recordedAt: recordedAt,
                        commandID: commandID, prevHash: prevHash)
    }

    fileprivate init(bytes: [UInt8], value: JSONValue) throws(EventFormatError) {
        guard case .object(let o) = value else { throw EventFormatError(message: "not a JSON object") }
        guard let p = o["position"]?.intValue, p > 0 else { throw EventFormatError(message: "missing or bad \"position\"") }
        guard let type = o["type"]?.stringValue else { throw EventFormatError(message: "missing \"type\"") }
        guard let atText = o["at"]?.stringValue, let at = Timestamp(rfc3339: atText) else { throw EventFormatError(message: "missing or bad \"at\"") }
        guard let recText = o["recorded_at"]?.stringValue, let rec = Timestamp(rfc3339: recText) else {
            throw EventFormatError(message: "missing or bad \"recorded_at\"")
        }
        guard let prev = o["prev_hash"]?.stringValue, prev.utf8.count == 64 else { throw EventFormatError(message: "missing or bad \"prev_hash\"") }
        guard let data = o["data"], case .object = data else { throw EventFormatError(message: "missing \"data\" object") }
        let commandID: String?
        switch o["command_id"] {
        case .string(let s)?: commandID = s
        case .null?: commandID = nil
        default: throw EventFormatError(message: "missing or bad \"command_id\"")
        }
        if o.count != 7 {
            let extra = o.keys.filter { !EventLog.envelopeKeys.contains($0) }.sorted()
            throw EventFormatError(message: "unexpected fields \(extra)")
        }
        self.position = UInt64(p)
        self.type = type
        self.at = at
        self.recordedAt = rec
        self.commandID = commandID
        self.data = data
        self.prevHash = prev
        self.bytes = bytes
    }

    init(position: UInt64, event: NewEvent, recordedAt: Timestamp, commandID: String?, prevHash: String, bytes: [UInt8]) {
        self.position = position
        self.type = event.type
        self.at = event.at
        self.recordedAt = recordedAt
        self.commandID = commandID
        self.data = event.data
        self.prevHash = prevHash
        self.bytes = bytes
    }
}

/// What folds and indexes read of an event: its position, type and data.
public protocol LoggedEvent {
    var position: UInt64 { get }
    var type: String { get }
    var data: JSONValue { get }
}

extension StoredEvent: LoggedEvent {}

/// A stored event as a fold reads it: parsed and its envelope checked as `StoredEvent` does, but
/// without the command it records (`data.command`, read only by `verify`), which is skipped over
/// unparsed. That command is most of an event's text, so most of a fold's parsing.
public struct FoldEvent: LoggedEvent, Sendable {
    public var position: UInt64
    public var type: String
    public var at: Timestamp
    /// The event's data without its `command` member.
    public var data: JSONValue

    public init(bytes: [UInt8]) throws(EventFormatError) {
        let value: JSONValue
        do { value = try JSONParser.parse(bytes, omitting: "command", atDepth: 2) } catch { throw EventFormatError(message: "not valid JSON (\(error))") }
        let event = try StoredEvent(bytes: bytes, value: value)
        position = event.position
        type = event.type
        at = event.at
        data = event.data
    }
}

public struct EventFormatError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// The append-only, hash-chained event log in the `events` database, with its head in `meta`.
///
/// Key: the position as 8-byte big-endian. Value: compact JSON with sorted keys
/// `at, command_id, data, position, prev_hash, recorded_at, type`. `prev_hash` is the
/// SHA-256 (lowercase hex) of the previous value's bytes, 64 zeros for position 1.
public enum EventLog {
    public static let eventsDatabase = "events"
    public static let metaDatabase = "meta"
    static let envelopeKeys: Set<String> = ["at", "command_id", "data", "position", "prev_hash", "recorded_at", "type"]

    public static func key(_ position: UInt64) -> [UInt8] {
        withUnsafeBytes(of: position.bigEndian) { Array($0) }
    }

    public static func position(fromKey key: UnsafeRawBufferPointer) -> UInt64? {
        guard key.count == 8 else { return nil }
        var v: UInt64 = 0
        for b in key { v = v << 8 | UInt64(b) }
        return v
    }

    /// Encodes one event value in canonical form.
    public static func encode(position: UInt64, event: NewEvent, recordedAt: Timestamp, commandID: String?, prevHash: String) -> [UInt8] {
        var hashOffset = 0
        return encode(position: position, event: event, recordedAt: recordedAt, commandID: commandID, prevHash: prevHash, hashOffset: &hashOffset)
    }

    /// Encodes one event value in canonical form, noting where the 64 characters of `prev_hash` start.
    static func encode(position: UInt64, event: NewEvent, recordedAt: Timestamp, commandID: String?, prevHash: String,
                       hashOffset: inout Int) -> [UInt8] {
        var w = JSONWriter(capacity: 256)
        w.append("{\"at\":")
        w.writeTimestamp(event.at)
        w.append(",\"command_id\":")
        if let commandID { w.writeString(commandID) } else { w.append("null") }
        w.append(",\"data\":")
        w.write(event.data)
        w.append(",\"position\":")
        if let p = Int64(exactly: position) { w.writeInteger(p) } else { w.append(String(position)) }
        w.append(",\"prev_hash\":")
        hashOffset = w.bytes.count + 1
        w.writeString(prevHash)
        w.append(",\"recorded_at\":")
        w.writeTimestamp(recordedAt)
        w.append(",\"type\":")
        w.writeString(event.type)
        w.append("}")
        return w.bytes
    }

    /// The head recorded in `meta` (genesis for an empty log).
    public static func head(_ txn: LMDBTransaction) throws -> ChainHead {
        guard let p = try txn.get(metaDatabase, Array("head_position".utf8)),
              let position = UInt64(String(decoding: p, as: UTF8.self)),
              let h = try txn.get(metaDatabase, Array("head_hash".utf8)) else { return .genesis }
        return ChainHead(position: position, hash: String(decoding: h, as: UTF8.self))
    }

    /// The head recorded in `meta` when it is the log's last event (at its position, and its bytes
    /// hash to its hash); nil when the two disagree.
    public static func confirmedHead(_ txn: LMDBTransaction) throws -> ChainHead? {
        let head = try head(txn)
        let last = try values(txn, from: head.position, limit: 2)
        let agrees = head.position == 0 ? last.isEmpty
            : last.count == 1 && last[0].0 == head.position && SHA256.hex(last[0].1) == head.hash
        return agrees ? head : nil
    }

    /// Records `head` in `meta`: once per write transaction, after its last `append`.
    public static func writeHead(_ head: ChainHead, _ txn: LMDBTransaction) throws {
        try txn.put(metaDatabase, Array("head_position".utf8), Array(String(head.position).utf8))
        try txn.put(metaDatabase, Array("head_hash".utf8), Array(head.hash.utf8))
    }

    /// Appends `events` after `head` with `MDB_APPEND`, advancing `head`. The caller records the
    /// head it ends at (`writeHead`) before the transaction commits.
    public static func append(_ events: [NewEvent], commandID: String?, recordedAt: Timestamp,
                              head: inout ChainHead, _ txn: LMDBTransaction) throws -> [StoredEvent] {
        let unchained = events.enumerated().map { n, event in
            UnchainedEvent(position: head.position + 1 + UInt64(n), event: event, commandID: commandID, recordedAt: recordedAt)
        }
        return try append(chaining: unchained, head: &head, txn)
    }

    /// An event encoded at its position with its `prev_hash` left blank: the expensive part of an
    /// append (writing its data as JSON), which needs nothing of the chain and so can be made for
    /// many events at once on every core; `append(chaining:)` then fills in the hashes in order.
    public struct UnchainedEvent: Sendable {
        public let position: UInt64
        let event: NewEvent
        let recordedAt: Timestamp
        let commandID: String?
        var bytes: [UInt8]
        /// Where the 64 hex digits of `prev_hash` go in `bytes`.
        let hashOffset: Int

        public init(position: UInt64, event: NewEvent, commandID: String?, recordedAt: Timestamp) {
            self.position = position
            self.event = event
            self.recordedAt = recordedAt
            self.commandID = commandID
            var offset = 0
            bytes = EventLog.encode(position: position, event: event, recordedAt: recordedAt, commandID: commandID,
                                    prevHash: SHA256.zeroHex, hashOffset: &offset)
            hashOffset = offset
        }
    }

    /// Appends events encoded ahead (`UnchainedEvent`), which must follow `head` position by
    /// position: each gets the hash of the value before it, is stored with `MDB_APPEND`, and
    /// advances `head`. The bytes stored are exactly those `encode` writes. The caller records
    /// the head it ends at (`writeHead`) before the transaction commits.
    public static func append(chaining events: [UnchainedEvent], head: inout ChainHead, _ txn: LMDBTransaction) throws -> [StoredEvent] {
        let dbi = try txn.handle(eventsDatabase)
        var stored: [StoredEvent] = []
        stored.reserveCapacity(events.count)
        var previous = Array(head.hash.utf8)
        precondition(previous.count == 64, "a chain head's hash is 64 hex digits")
        for var e in events {
            precondition(e.position == head.position + 1, "events are appended position by position")
            e.bytes.withUnsafeMutableBufferPointer { b in
                for i in 0..<64 { b[e.hashOffset + i] = previous[i] }
            }
            try txn.put(dbi, key(e.position), e.bytes, append: true)
            let prevHash = String(decoding: previous, as: UTF8.self)
            stored.append(StoredEvent(position: e.position, event: e.event, recordedAt: e.recordedAt, commandID: e.commandID,
                                      prevHash: prevHash, bytes: e.bytes))
            Hex.encode(SHA256.digest(e.bytes), into: &previous)
            head.position = e.position
        }
        if !events.isEmpty { head.hash = String(decoding: previous, as: UTF8.self) }
        return stored
    }

    /// Raw values from `from` on, at most `limit`, in one short read transaction.
    public static func values(_ txn: LMDBTransaction, from: UInt64, limit: Int) throws -> [(UInt64, [UInt8])] {
        var out: [(UInt64, [UInt8])] = []
        guard limit > 0 else { return out }
        try txn.scan(eventsDatabase, from: key(max(from, 1))) { k, v in
            // A key that is no 8-byte position is not a log entry (`verify` counts such keys).
            guard let position = position(fromKey: k) else { return true }
            out.append((position, Array(v)))
            return out.count < limit
        }
        return out
    }
}
