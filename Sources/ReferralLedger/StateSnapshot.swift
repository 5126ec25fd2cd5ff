import Foundation
import LedgerCodec
import LedgerStore
import ReferralRules

/// A saved copy of the writer's decision state and the head it covers (database `snapshot`),
/// so that opening a long ledger folds only the events after it instead of the whole log.
/// It is a cache: never trusted over the log. It is used only when its format matches this
/// code's and the event at its position still hashes to the head it recorded; otherwise the
/// open folds from the start.
enum StateSnapshot {
    static let database = "snapshot"
    /// Bumped whenever the shape of the folded state changes.
    static let format = "1"

    static func encode(_ state: LedgerState) throws -> [UInt8] {
        Array(try JSONEncoder().encode(state))
    }

    static func save(_ bytes: [UInt8], head: ChainHead, _ txn: LMDBTransaction) throws {
        let header: JSONValue = ["format": .string(format), "position": .int(Int64(head.position)), "hash": .string(head.hash)]
        try txn.put(database, Array("header".utf8), header.bytes)
        try txn.put(database, Array("state".utf8), bytes)
    }

    /// The saved state and head, when usable against this log.
    static func load(_ txn: LMDBTransaction) throws -> (LedgerState, ChainHead)? {
        guard let headerBytes = try txn.get(database, Array("header".utf8)),
              let header = try? JSONValue(parsing: headerBytes),
              header["format"].stringValue == format,
              let position = header["position"].intValue, position > 0,
              let hash = header["hash"].stringValue,
              let value = try txn.get(EventLog.eventsDatabase, EventLog.key(UInt64(position))),
              SHA256.hex(value) == hash,
              let stateBytes = try txn.get(database, Array("state".utf8)),
              let state = try? JSONDecoder().decode(LedgerState.self, from: Data(stateBytes)),
              state.head == UInt64(position) else { return nil }
        return (state, ChainHead(position: UInt64(position), hash: hash))
    }
}
